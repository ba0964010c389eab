"""The operator on a real control plane (issue 22, 3-5), run as the chart
runs it (its Deployment's args and environment) with a token of the chart's
own ServiceAccount, never the admin's; the real KubeRay (v1.7.0, with a
real kube-scheduler: tests/realk8s/kuberaykit.py) makes, replaces and
deletes the pods, and the kubelet is played by tests/realk8s/standin.py
through the real API, each pod's sidecar a real process replaying a trace,
each pod's grace period waited out as Ray's would be. The tests run in
file order: the uninstall and the audit of every request come last."""

from __future__ import annotations

import collections
import datetime
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection, patches
from memoryguard_kuberay.operator.sharding import shardplan
from memoryguard_kuberay.operator.sharding.shards import ANN_PODS
from memoryguard_kuberay.operator.status import pods_listed

from ..devworld import KUBERAY, ROOT
from ..operator.conftest import HEALTHY, LEAK, guard, raycluster
from ..procs import VENV_BIN, stop
from . import kuberaykit
from .controlplane import ControlPlane
from .operatorproc import operator_command
from .standin import StandIn

NS, RELEASE_NS, RELEASE = "ray-e2e", "mg-system", "mg"
SA = "mg-memoryguard"
PORT = 19108
SPEED = 600.0
GUARDS = f"/apis/memoryguard.io/v1alpha1/namespaces/{NS}/memoryguards"


class Release:
    def __init__(self, cp: ControlPlane, workdir: Path, standin: StandIn, operator: subprocess.Popen[bytes],
                 log: Path, replica: Callable[[], tuple[list[str], dict[str, str]]]) -> None:
        self.cp, self.api, self.workdir, self.standin, self.operator, self.log = (
            cp, cp.admin(), workdir, standin, operator, log)
        self.replica = replica  # another replica's command and env, as the Deployment runs one
        # When helm uninstall began: from then on the release's Roles go while
        # this out-of-cluster operator (the Deployment's pod, which helm's
        # deletion would end) still runs, so its refusals count no more.
        self.uninstalling_since: float | None = None

    def wait_for(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; stand-in errors: "
                             f"{self.standin.errors[-3:]}\n--- operator log ---\n"
                             f"{self.log.read_text(errors='replace')[-6000:]}")

    def events(self, reason: str, kind: str) -> list[dict[str, Any]]:
        items = self.api.ok("GET", f"/api/v1/namespaces/{NS}/events")["items"]
        return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("kind") == kind]

    def put_guard(self, g: dict[str, Any]) -> None:
        g["metadata"]["namespace"] = NS
        self.api.ok("POST", GUARDS, g)


def _first_worker_of_each_cluster_leaks() -> Callable[[dict[str, Any]], Path]:
    seen: dict[str, int] = {}  # cluster -> workers started

    def trace_for(pod: dict[str, Any]) -> Path:
        labels = pod["metadata"]["labels"]
        if labels.get("ray.io/node-type") == "head":
            return HEALTHY[0]
        n = seen[labels["ray.io/cluster"]] = seen.get(labels["ray.io/cluster"], 0) + 1
        return LEAK if n == 1 else HEALTHY[n % len(HEALTHY)]

    return trace_for


