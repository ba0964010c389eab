"""The pod admission webhook (issue 64) on the real kube-apiserver, with the
real KubeRay v1.5.1 and v1.7.0 making the pods: the chart's
MutatingWebhookConfiguration (its rules, selectors, failurePolicy and
timeout as released; only its clientConfig pointed at the operator on
loopback, since this control plane has no pod network: the whole cluster's
run through the chart's Service is tests/realpods/), the operator run as the
chart runs it with a certificate of the test's own.

Shown: a RayCluster's, a RayService's and a RayJob's worker pods carry the
sidecar as KubeRay creates them, with no KubeRay spec touched; a pod created
while the operator is down is created (without it) well inside the
timeout; what admission adds to a pod create, p50 and p99, printed."""

from __future__ import annotations

import base64
import copy
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection, patches

from ..devworld import ROOT
from ..procs import free_port, stop
from . import kuberaykit
from .controlplane import ControlPlane
from .operatorproc import operator_command
from .test_operator import _wait_authorized

RELEASE = "mg"
SA = "mg-memoryguard"
SERVICE_LABEL = "ray.io/originated-from-cr-name"  # KubeRay's label on a RayService's (and RayJob's) RayCluster
CREATES = 40  # pod creates timed each way
REMEDIES = {"remediation": {"jemalloc": {"mode": "auto"}}}


def _template(name: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": name, "image": "rayproject/ray:2.9.0",
                                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}


def _cluster_spec() -> dict[str, Any]:
    return {"headGroupSpec": {"rayStartParams": {}, "template": _template("ray-head")},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                                  "rayStartParams": {}, "template": _template("ray-worker")}]}


def _certs(out: Path) -> bytes:
    """A CA and the webhook's certificate for 127.0.0.1 (openssl), the CA's PEM returned."""
    out.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=mg-test-ca",
        "-keyout", str(out / "ca.key"), "-out", str(out / "ca.crt"))
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(out / "tls.key"),
        "-out", str(out / "tls.csr"))
    (out / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", str(out / "tls.csr"), "-CA", str(out / "ca.crt"), "-CAkey", str(out / "ca.key"),
        "-CAcreateserial", "-days", "2", "-extfile", str(out / "san.ext"), "-out", str(out / "tls.crt"))
    return (out / "ca.crt").read_bytes()


class Admitted:
    def __init__(self, cp: ControlPlane, version: str, ns: str, workdir: Path) -> None:
        self.cp, self.api, self.version, self.ns, self.workdir = cp, cp.admin(), version, ns, workdir
        self.operator: subprocess.Popen[bytes] | None = None
        self.log = workdir / "operator.log"

    def start_operator(self, env: dict[str, str]) -> None:
        cmd, full = operator_command(self.cp, self.kubeconfig, namespace=self.release_ns, deployment=SA,
                                     extra_env=env)
        with self.log.open("ab") as out:
            self.operator = subprocess.Popen(cmd, env=full, stdout=out, stderr=out)

    def stop_operator(self) -> None:
        if self.operator is not None:
            stop(self.operator, timeout=20)
            self.operator = None

    def wait_for(self, pred: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if v := pred():
                return v
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}\n--- operator log ---\n"
                             f"{self.log.read_text(errors='replace')[-5000:]}")

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in labels.items())
        return list(self.api.ok("GET", f"/api/v1/namespaces/{self.ns}/pods", params={"labelSelector": sel})["items"])

    def post(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.api.ok("POST", f"/apis/ray.io/v1/namespaces/{self.ns}/{plural}", body))


def _has_sidecar(pod_or_template: dict[str, Any]) -> bool:
    spec = pod_or_template.get("spec") or {}
    return any(c.get("name") == injection.SIDECAR_NAME for key in ("containers", "initContainers")
               for c in spec.get(key) or [])


