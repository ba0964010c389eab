"""The chart on a real kube-apiserver 1.36.2 (issue 22, 1): ``helm install``
with its defaults and with every optional object and platform knob, ``helm upgrade`` to the
same chart, the CRD Established; printer columns and defaults as a user
sees them through kubectl."""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Any

import yaml

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator import crd
from memoryguard_kuberay.operator.guardspec import read_guard_spec

from ..devworld import ROOT
from ..procs import VENV_BIN
from .controlplane import ControlPlane

CHART = str(ROOT / "charts" / "memoryguard")
CRD_NAME = f"{C.PLURAL}.{C.GROUP}"
# The Prometheus Operator's kinds, as stand-in CRDs that keep any field: its
# own CRDs are not on this machine. What is checked is the chart's side:
# that it renders these objects where the API serves them and that the
# server stores them.
MONITORING = [("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")]


def _stand_in_crd(plural: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def _established(real: ControlPlane, name: str) -> bool:
    doc = real.admin().get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (doc.get("status") or {}).get("conditions") or [])


def test_install_with_defaults_then_upgrade(real: ControlPlane) -> None:
    real.helm("install", "mg-defaults", CHART, "-n", "mg-defaults", "--create-namespace")
    assert _established(real, CRD_NAME)
    # The CRD the server holds is the one the generator makes (nothing refused, nothing dropped).
    held = real.admin().get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    assert held["spec"]["versions"][0]["schema"] == crd.crd()["spec"]["versions"][0]["schema"]
    out = real.helm("upgrade", "mg-defaults", CHART, "-n", "mg-defaults")
    assert "REVISION: 2" in out.stdout and "STATUS: deployed" in out.stdout, out.stdout
    kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(
        real.helm("get", "manifest", "mg-defaults", "-n", "mg-defaults").stdout) if d}
    for kind, name in kinds:
        args = ["get", kind, name, "-o", "name"] + ([] if kind.startswith("Cluster") else ["-n", "mg-defaults"])
        assert real.kubectl(*args).stdout.strip(), (kind, name)


def test_install_with_every_optional_object(real: ControlPlane) -> None:
    api = real.admin()
    for plural, kind in MONITORING:
        api.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _stand_in_crd(plural, kind))
    for plural, _ in MONITORING:
        real.wait_established(f"{plural}.monitoring.coreos.com")
    # The chart puts Roles and NetworkPolicies into the watched namespaces:
    # they must exist first (the server answers 404 and the install fails).
    api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "ray-a"}})
    real.helm("install", "mg-all", CHART, "-n", "mg-all", "--create-namespace",
              "-f", str(ROOT / "examples" / "values" / "prometheus-operator.yaml"),
              "-f", str(ROOT / "examples" / "values" / "platform.yaml"),
              "--set", "watchNamespaces={ray-a}", "--set", "networkPolicy.enabled=true")
    manifest = [d for d in yaml.safe_load_all(real.helm("get", "manifest", "mg-all", "-n", "mg-all").stdout) if d]
    kinds = {d["kind"] for d in manifest}
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy", "Role", "RoleBinding",
            "PodDisruptionBudget", "ServiceAccount"} <= kinds, kinds
    for d in manifest:
        ns = d["metadata"].get("namespace")
        args = ["get", d["kind"], d["metadata"]["name"], "-o", "name"] + (["-n", ns] if ns else [])
        assert real.kubectl(*args).stdout.strip(), d["kind"]
    out = real.helm("upgrade", "mg-all", CHART, "-n", "mg-all", "--reuse-values")
    assert "STATUS: deployed" in out.stdout