@pytest.fixture(scope="module")
def release(real: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    crd_file = KUBERAY / "ray.io_rayclusters.yaml"
    if not crd_file.exists():
        pytest.skip(f"{crd_file} is absent: KubeRay's CRD is read from beside the checkout, never copied in")
    workdir = tmp_path_factory.mktemp("operator")
    api = real.admin()
    for ns in (NS, RELEASE_NS):
        if api.get(f"/api/v1/namespaces/{ns}") is None:
            api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    real.kubectl("apply", "--server-side", "-f", str(crd_file))  # its annotation would pass 256 KiB
    real.wait_established("rayclusters.ray.io")
    real.helm("install", RELEASE, str(ROOT / "charts" / "memoryguard"), "-n", RELEASE_NS,
              "--set", f"watchNamespaces={{{NS}}}", "--set", f"sidecar.sidecarPort={PORT}")
    kubeconfig = real.service_account_kubeconfig(SA, RELEASE_NS, workdir / "operator.kubeconfig")
    # The apiserver's RBAC authorizer learns the chart's Roles from a watch, a
    # moment after helm created them: a request in that moment is refused
    # (seen once: the operator's first GET of its Lease, 403). The operator
    # retries it, but this test counts every 403, so it starts the operator
    # once the authorizer says the grants are in.
    _wait_authorized(real, f"system:serviceaccount:{RELEASE_NS}:{SA}", [
        ("get", "coordination.k8s.io", "leases", RELEASE_NS), ("list", "coordination.k8s.io", "leases", RELEASE_NS),
        ("list", "memoryguard.io", "memoryguards", NS),
        ("list", "", "pods", NS), ("patch", "ray.io", "rayclusters", NS)])
    epoch = time.time()

    def replica() -> tuple[list[str], dict[str, str]]:
        cmd, env = operator_command(real, kubeconfig, namespace=RELEASE_NS, deployment=SA, extra_env={
            "MEMORYGUARD_TIME_SCALE": str(SPEED), "MEMORYGUARD_DRAIN": "false",
            "MEMORYGUARD_WATCH_TIMEOUT_SECONDS": "60", "MEMORYGUARD_EPOCH": str(epoch)})
        return cmd, env

    cmd, env = replica()
    log = workdir / "operator.log"
    why = kuberaykit.present(kuberaykit.VERSIONS[0])
    if why:
        pytest.skip(why)
    with kuberaykit.running(real, kuberaykit.VERSIONS[0], [NS], workdir / "kuberay"), \
            StandIn(real, NS, workdir, _first_worker_of_each_cluster_leaks(), speed=SPEED, epoch=epoch,
                    sidecar_port=PORT, sweep=(RELEASE_NS,)) as standin, open(log, "wb") as out:
        operator = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
        try:
            yield Release(real, workdir, standin, operator, log, replica)
        finally:
            stop(operator, timeout=20)


def _wait_authorized(real: ControlPlane, user: str, checks: list[tuple[str, str, str, str]],
                     timeout: float = 30) -> None:
    api = real.admin()
    deadline = time.monotonic() + timeout
    pending = list(checks)
    while pending and time.monotonic() < deadline:
        verb, group, resource, ns = pending[0]
        review = api.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NS}",
                                              "system:authenticated"],
                     "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": ns}}})
        if (review.get("status") or {}).get("allowed"):
            pending.pop(0)
        else:
            time.sleep(0.2)
    assert not pending, f"the chart's RBAC does not grant {pending} to {user}"


def _template_containers(rc: dict[str, Any]) -> list[str]:
    """Every container of the worker templates, native sidecars included
    (this 1.36 server runs them: the operator injects its sidecar as one)."""
    return [c["name"] for g in rc["spec"]["workerGroupSpecs"] for key in ("containers", "initContainers")
            for c in g["template"]["spec"].get(key) or []]


def _cluster(name: str, workers: int) -> dict[str, Any]:
    rc = raycluster(name=name, workers=workers)
    rc["metadata"]["namespace"] = NS
    return rc


def _guard(name: str, cluster: str, **spec: Any) -> dict[str, Any]:
    # The pods' 30 s grace period is 18,000 s of this 600x clock: a rotation's
    # wait for the pod's end, then for its replacement, gets 36,000 (60 s) each.
    spec["rotation"] = {"replacementTimeoutSeconds": 36000, **spec.get("rotation", {})}
    return guard(name=name, cluster=cluster, sampling={"sidecarPort": PORT}, **spec)