@pytest.fixture(scope="module", params=kuberaykit.VERSIONS)
def admitted(request: pytest.FixtureRequest, real: ControlPlane,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admitted]:
    version: str = request.param
    if why := kuberaykit.present(version):
        pytest.skip(why)
    tag = version.replace(".", "-")
    ns, release_ns = f"adm-{tag}", f"mgadm-{tag}"
    workdir = tmp_path_factory.mktemp(f"admission-{tag}")
    a = Admitted(real, version, ns, workdir)
    a.release_ns = release_ns  # type: ignore[attr-defined]
    for name in (ns, release_ns):
        a.api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    with kuberaykit.running(real, version, [ns], workdir / "kuberay"):
        real.helm("install", RELEASE, str(ROOT / "charts" / "memoryguard"), "-n", release_ns,
                  "--set", f"watchNamespaces={{{ns}}}", "--set", "sidecar.image.repository=localhost/mg-sidecar",
                  "--set", "sidecar.image.tag=test")
        a.kubeconfig = real.service_account_kubeconfig(SA, release_ns, workdir / "operator.kubeconfig")  # type: ignore[attr-defined]
        _wait_authorized(real, f"system:serviceaccount:{release_ns}:{SA}", [
            ("list", "memoryguard.io", "memoryguards", ns), ("get", "ray.io", "rayclusters", ns)])
        ca = _certs(workdir / "certs")
        port = free_port()
        a.admission_env = {  # type: ignore[attr-defined]
            "MEMORYGUARD_ADMISSION_PORT": str(port), "MEMORYGUARD_ADMISSION_HOST": "127.0.0.1",
            "MEMORYGUARD_ADMISSION_CERT_DIR": str(workdir / "certs"), "MEMORYGUARD_DRAIN": "false"}
        # The chart's webhook as released, but for where the API server finds it.
        hook_name = f"{RELEASE}-memoryguard-{release_ns}"
        hooks = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{hook_name}"
        hook = a.api.ok("GET", hooks)
        assert hook["webhooks"][0]["failurePolicy"] == "Ignore" and hook["webhooks"][0]["timeoutSeconds"] == 2
        a.api.ok("PATCH", hooks, [{"op": "replace", "path": "/webhooks/0/clientConfig", "value": {
            "url": f"https://127.0.0.1:{port}/inject", "caBundle": base64.b64encode(ca).decode()}}],
            ctype="application/json-patch+json")
        a.start_operator(a.admission_env)  # type: ignore[attr-defined]
        # One guard for all three kinds: a RayCluster by name, a RayService's
        # and a RayJob's clusters by the label KubeRay gives them.
        for name, selector in (("by-name", {"names": ["rc"]}), ("served", {"matchLabels": {SERVICE_LABEL: "svc"}}),
                               ("job", {"matchLabels": {SERVICE_LABEL: "job"}})):
            a.api.ok("POST", f"/apis/memoryguard.io/v1alpha1/namespaces/{ns}/memoryguards", {
                "apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard", "metadata": {"name": name},
                "spec": {"clusterSelector": selector, "sidecar": {"inject": True}, **REMEDIES}})
        a.wait_for(lambda: "Listening for webhooks" in a.log.read_text(errors="replace") or _serving(port), 60,
                   "the operator's webhook server")
        time.sleep(2)  # the index of guards filled from kopf's first list
        try:
            yield a
        finally:
            a.stop_operator()
            # No hooks: the uninstall hook's Job needs a kubelet this tier has not.
            real.helm("uninstall", RELEASE, "-n", release_ns, "--no-hooks", check=False)
            for name in (ns, release_ns):
                a.api.call("DELETE", f"/api/v1/namespaces/{name}")