def test_printer_columns_and_defaults_as_a_user_sees_them(real: ControlPlane, tmp_path: Any) -> None:
    real.kubectl("create", "namespace", "mg-columns")
    guard = {"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": C.KIND,
             "metadata": {"name": "g", "namespace": "mg-columns"}, "spec": {"clusterSelector": {"names": ["rc"]}}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(guard))
    real.wait_established(f"{CRD_NAME}")
    real.kubectl("apply", "-f", str(path))
    header = real.kubectl("get", "mg", "-n", "mg-columns").stdout.splitlines()[0].split()
    assert header == ["NAME", "PODS", "AT", "RISK", "ROTATED", "REPORTING", "READY", "DRY", "RUN", "SEEN"]
    # A status as the operator writes it, for a guard whose sidecars do not
    # all report (issue 26, 6): REPORTING reads False, and `get -A` fits in
    # 100 columns for usual names; -o wide adds the clusters and the last action.
    from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
    from memoryguard_kuberay.operator import status as st
    from memoryguard_kuberay.operator.sidecars.sidecar_client import PollFailure

    healthy = Decision(Action.NONE, Reason.HEALTHY, "ok", Evidence())
    views = [st.PodView(f"llm-serving-workers-worker-{i:05d}", "workers", healthy,
                        "unreachable" if i == 0 else None, failure=PollFailure.UNREACHABLE if i == 0 else None)
             for i in range(5)]
    built = st.build(generation=1, clusters=["llm-serving"], pods=views, spec_error=None, missing_clusters=[],
                     rotations={"total": 12}, last_action="WorkerRotated: x", now_iso="2026-12-01T00:00:00Z",
                     previous={}, last_action_brief="WorkerRotated llm-serving-workers-worker-00042"[:st.BRIEF_MAX])
    built["lastCycleTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 30))  # as the heartbeat
    # A usual guard name beside "g": the width is a user's, with names as theirs are.
    long_guard = {**guard, "metadata": {"name": "llm-serving-prod-guard", "namespace": "mg-columns"}}
    real.admin().ok("POST", f"/apis/{C.GROUP}/{C.VERSION}/namespaces/mg-columns/{C.PLURAL}", long_guard)
    for name in ("g", "llm-serving-prod-guard"):
        real.admin().merge(f"/apis/{C.GROUP}/{C.VERSION}/namespaces/mg-columns/{C.PLURAL}/{name}/status",
                           {"status": built})
    lines = real.kubectl("get", "mg", "-A").stdout.splitlines()
    print("\n" + "\n".join(lines))
    row = next(line for line in lines if "llm-serving-prod-guard" in line)
    assert row.split()[2:7] == ["5", "0", "12", "False", "True"], row
    assert re.fullmatch(r"3[0-9]s", row.split()[8]), row  # SEEN: the heartbeat's age
    assert max(len(line) for line in lines) <= 100, lines
    # The status has a schema: kubectl explain says what each part is.
    explained = real.kubectl("explain", "mg.status.conditions").stdout
    assert "Reporting: every guarded pod's sidecar reports memory" in " ".join(explained.split()), explained
    wide = real.kubectl("get", "mg", "-n", "mg-columns", "-o", "wide").stdout.splitlines()
    assert "CLUSTERS" in wide[0] and "LAST ACTION" in wide[0] and "WorkerRotated" in wide[1], wide
    held = yaml.safe_load(real.kubectl("get", "mg", "g", "-n", "mg-columns", "-o", "yaml").stdout)
    # The defaults the server filled in read as the reader's own defaults.
    assert read_guard_spec(held["spec"]) == read_guard_spec(guard["spec"])
    assert held["spec"]["sampling"] == {"intervalSeconds": 15, "sidecarPort": 9108, "timeoutSeconds": 5}


def test_uninstall_when_the_hooks_pod_cannot_run_as_install_md_says(real: ControlPlane) -> None:
    """Issue 42, 5: the hook's pod cannot run (here nothing schedules it, as
    an image that cannot be pulled or a quota would leave it): ``helm
    uninstall`` fails at its timeout, and the steps of install.md's "When
    the hook's pod cannot run" finish the job, leaving nothing of the release
    but the failed hook Job, which Kubernetes deletes once it has ended."""
    import time

    api, release, ns = real.admin(), "mgh", "mgh-system"
    for n in (ns, "mgh-ray"):
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": n}})
    real.helm("install", release, CHART, "-n", ns, "--set", "watchNamespaces={mgh-ray}",
              "--set", "uninstallHook.timeoutSeconds=10")
    t0 = time.monotonic()
    failed = real.helm("uninstall", release, "-n", ns, "--timeout", "15s", check=False)
    took = time.monotonic() - t0
    print(f"\nhelm uninstall with a hook pod that cannot run: exit {failed.returncode} after {took:.0f} s: "
          f"{(failed.stderr or failed.stdout).strip()[:300]}")
    assert failed.returncode != 0 and took >= 15
    job = api.ok("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{release}-memoryguard-uninstall")
    assert job["spec"]["activeDeadlineSeconds"] == 70 and job["spec"]["ttlSecondsAfterFinished"] == 600
    # install.md's steps, from a user's machine with their kubeconfig: the
    # guards the hook would have deleted, deleted, then helm without the hook.
    guards = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/mgh-ray/{C.PLURAL}"
    api.ok("POST", guards, {"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": "MemoryGuard",
                            "metadata": {"name": "left"}, "spec": {"clusterSelector": {"names": ["rc"]}}})
    cli = [str(VENV_BIN / "memoryguard-kuberay"), "uninstall", "-n", "mgh-ray"]
    env = {**os.environ, "KUBECONFIG": str(real.kubeconfig)}
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, timeout=60, env=env)
    # What was asked for, on standard output (issue 61, 7); its evidence listed by label on the real server.
    assert dry.returncode == 0 and "would delete 1 MemoryGuard(s) in mgh-ray: mgh-ray/left" in dry.stdout, dry
    assert api.get(f"{guards}/left") is not None  # a dry run deletes nothing
    done = subprocess.run([*cli, "--timeout", "30"], capture_output=True, text=True, timeout=90, env=env)
    assert done.returncode == 0 and api.ok("GET", guards)["items"] == [], done.stdout + done.stderr
    out = real.helm("uninstall", release, "-n", ns, "--no-hooks")
    assert out.returncode == 0

    def left() -> list[str]:
        return sorted(real.kubectl(
            "get", "all,sa,role,rolebinding,clusterrole,clusterrolebinding,configmap,networkpolicy,"
            "poddisruptionbudget,lease,job", "-A", "-l", f"app.kubernetes.io/instance={release}",
            "-o", "name").stdout.split())

    deadline = time.monotonic() + 60
    while (now := left()) and any(not k.startswith(("job.batch/", "pod/")) for k in now) \
            and time.monotonic() < deadline:
        time.sleep(1)
    print(f"left after --no-hooks: {now}")
    assert [k for k in now if not k.startswith(("job.batch/", "pod/"))] == [], now