def test_a_leaking_worker_is_rotated_through_the_eviction_api(release: Release) -> None:
    r = release
    r.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", _cluster("leak-rc", 3))
    r.wait_for(lambda: sum(1 for p in r.standin.pods() if (p.get("status") or {}).get("phase") == "Running") == 4,
               60, "the head and 3 workers Running")
    leaking = next(n for n, t in r.standin.traces.items() if t == LEAK)
    r.put_guard(_guard("leak-guard", "leak-rc", rotation={"podDisruptionBudget": {"enabled": True,
                                                                                  "maxUnavailable": 1}},
                       sidecar={"inject": True, "port": PORT}))
    rotated = r.wait_for(lambda: r.events("WorkerRotated", "MemoryGuard"), 180, "the leaking worker rotated")
    assert leaking in rotated[0]["message"], rotated[0]["message"]
    # Evicted through the Eviction API (the audit log: the operator's own
    # token, a create on pods/eviction answered 201), gracefully (Terminating
    # first, then deleted by the kubelet's stand-in), and replaced.
    evictions = [e for e in r.cp.audit() if e.get("objectRef", {}).get("subresource") == "eviction"
                 and e["user"]["username"] == f"system:serviceaccount:{RELEASE_NS}:{SA}"]
    assert [(e["objectRef"]["name"], e["responseStatus"]["code"]) for e in evictions if
            e["responseStatus"]["code"] == 201] == [(leaking, 201)]
    assert leaking in r.standin.deleted
    r.wait_for(lambda: sum(1 for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/group") ==
                           "workergroup" and (p.get("status") or {}).get("phase") == "Running"
                           and p["metadata"]["labels"].get("ray.io/cluster") == "leak-rc") == 3, 60, "3 workers again")
    # Events on the pod and on the guard.
    for reason in ("WorkerRotationStarted", "WorkerEvicted", "WorkerRotated"):
        assert r.events(reason, "MemoryGuard"), reason
        r.wait_for(lambda reason=reason: [e for e in r.events(reason, "Pod")
                                          if e["involvedObject"]["name"] == leaking], 20, f"{reason} on the pod")
    # The guard's own PDB, its status computed by the real disruption controller.
    pdb = r.wait_for(lambda: r.api.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/"
                                       "memoryguard-leak-rc-workergroup"), 30, "the guard's PDB")
    assert pdb["spec"]["minAvailable"] == 2
    pdb = r.wait_for(lambda: (lambda p: p if (p.get("status") or {}).get("expectedPods") == 3 else None)(
        r.api.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/memoryguard-leak-rc-workergroup")),
        30, "the disruption controller's status on the guard's PDB")
    assert pdb["status"]["currentHealthy"] >= 2
    # The status was written; the injection patch was accepted by KubeRay's schema.
    status = r.wait_for(lambda: (r.api.get(f"{GUARDS}/leak-guard") or {}).get("status"), 30, "the guard's status")
    assert status["rotations"]["total"] >= 1 and status["summary"]["pods"] >= 3
    rc = r.api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/leak-rc")
    names = _template_containers(rc)
    assert injection.SIDECAR_NAME in names
    assert r.events("SidecarInjected", "RayCluster")


def test_the_rotation_gap_with_the_real_kuberay(release: Release) -> None:
    """Eviction to replacement Ready, as the real KubeRay and the kubelet's
    30 s grace period make it (measured, printed: KubeRay replaces the pod
    only once it is gone)."""
    r = release
    evicted = [e for e in r.cp.audit() if e.get("objectRef", {}).get("subresource") == "eviction"
               and e["responseStatus"]["code"] == 201 and e["objectRef"]["name"].startswith("leak-rc")]
    assert evicted
    t_evict = _ts(evicted[0]["requestReceivedTimestamp"])
    deleted = [e for e in r.cp.audit() if e.get("verb") == "delete" and e.get("objectRef", {}).get("resource")
               == "pods" and e["objectRef"].get("name") == evicted[0]["objectRef"]["name"]
               and e["responseStatus"]["code"] == 200]
    pods = [p for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster") == "leak-rc"
            and p["metadata"]["labels"].get("ray.io/group") == "workergroup"
            and _ts(p["metadata"]["creationTimestamp"]) >= t_evict - 1]
    assert pods, "no replacement"
    new = min(pods, key=lambda p: p["metadata"]["creationTimestamp"])
    ready = next(c for c in new["status"]["conditions"] if c["type"] == "Ready")
    gone = _ts(deleted[-1]["requestReceivedTimestamp"]) if deleted else None
    created, ready_at = _ts(new["metadata"]["creationTimestamp"]), _ts(ready["lastTransitionTime"])
    assert gone is None or created >= gone - 1, "KubeRay made the replacement before the evicted pod was gone"
    print(f"\nrotation gap with the real KubeRay v1.7.0: evicted at 0 s, pod gone at "
          f"{(gone or 0) - t_evict:.0f} s, replacement {new['metadata']['name']} created at "
          f"{created - t_evict:.0f} s, Ready at {ready_at - t_evict:.0f} s (timestamps to the second)")
    assert ready_at - t_evict >= 29  # the grace period is waited out


def test_a_recreate_cluster_is_guarded_without_recreating_it(release: Release) -> None:
    """``upgradeStrategy: Recreate``: the guard (sidecar injection asked)
    changes no template, says so in its condition and once in an Event, and
    the real KubeRay recreates nothing; the head is the one it was."""
    r = release
    rc = _cluster("recreate-rc", 1)
    rc["spec"]["upgradeStrategy"] = {"type": "Recreate"}
    r.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", rc)
    r.wait_for(lambda: sum(1 for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster") ==
                           "recreate-rc" and (p.get("status") or {}).get("phase") == "Running") == 2, 60,
               "recreate-rc running")
    head = next(p["metadata"]["uid"] for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster")
                == "recreate-rc" and p["metadata"]["labels"].get("ray.io/node-type") == "head")
    r.put_guard(_guard("recreate-guard", "recreate-rc", sidecar={"inject": True, "port": PORT}))
    cond = r.wait_for(lambda: next((c for c in ((r.api.get(f"{GUARDS}/recreate-guard") or {}).get("status") or {})
                                    .get("conditions") or [] if c["type"] == "TemplatesWritable"
                                    and c["status"] == "False"), None), 60, "the TemplatesWritable condition")
    assert cond["reason"] == "UpgradeStrategyRecreate" and "recreate-rc" in cond["message"]
    time.sleep(5)  # several cycles (0.5 s each)
    held = r.events("TemplateChangesWithheld", "MemoryGuard")
    assert len([e for e in held if "recreate-rc" in e["message"]]) == 1, held
    now = r.api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/recreate-rc")
    assert injection.SIDECAR_NAME not in _template_containers(now)
    heads = [p for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster") == "recreate-rc"
             and p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    assert [(p["metadata"]["uid"], bool(p["metadata"].get("deletionTimestamp"))) for p in heads] == [(head, False)]
    r.api.ok("DELETE", f"{GUARDS}/recreate-guard")
    r.wait_for(lambda: r.api.get(f"{GUARDS}/recreate-guard") is None, 60, "recreate-guard gone")
    assert [p["metadata"]["uid"] for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster")
            == "recreate-rc" and p["metadata"]["labels"].get("ray.io/node-type") == "head"] == [head]


def _ts(iso: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_top_shows_the_real_clusters_guarded_pods_nearest_harm_first(release: Release) -> None:
    """``memoryguard-kuberay top`` against the real API server, with a
    user's kubeconfig (the admin's here): the guard of the test above, its
    pods nearest harm first, its rotation among the last actions; and the
    screen saved as a terminal capture."""
    r = release
    r.wait_for(lambda: ((r.api.get(f"{GUARDS}/leak-guard") or {}).get("status") or {}).get("pods"), 60,
               "the guard's pods in its status")
    shot = r.workdir / "top.svg"
    out = subprocess.run([str(VENV_BIN / "memoryguard-kuberay"), "top", "--once", "-n", NS, "--save", str(shot)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "KUBECONFIG": str(
                             r.cp.kubeconfig)})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"MemoryGuard top: {NS} on https://" in text and "OOM IN" in text and "VERDICT" in text, text
    rows = [ln for ln in text.splitlines() if ln.startswith("│") and f"{NS}/leak-guard" in ln]  # the table's
    status = r.api.get(f"{GUARDS}/leak-guard")["status"]
    assert len(rows) == min(len(status["pods"]), 40), text
    etas = [p.get("projectedOOMSeconds") for p in pods_listed(status).values()]
    if any(e is not None for e in etas):  # the nearest projected OOM is the first row
        first = min((e, n) for n, p in pods_listed(status).items() if (e := p.get("projectedOOMSeconds")) is not None)
        assert first[1] in rows[0], (first, rows[0])
    last = status["rotations"]["lastPod"]
    assert f"rotated {last}" in text.split("last actions:", 1)[1], text
    assert shot.read_text().startswith("<svg") and "leak-guard" in shot.read_text()
    # Watching for a few refreshes, it draws the guard's worker groups as a heat map when it stops.
    heat = r.workdir / "top-heatmap.png"
    out = subprocess.run([str(VENV_BIN / "memoryguard-kuberay"), "top", "-n", NS, "--interval", "1", "--for", "4",
                          "--heatmap", str(heat)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KUBECONFIG": str(r.cp.kubeconfig)})
    assert out.returncode == 0 and f"heat map written to {heat}" in out.stderr, out.stderr
    assert heat.read_bytes()[:4] == b"\x89PNG"


def _shard_leases(r: Release) -> list[dict[str, Any]]:
    """The release's shard Leases, as the real server has them."""
    items = r.api.ok("GET", f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases",
                     params={"labelSelector": f"memoryguard.io/lease-set={RELEASE}-memoryguard"})["items"]
    return [i for i in items if "-shard-" in i["metadata"]["name"]]


def _holders(r: Release) -> dict[str, str]:
    """Each shard Lease of the release -> its holder."""
    return {i["metadata"]["name"]: i["spec"].get("holderIdentity") or "" for i in _shard_leases(r)}


def _pods_annotations(r: Release) -> dict[int, str]:
    """Each shard's memoryguard.io/pods annotation, where its Lease has one."""
    return {int(i["metadata"]["name"].rsplit("-", 1)[1]): notes[ANN_PODS] for i in _shard_leases(r)
            if ANN_PODS in (notes := i["metadata"].get("annotations") or {})}


def test_a_second_replica_takes_its_share_of_the_shards_and_hands_them_back_on_a_clean_exit(release: Release) -> None:
    """The chart's shards (8) on real Leases, with the chart's RBAC: the one
    replica holds all; a second, started as the Deployment starts one, takes
    its share without a restart of the first; stopped, it gives them back at once."""
    r = release
    first = r.wait_for(lambda: (lambda h: h if len(h) == 8 and len(set(h.values())) == 1 and "" not in h.values()
                                else None)(_holders(r)), 30, "the first replica holding all 8 shards")
    (alone,) = set(first.values())
    cmd, env = r.replica()
    log = r.workdir / "operator-2.log"
    with open(log, "wb") as out:
        second = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
    try:
        # Shards are placed by their pods (the guards of earlier tests have
        # some), not their count: both replicas hold some, and every one is held.
        split = r.wait_for(lambda: (lambda h: h if len(h) == 8 and "" not in h.values()
                                    and len(collections.Counter(h.values())) == 2 else None)(_holders(r)), 60,
                           "the two replicas holding every shard between them")
        assert alone in split.values() and r.operator.poll() is None  # the first went on, resharded in place
        # Guards spread over both replicas: each is acted on (its status
        # written) and, deleted, finalized by its shard's holder while kopf
        # runs in both (the other's handler waits; kopf's record is shared).
        holder_of = {int(k.rsplit("-", 1)[1]): v for k, v in split.items()}
        names = [f"probe-{i}" for i in range(200)]
        probes = [n for n in names if holder_of[shardplan.shard_of(NS, n, 8)] == alone][:3] + [
            n for n in names if holder_of[shardplan.shard_of(NS, n, 8)] != alone][:3]
        for name in probes:
            r.put_guard(_guard(name, "absent-rc"))
        r.wait_for(lambda: all((r.api.get(f"{GUARDS}/{n}") or {}).get("status") for n in probes), 60,
                   "every probe guard's status written by its shard's replica")
        # Each holder writes its shards' pods on their Leases (placement by
        # pods): the real server keeps the annotation through the renewals' PUTs.
        counted = r.wait_for(lambda: (lambda a: a if all(a.get(shardplan.shard_of(NS, n, 8), "").isdigit()
                                                         for n in probes) else None)(_pods_annotations(r)), 30,
                             "the probe guards' shard Leases naming their pods")
        assert all(int(v) >= 0 for v in counted.values())
        for name in probes:
            r.api.ok("DELETE", f"{GUARDS}/{name}")
        r.wait_for(lambda: all(r.api.get(f"{GUARDS}/{n}") is None for n in probes), 60,
                   "every probe guard finalized and gone")
    finally:
        stop(second, timeout=20)
    r.wait_for(lambda: set(_holders(r).values()) == {alone}, 20, "every shard back with the first replica")
    assert "Traceback" not in log.read_text(errors="replace")


def test_remediation_patches_are_accepted_by_the_raycluster_schema(release: Release) -> None:
    # The JSON patches the operator builds for each remediation, sent as it
    # sends them, with dryRun=All: KubeRay's real schema must take them.
    r = release
    rc = r.api.ok("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/leak-rc")
    spec = read_guard_spec({"clusterSelector": {"names": ["leak-rc"]}})
    for env in (patches.jemalloc_env(spec.jemalloc, None), patches.spilling_env(spec.spilling),
                dict(patches.CALL_SITES_ENV)):
        ops = patches.remediation_patch(rc, "workergroup", env, record="test")
        assert ops
        status, doc, _ = r.api.call("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/leak-rc", ops,
                                    params={"dryRun": "All", "fieldValidation": "Strict"},
                                    ctype="application/json-patch+json")
        assert status == 200, doc


def test_a_users_pdb_that_refuses_is_honoured_until_the_deadline(release: Release) -> None:
    r = release
    r.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", _cluster("held-rc", 2))
    r.api.ok("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", {
        "metadata": {"name": "no-disruption"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {
            "ray.io/cluster": "held-rc", "ray.io/group": "workergroup"}}}})
    r.wait_for(lambda: sum(1 for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster") == "held-rc"
                           and (p.get("status") or {}).get("phase") == "Running") == 3, 60, "held-rc running")
    # 1,800 s of the operator's clock is 3 s here.
    r.put_guard(_guard("held-guard", "held-rc", rotation={"evictionTimeoutSeconds": 1800}))
    failed = r.wait_for(lambda: r.events("WorkerRotationFailed", "MemoryGuard"), 120,
                        f"the rotation given up ({r.api.get(f'{GUARDS}/held-guard')})")
    assert "no-disruption" in failed[0]["message"] and "evictionTimeoutSeconds" in failed[0]["message"]
    refused = [e for e in r.cp.audit() if e.get("objectRef", {}).get("subresource") == "eviction"
               and e["objectRef"].get("name", "").startswith("held-rc") and e["responseStatus"]["code"] == 429]
    assert len(refused) >= 3
    assert all(p["metadata"]["labels"].get("ray.io/cluster") != "held-rc" or not p["metadata"].get(
        "deletionTimestamp") for p in r.standin.pods())
    r.api.ok("DELETE", f"{GUARDS}/held-guard")


def test_a_users_first_hour_as_the_real_server_shows_it(release: Release) -> None:
    """Issue 42, 1-4, on the real server with the real KubeRay and scheduler:
    a guard whose spec names a cluster that is not there reads READY False
    (``kubectl get``) until the name is right; the recommended first step, a
    dry run, gives the figures and plans the leak's rotation, evicting
    nothing; a worker the scheduler cannot place stays Pending and has its
    own verdict, degrading nothing; a ``rotate`` value the operator does not
    take is said on the pod."""
    r = release
    rc = _cluster("first-rc", 2)
    waiting = {**rc["spec"]["workerGroupSpecs"][0], "groupName": "waiting", "replicas": 1, "minReplicas": 1}
    waiting["template"] = {"spec": {**waiting["template"]["spec"],
                                    "nodeSelector": {"memoryguard.io/test-no-such-node": "true"}}}
    rc["spec"]["workerGroupSpecs"].append(waiting)
    r.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", rc)

    def first_rc(group: str) -> list[dict[str, Any]]:
        return [p for p in r.standin.pods() if p["metadata"]["labels"].get("ray.io/cluster") == "first-rc"
                and p["metadata"]["labels"].get("ray.io/group") == group]

    r.wait_for(lambda: sum(1 for p in first_rc("workergroup") if (p.get("status") or {}).get("phase") == "Running")
               == 2 and first_rc("waiting"), 60, "first-rc's 2 workers Running, its waiting worker made")
    pending = first_rc("waiting")[0]["metadata"]["name"]
    guard = _guard("first-guard", "first-rc", dryRun=True, sidecar={"inject": True, "port": PORT})
    guard["spec"]["clusterSelector"]["names"] = ["first-rc", "frist-rc"]  # a typo beside the right name
    r.put_guard(guard)

    def ready() -> dict[str, Any] | None:
        st = (r.api.get(f"{GUARDS}/first-guard") or {}).get("status") or {}
        return next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), None)

    cond = r.wait_for(lambda: (c := ready()) and c["reason"] == "ClusterNotFound" and c, 60, "Ready: ClusterNotFound")
    assert cond["status"] == "False" and "frist-rc" in cond["message"], cond
    row = _columns(r, "first-guard")
    assert (row["READY"], row["DRY RUN"]) == ("False", "true"), row
    r.api.ok("PATCH", f"{GUARDS}/first-guard", {"spec": {"clusterSelector": {"names": ["first-rc"]}}},
             ctype="application/merge-patch+json")
    r.wait_for(lambda: (c := ready()) and c["status"] == "True", 60, "Ready True once the name is right")
    row = _columns(r, "first-guard")
    assert (row["READY"], row["DRY RUN"]) == ("True", "true"), row

    # The dry run's figures: every running worker's, the leak's rotation planned.
    planned = r.wait_for(lambda: [e for e in r.events("WorkerRotationPlanned", "MemoryGuard")
                                  if "first-rc" in e["message"]], 120, "the dry run's planned rotation")
    assert "dry run" in planned[0]["message"], planned[0]["message"]
    st = r.api.get(f"{GUARDS}/first-guard")["status"]
    running = [p["metadata"]["name"] for p in first_rc("workergroup")]
    figures = pods_listed(st)
    assert all(figures[n]["workingSetBytes"] and figures[n]["limitBytes"] for n in running), figures
    # The worker the scheduler cannot place: Pending, its own verdict, nothing degraded.
    assert (r.api.ok("GET", f"/api/v1/namespaces/{NS}/pods/{pending}").get("status") or {}).get("phase") == "Pending"
    unplaced = pods_listed(st)[pending]
    assert unplaced["pollFailure"] == "PodNotRunning" and "Pending" in unplaced["sidecarError"], unplaced
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False" and st["summary"]["sidecarUnreachable"] == 0, (degraded, st["summary"])
    # A value of the rotate annotation the operator does not take, said on the pod.
    asked = running[-1]
    r.api.ok("PATCH", f"/api/v1/namespaces/{NS}/pods/{asked}",
             {"metadata": {"annotations": {"memoryguard.io/rotate": "please"}}}, ctype="application/merge-patch+json")
    ignored = r.wait_for(lambda: [e for e in r.events("RotateAnnotationIgnored", "Pod")
                                  if e["involvedObject"]["name"] == asked], 60, "RotateAnnotationIgnored on the pod")
    assert ignored[0]["type"] == "Warning" and "now" in ignored[0]["message"], ignored[0]
    # Nothing of first-rc was evicted or deleted: a dry run.
    assert not [e for e in r.cp.audit() if e.get("objectRef", {}).get("subresource") == "eviction"
                and e["objectRef"].get("name", "").startswith("first-rc")]
    assert all(not p["metadata"].get("deletionTimestamp") for p in first_rc("workergroup"))
    r.api.ok("DELETE", f"{GUARDS}/first-guard")
    r.wait_for(lambda: r.api.get(f"{GUARDS}/first-guard") is None, 60, "first-guard gone")
    r.api.ok("DELETE", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/first-rc")


def _columns(r: Release, name: str) -> dict[str, str]:
    """``kubectl get memoryguard NAME`` as a user reads it: each printer
    column's value, found under its header (values never hold spaces here
    but the last column's, which is not read)."""
    out = r.cp.kubectl("get", "memoryguards", name, "-n", NS).stdout
    print(f"\n{out}")
    head, line = out.splitlines()[:2]
    # A header starts after two spaces at least ("AT RISK" is one header).
    starts = [i for i, ch in enumerate(head) if ch != " " and (i == 0 or head[max(0, i - 2):i] == "  ")]
    names = [head[a:b].strip() for a, b in zip(starts, [*starts[1:], len(head) + 99])]
    return {n: line[a:].split()[0] if line[a:].split() else "" for n, a in zip(names, starts)}


def test_deleting_the_guard_restores_the_templates(release: Release) -> None:
    r = release
    r.api.ok("DELETE", f"{GUARDS}/leak-guard")
    r.wait_for(lambda: r.api.get(f"{GUARDS}/leak-guard") is None, 60, "the guard gone (finalizer done)")
    rc = r.api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/leak-rc")
    names = _template_containers(rc)
    assert injection.SIDECAR_NAME not in names
    marks = [p["metadata"]["name"] for p in r.standin.pods() if any(
        k.startswith("memoryguard.io/rotation") for k in (p["metadata"].get("annotations") or {}))]
    assert marks == []


def test_helm_uninstall_with_guards_present_completes(release: Release) -> None:
    r = release
    r.put_guard(_guard("left-guard", "leak-rc", sidecar={"inject": True, "port": PORT}))
    r.wait_for(lambda: (r.api.get(f"{GUARDS}/left-guard") or {}).get("status"), 60, "left-guard reconciled")
    # The operator's Leases are owned by the chart's ServiceAccount (read from
    # its token): the garbage collector deletes them once helm deletes it.
    sa_uid = r.api.ok("GET", f"/api/v1/namespaces/{RELEASE_NS}/serviceaccounts/{SA}")["metadata"]["uid"]
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases"
    ours = {"labelSelector": f"memoryguard.io/lease-set={RELEASE}-memoryguard"}
    held = r.api.ok("GET", leases, params=ours)["items"]
    assert held and all([(o["kind"], o["name"], o["uid"]) for o in i["metadata"].get("ownerReferences") or []]
                        == [("ServiceAccount", SA, sa_uid)] for i in held), [i["metadata"] for i in held]
    stop = threading.Event()
    hooks = threading.Thread(target=r.standin.run_hook_pods, args=(RELEASE_NS, stop), daemon=True)
    hooks.start()
    r.uninstalling_since = time.time()
    try:
        out = r.cp.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--timeout", "300s", check=False, timeout=400)
    finally:
        stop.set()
        hooks.join(10)
    logs = "\n".join(p.read_text() for p in r.workdir.glob("hook-*.log"))
    assert out.returncode == 0, out.stdout + out.stderr + "\n--- hook ---\n" + logs
    assert r.standin.hooks_run and r.standin.hooks_run[-1][1] == 0, r.standin.hooks_run
    assert r.api.ok("GET", GUARDS)["items"] == []
    rc = r.api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/leak-rc")
    names = _template_containers(rc)
    assert injection.SIDECAR_NAME not in names
    # Nothing of the release is left but the CRD (helm never deletes a chart's
    # crds/). The operator's pod goes last and on its own time: helm deletes
    # the Deployment, the garbage collector its ReplicaSet and then the pod,
    # and the kubelet ends it after its grace period; `helm uninstall` (its
    # default cascade, background) returns before that. CI once listed it
    # still Terminating, so the check waits for the cascade, bounded.
    def left() -> list[str]:
        return r.cp.kubectl("get", "all,sa,role,rolebinding,clusterrole,clusterrolebinding,configmap,networkpolicy,"
                            "poddisruptionbudget,lease,job", "-A", "-l", f"app.kubernetes.io/instance={RELEASE}",
                            "-o", "name").stdout.split()
    try:
        r.wait_for(lambda: left() == [], 90, "the release's objects gone")
    except AssertionError:
        assert left() == [], left()
        raise
    r.wait_for(lambda: r.api.ok("GET", leases, params=ours)["items"] == [], 60,
               "the operator's Leases deleted with the ServiceAccount that owns them")
    assert r.api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/memoryguards.memoryguard.io")


def test_no_request_of_ours_was_refused(release: Release) -> None:
    """Every request of the chart's ServiceAccounts while the release was
    installed: its RBAC grants all the operator does. (Once helm uninstall
    began, the Roles go before the operator's pod would: a refusal then is
    the uninstall, not a missing grant. A CI run on a slow host saw 10 Lease
    reads refused so.)"""
    until = release.uninstalling_since
    ours, after = [], 0
    for e in release.cp.audit():
        if not e["user"]["username"].startswith(f"system:serviceaccount:{RELEASE_NS}:"):
            continue
        at = datetime.datetime.fromisoformat(e["requestReceivedTimestamp"]).timestamp()
        if until is not None and at >= until:
            after += 1
        else:
            ours.append(e)
    denied = [(e["verb"], e["requestURI"]) for e in ours if e.get("responseStatus", {}).get("code") == 403]
    print(f"\naudit: {len(ours)} requests by the chart's ServiceAccounts while installed, {len(denied)} refused "
          f"with 403 ({after} after helm uninstall began, not counted)")
    assert len(ours) > 50 and denied == [], denied[:10]