def _serving(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_a_rayclusters_workers_get_the_sidecar_at_admission_and_its_spec_is_untouched(admitted: Admitted) -> None:
    a = admitted
    a.post("rayclusters", {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
                           "spec": _cluster_spec()})
    workers = a.wait_for(lambda: len(p := a.pods(**{"ray.io/cluster": "rc", "ray.io/node-type": "worker"})) >= 2
                         and p, 120, "KubeRay's two workers of rc")
    assert all(_has_sidecar(p) for p in workers), [p["metadata"]["name"] for p in workers]
    head = a.pods(**{"ray.io/cluster": "rc", "ray.io/node-type": "head"})
    assert head and not _has_sidecar(head[0])  # includeHead is false
    time.sleep(3)  # a cycle of the guard: it must not patch the templates either
    rc = a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayclusters/rc")
    assert not _has_sidecar(rc["spec"]["workerGroupSpecs"][0]["template"]), "a KubeRay spec was patched"


def test_a_rayservices_workers_get_the_sidecar(admitted: Admitted) -> None:
    a = admitted
    a.post("rayservices", {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc"},
                           "spec": {"serveConfigV2": "applications: []\n", "rayClusterConfig": _cluster_spec()}})
    rcs = a.wait_for(lambda: a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayclusters",
                                      params={"labelSelector": f"{SERVICE_LABEL}=svc"})["items"], 120,
                     f"KubeRay {a.version}'s RayCluster for RayService svc, labelled {SERVICE_LABEL}=svc")
    name = rcs[0]["metadata"]["name"]
    workers = a.wait_for(lambda: len(p := a.pods(**{"ray.io/cluster": name, "ray.io/node-type": "worker"})) >= 2
                         and p, 120, f"KubeRay's workers of {name}")
    print(f"real KubeRay {a.version}: RayService svc's cluster {name}, labels {rcs[0]['metadata'].get('labels')}")
    assert all(_has_sidecar(p) for p in workers)
    svc = a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayservices/svc")
    assert not _has_sidecar(svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"])


def test_a_rayservices_remediation_reaches_its_new_pods_through_admission(admitted: Admitted) -> None:
    """Issue 64, 4: the remediation's ConfigMap, as the operator writes it
    for a RayService's cluster (remediation._through_admission), is named
    in each new worker KubeRay makes, its RayService untouched; changed by
    anyone else, it is named in none."""
    a = admitted
    rc = a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayclusters",
                  params={"labelSelector": f"{SERVICE_LABEL}=svc"})["items"][0]
    name = rc["metadata"]["name"]
    spec = read_guard_spec({"clusterSelector": {"names": [name]}, **REMEDIES})
    cm = patches.remedy_configmap(name, "workers", "jemalloc")
    a.api.ok("POST", f"/api/v1/namespaces/{a.ns}/configmaps",
             patches.remedy_configmap_body(rc, cm, "jemalloc", patches.wanted_env(spec, "jemalloc")))

    def replaced() -> dict[str, Any]:
        old = a.pods(**{"ray.io/cluster": name, "ray.io/node-type": "worker"})[0]["metadata"]["name"]
        a.api.ok("DELETE", f"/api/v1/namespaces/{a.ns}/pods/{old}", params={"gracePeriodSeconds": "0"})
        return a.wait_for(lambda: [p for p in a.pods(**{"ray.io/cluster": name, "ray.io/node-type": "worker"})
                                   if p["metadata"]["name"] != old and p["metadata"]["creationTimestamp"]
                                   and not p["metadata"].get("deletionTimestamp")
                                   and p["metadata"]["name"] not in seen], 120, "KubeRay's replacement")[0]

    def reads(pod: dict[str, Any]) -> list[str]:
        return [r["configMapRef"]["name"] for r in pod["spec"]["containers"][0].get("envFrom") or []]

    seen = {p["metadata"]["name"] for p in a.pods(**{"ray.io/cluster": name})}
    new = replaced()
    seen.add(new["metadata"]["name"])
    assert reads(new) == [cm] and _has_sidecar(new)
    # Changed by someone else (here: LD_PRELOAD pointed elsewhere): no new pod reads it.
    a.api.merge(f"/api/v1/namespaces/{a.ns}/configmaps/{cm}", {"data": {"LD_PRELOAD": "/tmp/not-jemalloc.so"}})
    other = replaced()
    assert reads(other) == [] and _has_sidecar(other)
    svc = a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayservices/svc")
    assert "envFrom" not in svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def test_a_rayjobs_first_workers_get_the_sidecar(admitted: Admitted) -> None:
    a = admitted
    a.post("rayjobs", {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job"},
                       "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": _cluster_spec()}})
    rcs = a.wait_for(lambda: a.api.ok("GET", f"/apis/ray.io/v1/namespaces/{a.ns}/rayclusters",
                                      params={"labelSelector": f"{SERVICE_LABEL}=job"})["items"], 120,
                     f"KubeRay {a.version}'s RayCluster for RayJob job, labelled {SERVICE_LABEL}=job")
    name = rcs[0]["metadata"]["name"]
    workers = a.wait_for(lambda: len(p := a.pods(**{"ray.io/cluster": name, "ray.io/node-type": "worker"})) >= 2
                         and p, 120, f"KubeRay's workers of {name}")
    # Made with its cluster, at once: only admission reaches these.
    assert all(_has_sidecar(p) for p in workers)