def test_try_it_out_of_cluster_as_install_md_says(real: ControlPlane, tmp_path: Any) -> None:
    """Issue 42, 8: install.md's "Try it out of cluster", run as written on
    the real server with a user's kubeconfig (the admin's here): its
    commands are read from the doc, the example guard edited as it says
    (its cluster: KubeRay's complete sample, no KubeRay running: no pods),
    the operator run from the checkout; what it decides shown by ``top``
    and ``kubectl describe``; the guard deleted while it runs takes the
    sidecar back out of the templates."""
    import re
    import time

    from ..devworld import KUBERAY
    from ..procs import free_port, stop

    text = (ROOT / "docs" / "install.md").read_text()
    section = text.split("## Try it out of cluster", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make setup", "kubectl apply --server-side -f crds/memoryguard.io_memoryguards.yaml",
                        "kubectl apply -f examples/guards/dry-run.yaml",
                        ".venv/bin/memoryguard-kuberay operator --standalone -n default"], commands
    crd, sample = KUBERAY / "ray.io_rayclusters.yaml", KUBERAY / "ray-cluster.complete.yaml"
    if not crd.exists() or not sample.exists():
        import pytest

        pytest.skip(f"{KUBERAY} lacks KubeRay's CRD or its complete sample: read from beside the checkout")
    real.kubectl("apply", "--server-side", "-f", str(crd))
    real.wait_established("rayclusters.ray.io")
    real.kubectl("apply", "-n", "default", "-f", str(sample))
    # `make setup` is this test run's own venv. The commands, from the checkout:
    real.kubectl("apply", "--server-side", "-f", str(ROOT / commands[1].split()[-1]))
    guard_file = ROOT / commands[2].split()[-1]
    assert "namespace: default" in guard_file.read_text() and "raycluster-complete" in guard_file.read_text()
    real.kubectl("apply", "-f", str(guard_file))  # its namespace and cluster already these here
    argv = commands[3].split()
    env = {**os.environ, "KUBECONFIG": str(real.kubeconfig), "MEMORYGUARD_METRICS_HOST": "127.0.0.1",
           "MEMORYGUARD_METRICS_PORT": str(free_port()),  # this run's own ports, beside any other run
           "MEMORYGUARD_LIVENESS_ENDPOINT": f"http://127.0.0.1:{free_port()}/healthz"}
    log = tmp_path / "operator.log"
    api = real.admin()
    guard = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/default/{C.PLURAL}/watch-only"
    rc_path = "/apis/ray.io/v1/namespaces/default/rayclusters/raycluster-complete"

    def injected() -> bool:
        rc = api.ok("GET", rc_path)
        return any(c["name"] == "memoryguard-sidecar" for g in [rc["spec"]["headGroupSpec"],
                                                                 *rc["spec"]["workerGroupSpecs"]]
                   for key in ("containers", "initContainers") for c in g["template"]["spec"].get(key) or [])

    def wait(pred: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"{what}; operator log:\n{log.read_text(errors='replace')[-4000:]}"
            time.sleep(0.5)

    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ROOT / argv[0]), *argv[1:]], cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait(lambda: ((api.get(guard) or {}).get("status") or {}).get("conditions"), "the guard's status")
        wait(injected, "the dry run's sidecar in the templates")
        top = subprocess.run([str(VENV_BIN / "memoryguard-kuberay"), "top", "-n", "default", "--once"],
                             capture_output=True, text=True, timeout=120, env=env)
        # No KubeRay runs here, so the sample has no pods: top says so.
        assert top.returncode == 0 and "MemoryGuard top: default on https://" in top.stdout and (
            "no guarded pods" in top.stdout), top.stdout + top.stderr
        described = real.kubectl("describe", "memoryguard", "watch-only", "-n", "default").stdout
        print(f"\nkubectl describe memoryguard watch-only (out of cluster):\n{described}")
        assert re.search(r"Dry Run:\s+true", described) and "SidecarInjected" in described, described
        # Deleted while the operator runs: its finalizer takes the sidecar back out.
        api.ok("DELETE", guard)
        wait(lambda: api.get(guard) is None, "the guard gone")
        assert not injected()
    finally:
        stop(proc, timeout=20)
    assert "Traceback" not in log.read_text(errors="replace")


