"""KubeRay's behaviours MemoryGuard relies on, one table run against the
emulated KubeRay (devkit) and the released KubeRay, v1.7.0 and v1.5.1
(``../shared/realk8s/kuberay-up.sh`` on the tier's real control plane,
never copied in; skipped, saying why, where the kit is absent).

Each row sets up what it needs through the API, as a user would, and
returns what KubeRay did; the expected answers are per backend where the
versions differ. The emulated KubeRay claims only the rows in
``EMULATED_CLAIMS`` (its docstring says what it does not model); a row it
does not claim is run on the real ones alone. The kubelet's part (pods
Running, a Terminating pod removed once its containers would have
stopped) is played the same way on every backend: ``HOLD_S`` after the
delete, so that what KubeRay does meanwhile can be seen.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.kuberay import KubeRayStandIn
from memoryguard_kuberay.devkit.emulator.patching import json_patch
from memoryguard_kuberay.devkit.emulator.world import load_crds
from memoryguard_kuberay.operator.guardspec import Jemalloc, SidecarInjection
from memoryguard_kuberay.operator.rayclusters import injection, kuberayrules, patches

from .devworld import kuberay_file, served_in_a_thread
from .procs import wait_until
from .realk8s.controlplane import Client

NS = "kuberay-contract"
HOLD_S = 3.0  # the kubelet's part removes a Terminating pod this long after the delete
RCS = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
PODS = f"/api/v1/namespaces/{NS}/pods"
EMULATED_CLAIMS = frozenset({"replaced_only_once_gone", "failed_pod_deleted_then_replaced", "replicas_clamped",
                             "recreate_on_template_change"})


@dataclasses.dataclass
class Backend:
    name: str  # "emulated", "v1.7.0", "v1.5.1"
    api: Client
    fail: Callable[[str], None]  # the kubelet reports the pod Failed

    def pods(self, cluster: str, group: str | None = None) -> list[dict[str, Any]]:
        items = self.api.ok("GET", PODS, params={"labelSelector": f"ray.io/cluster={cluster}"})["items"]
        return [p for p in items if group is None or p["metadata"]["labels"].get("ray.io/group") == group]

    def wait(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        return wait_until(pred, timeout, what=f"{self.name}: {what}")

    def running(self, cluster: str, group: str, n: int, timeout: float = 60) -> list[dict[str, Any]]:
        def ok() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods(cluster, group) if not p["metadata"].get("deletionTimestamp")
                    and (p.get("status") or {}).get("phase") == "Running"]
            return pods if len(pods) == n else None
        return self.wait(ok, timeout, f"{n} Running pod(s) of {cluster}/{group}")  # type: ignore[no-any-return]

    def evict(self, name: str) -> int:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
        return int(self.api.call("POST", f"{PODS}/{name}/eviction", body)[0])


def cluster(name: str, *, replicas: int = 1, group: str = "w", **extra: Any) -> dict[str, Any]:
    def container(n: str) -> dict[str, Any]:
        return {"name": n, "image": "rayproject/ray:2.52.0",
                "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "100m",
                                                                                   "memory": "256Mi"}}}
    worker: dict[str, Any] = {"groupName": group, "replicas": replicas, "minReplicas": 0, "maxReplicas": 5,
                              "rayStartParams": {}, "template": {"spec": {"containers": [container("ray-worker")]}}}
    worker.update(extra.pop("worker", {}))
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "namespace": NS},
            "spec": {"rayVersion": "2.52.0", "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [container("ray-head")]}}}, "workerGroupSpecs": [worker], **extra}}


# -- the emulated backend ---------------------------------------------------------------------------
class _Quiet:
    """A pod's process as the emulated kubelet sees it: ready at once, ended
    ``HOLD_S`` after it is told to stop (as the real rows' kubelet waits)."""

    def __init__(self) -> None:
        self.stopped_at: float | None = None

    async def ready(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped_at = self.stopped_at or time.monotonic()

    def exited(self) -> bool:
        return self.stopped_at is not None and time.monotonic() - self.stopped_at >= HOLD_S


def _emulated() -> Iterator[Backend]:
    api = EmulatedApi()
    load_crds(api, kuberay_file("ray.io_rayclusters.yaml"))
    api.put("namespaces", {"metadata": {"name": NS}})

    async def start_pod(pod: dict[str, Any]) -> _Quiet:
        return _Quiet()

    standin = KubeRayStandIn(api, start_pod, namespace=NS, replace_delay_s=0.2)
    with served_in_a_thread(api, standin.run) as url:
        client = Client(url, "emulated", None)

        def fail(name: str) -> None:
            client.merge(f"{PODS}/{name}/status", {"status": {"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "False"}]}})

        yield Backend("emulated", client, fail)


# -- the real backends -------------------------------------------------------------------------------
def _real(request: pytest.FixtureRequest, version: str, tmp: Path) -> Iterator[Backend]:
    from .realk8s import kuberaykit

    why = kuberaykit.present(version)
    if why:
        pytest.skip(why)
    cp = request.getfixturevalue("real")
    api = cp.admin()
    ns = f"{NS}"
    if api.get(f"/api/v1/namespaces/{ns}") is None:
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    node = f"kuberay-contract-{version.replace('.', '-')}"
    try:
        with kuberaykit.running(cp, version, [ns], tmp / version) as kr, \
                kuberaykit.Kubelet(api, ns, node, hold_s=HOLD_S) as kubelet:
            print(f"KubeRay {version} and kube-scheduler up in {kr.up_s:.1f} s")
            yield Backend(version, api, kubelet.fail)
            for rc in api.ok("GET", RCS)["items"]:  # the next version starts with no cluster of this one
                api.call("DELETE", f"{RCS}/{rc['metadata']['name']}")
            for p in api.ok("GET", PODS)["items"]:
                api.call("DELETE", f"{PODS}/{p['metadata']['name']}", {"gracePeriodSeconds": 0})
            for c in api.ok("GET", f"/api/v1/namespaces/{NS}/configmaps",
                            params={"labelSelector": patches.REMEDY_LABEL})["items"]:
                api.call("DELETE", f"/api/v1/namespaces/{NS}/configmaps/{c['metadata']['name']}")
    finally:
        if version != kuberaykit.VERSIONS[0]:  # later tests read the newest CRDs
            kuberaykit.install_crds(cp, kuberaykit.VERSIONS[0])


@pytest.fixture(params=["emulated", *(pytest.param(v, marks=pytest.mark.realk8s) for v in ("v1.7.0", "v1.5.1"))],
                scope="module")
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    if request.param == "emulated":
        yield from _emulated()
    else:
        yield from _real(request, request.param, tmp_path_factory.mktemp("kuberay"))


def _claimed(b: Backend, row: str) -> None:
    if b.name == "emulated" and row not in EMULATED_CLAIMS:
        pytest.skip(f"the emulated KubeRay does not claim {row}: the real KubeRay's row alone")


# -- the rows -----------------------------------------------------------------------------------------
def test_replaced_only_once_gone(backend: Backend) -> None:
    """An evicted worker stays counted while it is Terminating: KubeRay makes
    its replacement only once the pod object is gone (every listed pod of a
    group counts since v1.0.0). MemoryGuard's rotation waits for the
    replacement, and a group is short that long (docs/facts.md)."""
    b = backend
    _claimed(b, "replaced_only_once_gone")
    b.api.ok("POST", RCS, cluster("gone", replicas=2))
    first = b.running("gone", "w", 2)
    victim = first[0]["metadata"]["name"]
    assert b.evict(victim) == 201
    t0 = time.monotonic()
    seen_while_terminating: set[str] = set()
    while True:
        pods = b.pods("gone", "w")
        names = {p["metadata"]["name"] for p in pods}
        if victim not in names:
            gone_at = time.monotonic()
            break
        assert next(p for p in pods if p["metadata"]["name"] == victim)["metadata"].get("deletionTimestamp")
        seen_while_terminating |= names
        assert time.monotonic() - t0 < 60, "the evicted pod was never removed"
        time.sleep(0.1)
    assert seen_while_terminating <= {p["metadata"]["name"] for p in first}, \
        f"a replacement was made while {victim} was Terminating: {sorted(seen_while_terminating)}"
    after = b.running("gone", "w", 2)
    new = [p for p in after if p["metadata"]["name"] not in {q["metadata"]["name"] for q in first}]
    assert len(new) == 1
    print(f"{b.name}: {victim} Terminating {gone_at - t0:.1f} s, no replacement meanwhile; "
          f"{new[0]['metadata']['name']} Running {time.monotonic() - gone_at:.1f} s after it was gone")


def test_failed_pod_deleted_then_replaced(backend: Backend) -> None:
    b = backend
    _claimed(b, "failed_pod_deleted_then_replaced")
    b.api.ok("POST", RCS, cluster("failed", replicas=1))
    (old,) = b.running("failed", "w", 1)
    b.fail(old["metadata"]["name"])
    b.wait(lambda: old["metadata"]["name"] not in {p["metadata"]["name"] for p in b.pods("failed", "w")}, 60,
           "the Failed pod deleted")
    (new,) = b.running("failed", "w", 1)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]


def test_replicas_clamped(backend: Backend) -> None:
    """``replicas`` above ``maxReplicas`` makes maxReplicas pods (MemoryGuard's
    groups.desired_replicas counts the same)."""
    b = backend
    _claimed(b, "replicas_clamped")
    b.api.ok("POST", RCS, cluster("clamped", replicas=4, worker={"maxReplicas": 2}))
    b.running("clamped", "w", 2)
    time.sleep(3)  # and no more come
    assert len(b.pods("clamped", "w")) == 2


def test_recreate_on_template_change(backend: Backend) -> None:
    """MemoryGuard's own injection patch on a cluster with ``upgradeStrategy:
    Recreate``: v1.6+ deletes every pod, the head included (v1.5.1 has no
    such field: its CRD prunes it). kuberayrules.template_hold holds such a
    cluster's templates for exactly this."""
    b = backend
    _claimed(b, "recreate_on_template_change")
    b.api.ok("POST", RCS, cluster("recreate", replicas=1, upgradeStrategy={"type": "Recreate"}))
    (head,) = b.running("recreate", "headgroup", 1)
    b.running("recreate", "w", 1)
    rc = b.api.ok("GET", f"{RCS}/recreate")
    has_field = "upgradeStrategy" in rc["spec"]
    assert (kuberayrules.template_hold(rc, allow_recreate=False) is not None) == has_field
    ops = injection.inject_patch(rc, SidecarInjection(inject=True, image="memoryguard-sidecar:test"), groups=["w"])
    b.api.ok("PATCH", f"{RCS}/recreate", ops, ctype="application/json-patch+json")
    time.sleep(4)
    head_now = [p for p in b.pods("recreate", "headgroup")]
    recreated = any(p["metadata"]["uid"] != head["metadata"]["uid"] or p["metadata"].get("deletionTimestamp")
                    for p in head_now) or not head_now
    expected = b.name != "v1.5.1"
    assert has_field == expected
    assert recreated == expected, f"{b.name}: the head {'was' if recreated else 'was not'} deleted"


def test_multi_host_replica_goes_whole(backend: Backend) -> None:
    """``numOfHosts: 2``. v1.6+ (multi-host indexing, on by default) labels
    each host with its replica and, once one evicted host is gone, deletes
    the replica's other host with a plain delete (no Eviction API) and makes
    a new replica: MemoryGuard rotates such a replica as one unit (its
    ``ray.io/worker-group-replica-name``). v1.5.1 has no replica label and
    replaces the one missing pod, the other host kept: MemoryGuard, seeing no
    label, rotates each host alone there, as that KubeRay does."""
    b = backend
    _claimed(b, "multi_host_replica_goes_whole")
    b.api.ok("POST", RCS, cluster("multi", replicas=1, worker={"numOfHosts": 2}))
    hosts = b.running("multi", "w", 2)
    replica = {p["metadata"]["labels"].get(C.LABEL_REPLICA_NAME) for p in hosts}
    victim, other = hosts[0]["metadata"]["name"], hosts[1]["metadata"]["name"]
    assert b.evict(victim) == 201
    b.wait(lambda: victim not in {p["metadata"]["name"] for p in b.pods("multi", "w")}, 60, f"{victim} gone")
    after = b.running("multi", "w", 2, timeout=90)
    if b.name == "v1.5.1":
        time.sleep(3)
        assert replica == {None}
        assert other in {p["metadata"]["name"] for p in b.pods("multi", "w") if not p["metadata"].get(
            "deletionTimestamp")}, f"v1.5.1 deleted {other} too"
        print(f"{b.name}: no replica label; {other} kept, one pod made for {victim}")
        return
    assert len(replica) == 1 and None not in replica
    assert not {p["metadata"]["name"] for p in after} & {victim, other}, \
        f"{other} was not deleted with its replica"
    print(f"{b.name}: replica labels {replica}; {other} deleted by KubeRay once {victim} was gone")


def test_workers_to_delete(backend: Backend) -> None:
    """A pod listed in ``scaleStrategy.workersToDelete`` with ``replicas``
    unchanged is deleted and replaced (KubeRay's own way to remove one)."""
    b = backend
    _claimed(b, "workers_to_delete")
    b.api.ok("POST", RCS, cluster("wtd", replicas=2))
    first = b.running("wtd", "w", 2)
    victim = first[0]["metadata"]["name"]
    b.api.merge(f"{RCS}/wtd", {"spec": {"workerGroupSpecs": [{**b.api.ok("GET", f"{RCS}/wtd")["spec"][
        "workerGroupSpecs"][0], "scaleStrategy": {"workersToDelete": [victim]}}]}})
    b.wait(lambda: victim not in {p["metadata"]["name"] for p in b.pods("wtd", "w")
                                  if not p["metadata"].get("deletionTimestamp")}, 30, f"{victim} deleted")
    after = b.running("wtd", "w", 2)
    assert victim not in {p["metadata"]["name"] for p in after}


def test_autoscaler_v2_pods_never_restart_and_keep_the_native_sidecar(backend: Backend) -> None:
    """Autoscaler v2 sets ``restartPolicy: Never`` on the Ray pods; the
    sidecar MemoryGuard injects as a native sidecar (servers 1.29+) is kept
    as it is, first among the init containers, ``restartPolicy: Always``
    (so it is restarted whatever the pod's policy), and its /dev/shm volume
    keeps its size limit (KubeRay adds its own only where none is mounted)."""
    b = backend
    _claimed(b, "autoscaler_v2")
    rc = cluster("autoscaled", replicas=1, enableInTreeAutoscaling=True,
                 autoscalerOptions={"version": "v2"})
    ops = injection.inject_patch(rc, SidecarInjection(inject=True, image="memoryguard-sidecar:test"), groups=["w"],
                               native=True)
    b.api.ok("POST", RCS, json_patch(rc, ops))
    (worker,) = b.running("autoscaled", "w", 1)
    spec = worker["spec"]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    sidecar = next(c for c in spec["initContainers"] if c["name"] == injection.SIDECAR_NAME)
    shm = next(v for v in spec["volumes"] if v["name"] == injection.SHM_VOLUME)
    print(f"{b.name}: worker restartPolicy {spec.get('restartPolicy')}, init containers {inits}, "
          f"/dev/shm {shm['emptyDir']}")
    assert spec.get("restartPolicy") == "Never"
    assert inits[0] == injection.SIDECAR_NAME and sidecar.get("restartPolicy") == "Always"
    assert shm["emptyDir"].get("sizeLimit") == "2Gi"
    assert not any(v["name"] == "shared-mem" for v in spec["volumes"])
    # What KubeRay's wait-gcs-ready copies from the Ray container: its env and mounts.
    wait = next((c for c in spec["initContainers"] if c["name"] == "wait-gcs-ready"), None)
    if wait is not None:
        assert any(m["mountPath"] == "/dev/shm" for m in wait.get("volumeMounts") or [])


def test_a_rayservice_owns_its_cluster(backend: Backend) -> None:
    """A RayService's RayCluster carries the RayService as its controller
    owner: kuberayrules.template_hold reads that, and MemoryGuard changes no
    template there (KubeRay rewrites it from the RayService)."""
    b = backend
    _claimed(b, "rayservice_owner")
    rc = cluster("unused", replicas=1)
    svc = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "served", "namespace": NS},
           "spec": {"rayClusterConfig": rc["spec"]}}
    b.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayservices", svc)
    made = b.wait(lambda: [c for c in b.api.ok("GET", RCS)["items"]
                           if kuberayrules.rayservice_owner(c) == "served"], 60, "the RayService's RayCluster")
    hold = kuberayrules.template_hold(made[0], allow_recreate=True)
    assert hold is not None and hold.why is kuberayrules.TemplateHold.RAYSERVICE
    b.api.call("DELETE", f"/apis/ray.io/v1/namespaces/{NS}/rayservices/served")


@pytest.mark.parametrize("kind", ["RayService", "RayJob"])
def test_a_made_clusters_pods_are_labelled_for_admission(backend: Backend, kind: str) -> None:
    """What the admission webhook selects on (issue 64): a RayService's and
    a RayJob's RayCluster carry ``ray.io/originated-from-cr-name`` (a guard
    selects them by it) and ``ray.io/originated-from-crd``, and every Ray
    node's pod, as it is created, ``ray.io/cluster`` and ``ray.io/node-type``
    head or worker (the chart's objectSelector; a pod without them is never
    sent)."""
    b = backend
    _claimed(b, "made_clusters_labelled")
    made = f"made-{kind.lower()}"
    spec = cluster("unused", replicas=1)["spec"]
    body: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": made, "namespace": NS},
                            "spec": {"rayClusterConfig": spec} if kind == "RayService" else
                            {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": spec}}
    plural = f"/apis/ray.io/v1/namespaces/{NS}/{kind.lower()}s"
    b.api.ok("POST", plural, body)
    rcs = b.wait(lambda: b.api.ok("GET", RCS, params={"labelSelector": f"ray.io/originated-from-cr-name={made}"})
                 ["items"], 60, f"the {kind}'s RayCluster labelled with its name")
    labels = rcs[0]["metadata"]["labels"]
    assert labels.get("ray.io/originated-from-crd") == kind, labels
    name = rcs[0]["metadata"]["name"]
    pods = b.wait(lambda: len(p := b.pods(name)) >= 2 and p, 60, f"{name}'s head and worker")
    kinds = sorted(p["metadata"]["labels"].get(C.LABEL_NODE_TYPE) for p in pods)
    assert kinds == ["head", "worker"] and all(p["metadata"]["labels"].get(C.LABEL_CLUSTER) == name for p in pods)
    b.api.call("DELETE", f"{plural}/{made}")


def test_remediation_env_stays_out_of_wait_gcs_ready(backend: Backend) -> None:
    """KubeRay's wait-gcs-ready init container copies the Ray container's
    ``env`` (and mounts), not its ``envFrom``: a remediation written as
    MemoryGuard writes it (a ConfigMap of its own that the Ray container's
    envFrom names) reaches the Ray container and not the init container;
    written into the env, it reaches both."""
    b = backend
    _claimed(b, "wait_gcs_ready_env")
    env = patches.jemalloc_env(Jemalloc(), None)
    for name, via_env_from in (("remedied", True), ("remedied-env", False)):
        rc = cluster(name, replicas=1)
        rc["metadata"]["uid"] = "unknown-yet"
        cm = patches.remedy_configmap(name, "w", "jemalloc") if via_env_from else None
        ops = [o for o in patches.remediation_patch(rc, "w", env, record="test", configmap=cm)
               if o["op"] != "test" and not o["path"].startswith("/metadata")]
        made = b.api.ok("POST", RCS, json_patch(rc, ops))
        if cm is not None:
            body = patches.remedy_configmap_body(made, cm, "jemalloc", env)
            b.api.ok("POST", f"/api/v1/namespaces/{NS}/configmaps", body)
        (worker,) = b.running(name, "w", 1)
        wait = next(c for c in worker["spec"]["initContainers"] if c["name"] == "wait-gcs-ready")
        ray = worker["spec"]["containers"][0]
        copied = {e["name"] for e in wait.get("env") or []} & set(env)
        print(f"{b.name}: {'envFrom' if via_env_from else 'env'}: wait-gcs-ready gets {sorted(copied) or 'none'}"
              f"{', envFrom ' + str(wait.get('envFrom')) if wait.get('envFrom') else ''}")
        if via_env_from:
            assert not copied and not wait.get("envFrom")
            assert ray["envFrom"] == [{"configMapRef": {"name": cm, "optional": True}}]
        else:
            assert copied == set(env)  # what MemoryGuard did before