def _ray_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {
        "ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "workers"}},
        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0"}]}}


def _timed_creates(a: Admitted, prefix: str, body: dict[str, Any]) -> list[float]:
    took = []
    for i in range(CREATES):
        pod = copy.deepcopy(body)
        pod["metadata"]["name"] = f"{prefix}-{i}"
        t0 = time.monotonic()
        a.api.ok("POST", f"/api/v1/namespaces/{a.ns}/pods", pod)
        took.append(time.monotonic() - t0)
    return took


def _p(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def test_what_admission_adds_to_a_pod_create(admitted: Admitted) -> None:
    a = admitted
    plain = _ray_pod("x")
    plain["metadata"]["labels"] = {"app": "not-ray"}  # not sent to the webhook (its objectSelector)
    without = _timed_creates(a, "plain", plain)
    sent = _timed_creates(a, "ray", _ray_pod("x"))
    assert all(_has_sidecar(p) for p in a.pods(**{"ray.io/cluster": "rc"}) if p["metadata"]["name"].startswith("ray-"))
    added50 = _p(sent, 0.5) - _p(without, 0.5)
    print(f"real apiserver, KubeRay {a.version}: pod create p50/p99 {_p(without, 0.5):.1f}/{_p(without, 0.99):.1f} ms "
          f"not sent to the webhook, {_p(sent, 0.5):.1f}/{_p(sent, 0.99):.1f} ms with the sidecar injected "
          f"({CREATES} each; added at p50 {added50:.1f} ms); mean {statistics.mean(sent) * 1000:.1f} ms")
    assert _p(sent, 0.99) < 2000  # within the webhook's timeout: the answer was the webhook's, not the timeout's


def test_a_pod_created_while_the_operator_is_down_is_created_without_the_sidecar(admitted: Admitted) -> None:
    a = admitted
    a.stop_operator()
    took = _timed_creates(a, "down", _ray_pod("x"))
    pods = [p for p in a.pods(**{"ray.io/cluster": "rc"}) if p["metadata"]["name"].startswith("down-")]
    assert len(pods) == CREATES and not any(_has_sidecar(p) for p in pods)
    print(f"real apiserver, KubeRay {a.version}: with the webhook down, pod create p50/p99 "
          f"{_p(took, 0.5):.1f}/{_p(took, 0.99):.1f} ms (failurePolicy Ignore; the timeout is 2 s)")
    assert _p(took, 0.99) < 2000  # refused connections: no wait for the timeout
    a.start_operator(a.admission_env)  # type: ignore[attr-defined]


def test_uninstall_deletes_the_webhook_before_the_operator(admitted: Admitted) -> None:
    """helm's own order (its debug log of each delete): the
    MutatingWebhookConfiguration goes before the Deployment, so no pod
    create waits on a webhook whose operator is gone (and were it left,
    failurePolicy Ignore lets pods through: the test above)."""
    a = admitted
    out = a.cp.helm("uninstall", RELEASE, "-n", a.release_ns, "--no-hooks", "--debug")  # type: ignore[attr-defined]
    text = out.stdout + out.stderr
    order = [kind for line in text.splitlines() for kind in ("MutatingWebhookConfiguration", "Deployment")
             if kind in line and "delete" in line.lower()]
    print(f"helm 4 uninstall, the deletes in its order: {order}")
    assert "MutatingWebhookConfiguration" in order and "Deployment" in order, text[-3000:]
    assert order.index("MutatingWebhookConfiguration") < order.index("Deployment"), order
    hooks = a.api.ok("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")["items"]
    assert not [h for h in hooks if h["metadata"]["name"].endswith(a.release_ns)]  # type: ignore[attr-defined]