def test_the_runbooks_eviction_by_hand_evicts_on_the_real_server(real: ControlPlane) -> None:
    """Issue 61, 4: the runbook told users to rotate by hand with the
    annotation where the guard is in dry run, where it only plans. The way it
    gives now (the Eviction API through kubectl) is run as written, with the
    placeholders filled, against the real apiserver."""
    text = (ROOT / "docs" / "runbooks.md").read_text()
    section = text.split("## MemoryGuardWorkerProjectedOOM", 1)[1].split("\n## ", 1)[0]
    snippet = section.split("```sh\n", 1)[1].split("```", 1)[0]
    ns, pod = "mg-runbook", "w-leaking"
    real.kubectl("create", "namespace", ns)
    real.admin().ok("POST", f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": pod}, "spec": {"nodeName": "n-absent", "containers": [{"name": "c", "image": "x"}]}})
    script = snippet.replace("<ns>", ns).replace("<pod>", pod).replace("kubectl ", f"{real.tools / 'kubectl'} ")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "KUBECONFIG": str(real.kubeconfig)})
    assert out.returncode == 0 and '"code":201' in out.stdout, (script, out.stdout, out.stderr)
    assert (real.admin().get(f"/api/v1/namespaces/{ns}/pods/{pod}") or {}).get("metadata", {}).get(
        "deletionTimestamp"), "the pod was not evicted"
