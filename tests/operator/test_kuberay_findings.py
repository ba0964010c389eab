"""What a real KubeRay showed (issue 38), each finding as a test that failed
before its fix: MemoryGuard never changes the templates of a Recreate
cluster (unless its guard consents) nor of a RayService's cluster, says
so once in an Event and in a condition; a multi-host replica goes as one
unit or waits; the sidecar is a native sidecar where the server runs them
(restartPolicy Never pods restart it); the /dev/shm it mounts is sized as
KubeRay sizes its own. The real KubeRay's own rows are in
tests/test_kuberay_contract.py; these need no server."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import Action, Reason, RotationHistory, decide
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import EvictionAnswer
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import SidecarInjection, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import clusters, injection, kuberayrules, patches, remediation
from memoryguard_kuberay.operator.rotations import rotation
from memoryguard_kuberay.operator.rotations.ledger import InFlight, Phase

from ..core.helpers import series, window_of
from .test_cycle_steps import RC, FakeKube, _guard

NS = "team-a"
CRITICAL = series(lambda t: 0.99, hours=1.0)  # an hour at 99% of the limit: a rotation is wanted


def _wants_rotation(settings: PolicySettings, history: RotationHistory) -> Any:
    return decide(settings=settings, window=window_of(CRITICAL, settings), history=history,
                  now_s=CRITICAL[-1].time_s)[0]


def _rc(**spec: Any) -> dict[str, Any]:
    rc = copy.deepcopy(RC)
    rc["spec"].update(spec)
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "8Gi"}}
    return rc


def _owned_by_service(rc: dict[str, Any]) -> dict[str, Any]:
    rc["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "served",
                                          "uid": "svc-uid", "controller": True}]
    return rc


# -- 1 and 4: templates held ----------------------------------------------------------------------
@pytest.mark.parametrize("rc, allow, held", [
    (_rc(), False, None),  # no upgrade strategy: a template change reaches new pods only
    (_rc(upgradeStrategy={"type": "None"}), False, None),
    (_rc(upgradeStrategy={"type": "Recreate"}), False, kuberayrules.TemplateHold.RECREATE),
    (_rc(upgradeStrategy={"type": "Recreate"}), True, None),  # the guard consents to a recreation
    (_owned_by_service(_rc()), False, kuberayrules.TemplateHold.RAYSERVICE),
    (_owned_by_service(_rc()), True, kuberayrules.TemplateHold.RAYSERVICE),  # consent cannot make it last
])
def test_template_hold(rc: dict[str, Any], allow: bool, held: kuberayrules.TemplateHold | None) -> None:
    hold = kuberayrules.template_hold(rc, allow_recreate=allow)
    assert (hold.why if hold else None) is held
    if hold is not None:
        assert "rc" in hold.message and ("Recreate" in hold.message or "RayService served" in hold.message)


@pytest.mark.parametrize("rc", [_rc(upgradeStrategy={"type": "Recreate"}), _owned_by_service(_rc())])
def test_set_up_injects_nothing_into_a_held_cluster_and_says_so_once(rc: dict[str, Any]) -> None:
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": True}})
    kube = FakeKube(rc, _guard({}))

    async def go(before: list[str]) -> clusters.SetUp:
        return await clusters.set_up(kube, namespace=NS, guard=_guard({}), spec=spec,  # type: ignore[arg-type]
                                     clusters=[rc], held_before=before)

    first = asyncio.run(go([]))
    assert kube.log == []  # no patch of the RayCluster at all
    assert [s.reason for s in first.says] == [EventReason.TEMPLATES_HELD] and "rc" in first.held
    again = asyncio.run(go(["rc"]))
    assert again.says == [] and kube.log == []


def test_set_up_injects_where_allowed() -> None:
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": True},
                            "kuberay": {"allowRecreate": True}})
    kube = FakeKube(_rc(upgradeStrategy={"type": "Recreate"}), _guard({}))
    done = asyncio.run(clusters.set_up(kube, namespace=NS, guard=_guard({}), spec=spec,  # type: ignore[arg-type]
                                       clusters=[kube.rc]))
    assert ("patch-raycluster", "rc") in kube.log and done.held == {}


def test_a_held_cluster_gets_the_remediation_as_advice_never_as_a_patch() -> None:
    rc = _rc(upgradeStrategy={"type": "Recreate"})
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"mode": "auto"}}})
    kube = FakeKube(rc, _guard({}))
    pod = pi.pod_info({"metadata": {"name": "w1", "uid": "u1", "labels": {C.LABEL_CLUSTER: "rc",
                                                                         C.LABEL_GROUP: "workers"}}})
    decision = _wants_rotation(PolicySettings(), RotationHistory())
    done = asyncio.run(remediation.remediate(kube, namespace=NS, spec=spec, rc=rc, pod=pod,  # type: ignore[arg-type]
                                             decision=decision, kind="jemalloc"))
    assert kube.log == [] and done.mode == "recommend" and not done.env
    assert done.says[0].reason is EventReason.REMEDIATION_RECOMMENDED and "not applied" in done.says[0].message
    said, event, patched = asyncio.run(remediation.revert(
        kube, namespace=NS, rc=rc, cluster="rc", group="workers", kind="jemalloc",  # type: ignore[arg-type]
        env={"LD_PRELOAD": "x"}, why="test"))
    assert said.startswith("not reverted") and patched is None and kube.log == []
    assert event is not None and event.reason is EventReason.REMEDIATION_REVERT_FAILED


# -- 5 and 6: the injected sidecar's shape --------------------------------------------------------
def test_native_sidecar_and_a_sized_shm() -> None:
    rc = _rc()
    ops = injection.inject_patch(rc, SidecarInjection(inject=True), native=True)
    added = [o for o in ops if o["path"].endswith("/initContainers")]
    assert len(added) == 1 and added[0]["value"][0]["name"] == injection.SIDECAR_NAME
    assert added[0]["value"][0]["restartPolicy"] == "Always"
    assert not any(o["path"].endswith("/containers/-") for o in ops)
    volumes = next(o for o in ops if o["path"].endswith("/spec/volumes"))["value"]
    shm = next(v for v in volumes if v["name"] == injection.SHM_VOLUME)
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    # Idempotent: a template with the native sidecar is left alone; removal takes it back out.
    from memoryguard_kuberay.devkit.emulator.patching import json_patch

    injected = json_patch(copy.deepcopy(rc), ops)
    assert injection.inject_patch(injected, SidecarInjection(inject=True), native=True) == []
    assert injection.inject_patch(injected, SidecarInjection(inject=True), native=False) == []
    assert json_patch(injected, injection.uninject_patch(injected)) == rc


def test_server_version_decides_native_sidecars() -> None:
    assert [kuberayrules.native_sidecars(m) for m in (None, 28, 29, 36)] == [False, False, True, True]


# -- 3: multi-host replicas -----------------------------------------------------------------------
def test_a_multi_host_replica_waits_for_a_budget_that_covers_every_host() -> None:
    d = _wants_rotation(PolicySettings(max_unavailable=1), RotationHistory(hosts_per_replica=4))
    assert d.action is Action.NONE and d.reason is Reason.ROTATION_DEFERRED
    assert "one unit of 4 pods" in d.message
    assert _wants_rotation(PolicySettings(max_unavailable=4), RotationHistory(hosts_per_replica=4)).action \
        is Action.ROTATE
    assert _wants_rotation(PolicySettings(max_unavailable=1), RotationHistory()).action is Action.ROTATE


class EvictKube:
    def __init__(self, refuse: set[str]) -> None:
        self.refuse, self.asked = refuse, []  # type: ignore[var-annotated]

    async def evict(self, namespace: str, name: str, *, dry_run: bool = False,
                    grace_seconds: int | None = None) -> tuple[EvictionAnswer, str]:
        self.asked.append((name, dry_run))
        if name in self.refuse:
            return EvictionAnswer.REFUSED, "429: Cannot evict pod as it would violate the pod's disruption budget."
        return EvictionAnswer.EVICTED, "evicted"


def _host(name: str, replica: str = "w-abc") -> pi.PodInfo:
    return pi.pod_info({"metadata": {"name": name, "uid": f"u-{name}", "namespace": NS, "labels": {
        C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "workers", C.LABEL_REPLICA_NAME: replica}},
        "status": {"phase": "Running", "podIP": "127.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}})


def _evicting(pod: pi.PodInfo) -> InFlight:
    return InFlight(pod=pod.name, uid=pod.uid, cluster="rc", group="workers", reason="test", requested_at=0.0,
                    phase=Phase.EVICTING)


def test_a_multi_host_replica_is_evicted_whole_after_every_host_is_judged() -> None:
    hosts = [_host("h0"), _host("h1"), _host("h2"), _host("other", replica="w-xyz")]
    kube = EvictKube(set())
    out = asyncio.run(rotation.advance(_evicting(hosts[1]), kube=kube, drainer=None,  # type: ignore[arg-type]
                                       pods=hosts, gcs_address=None, drain_timeout_s=1, replacement_timeout_s=1,
                                       eviction_timeout_s=1, now=1.0))
    assert kube.asked == [("h1", True), ("h0", True), ("h2", True), ("h1", False), ("h0", False), ("h2", False)]
    assert "h0 evicted, h2 evicted" in out.says[0].message


def test_a_budget_that_refuses_one_host_evicts_none() -> None:
    hosts = [_host("h0"), _host("h1")]
    kube = EvictKube({"h1"})
    rot = _evicting(hosts[0])
    asyncio.run(rotation.advance(rot, kube=kube, drainer=None, pods=hosts, gcs_address=None,  # type: ignore[arg-type]
                                 drain_timeout_s=1, replacement_timeout_s=1, eviction_timeout_s=1, now=1.0))
    assert all(dry for _, dry in kube.asked) and rot.refused == 1 and rot.phase is Phase.EVICTING
    assert "h1 (a host of the same replica)" in (rot.last_refusal or "")


# -- 7: the allocator's settings stay out of KubeRay's wait-gcs-ready ------------------------------
class RemedyKube(FakeKube):
    def __init__(self, rc: dict[str, Any]) -> None:
        super().__init__(rc, _guard({}))
        self.configmaps: dict[str, dict[str, Any]] = {}

    async def put_configmap(self, namespace: str, body: dict[str, Any]) -> None:
        self.log.append(("configmap", body["metadata"]["name"]))
        self.configmaps[body["metadata"]["name"]] = body

    async def json_patch_raycluster(self, namespace: str, name: str, ops: list[Any]) -> dict[str, Any]:
        from memoryguard_kuberay.devkit.emulator.patching import json_patch

        self.log.append(("patch-raycluster", name))
        self.rc = json_patch(copy.deepcopy(self.rc), ops)
        return self.rc


JEMALLOC_AUTO = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"mode": "auto"}}})


def _jemalloc_auto(kube: RemedyKube, rc: dict[str, Any]) -> remediation.Remedied:
    pod = pi.pod_info({"metadata": {"name": "w1", "uid": "u1", "labels": {C.LABEL_CLUSTER: "rc",
                                                                         C.LABEL_GROUP: "workers"}}})
    return asyncio.run(remediation.remediate(kube, namespace=NS, spec=JEMALLOC_AUTO, rc=rc,  # type: ignore[arg-type]
                                             pod=pod, decision=_wants_rotation(PolicySettings(), RotationHistory()),
                                             kind="jemalloc"))


def test_a_remediation_goes_through_a_configmap_the_ray_container_alone_reads() -> None:
    rc = _rc()
    rc["metadata"].update(uid="rc-uid", resourceVersion="7")
    kube = RemedyKube(rc)
    done = _jemalloc_auto(kube, rc)
    name = patches.remedy_configmap("rc", "workers", "jemalloc")
    assert [k for k, _ in kube.log] == ["configmap", "patch-raycluster"]  # the ConfigMap first
    cm = kube.configmaps[name]
    assert cm["data"]["LD_PRELOAD"] == JEMALLOC_AUTO.jemalloc.library_path and cm["data"]["MALLOC_CONF"]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "rc-uid"
    ray = kube.rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert ray["envFrom"] == [{"configMapRef": {"name": name, "optional": True}}] and "env" not in ray
    assert done.env == {f"envFrom:{name}": "1"}
    # A pod made from that template shows the mark its review looks for.
    made = pi.pod_info({"metadata": {"name": "w2", "uid": "u2", "labels": {}},
                        "spec": {"containers": [ray]}})
    assert made.remedy_env == done.env
    # The revert takes the envFrom entry out, and the template is as it was.
    kube.rc["metadata"]["resourceVersion"] = "8"
    said, _event, patched = asyncio.run(remediation.revert(
        kube, namespace=NS, rc=kube.rc, cluster="rc", group="workers", kind="jemalloc",  # type: ignore[arg-type]
        env=done.env, why="no effect"))
    assert said == "reverted" and patched is not None
    assert patched["spec"] == rc["spec"]


def test_a_users_own_ld_preload_is_remediated_in_the_env() -> None:
    """Env wins over envFrom: where the Ray container sets LD_PRELOAD itself,
    jemalloc joins it there (the init container had that variable anyway)."""
    rc = _rc()
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "LD_PRELOAD", "value": "/opt/libmine.so"}]
    kube = RemedyKube(rc)
    done = _jemalloc_auto(kube, rc)
    assert kube.configmaps == {} and done.env["LD_PRELOAD"].endswith(":/opt/libmine.so")


class AdmittedKube(RemedyKube):
    async def delete_configmap(self, namespace: str, name: str) -> None:
        self.log.append(("delete-configmap", name))
        self.configmaps.pop(name, None)


def test_a_rayservices_cluster_is_remediated_through_admission_alone() -> None:
    """Issue 64, 4: with the webhook served, a held cluster (a RayService's)
    gets the remediation through its ConfigMap alone, which the webhook
    names in the group's new pods: no template of KubeRay's is touched, the
    review starts as for any cluster (the pods' envFrom mark), and a revert
    deletes the ConfigMap."""
    rc = _owned_by_service(_rc())
    rc["metadata"]["uid"] = "rc-uid"
    kube = AdmittedKube(rc)
    pod = pi.pod_info({"metadata": {"name": "w1", "uid": "u1", "labels": {C.LABEL_CLUSTER: "rc",
                                                                         C.LABEL_GROUP: "workers"}}})
    done = asyncio.run(remediation.remediate(kube, namespace=NS, spec=JEMALLOC_AUTO, rc=rc,  # type: ignore[arg-type]
                                             pod=pod, decision=_wants_rotation(PolicySettings(), RotationHistory()),
                                             kind="jemalloc", admission=True))
    name = patches.remedy_configmap("rc", "workers", "jemalloc")
    assert kube.log == [("configmap", name)] and done.mode == "auto" and done.rc is None
    assert done.env == patches.env_from_mark(name)
    assert done.says[0].reason is EventReason.REMEDIATION_APPLIED and "admission" in done.says[0].message
    said, _event, patched = asyncio.run(remediation.revert(
        kube, namespace=NS, rc=rc, cluster="rc", group="workers", kind="jemalloc",  # type: ignore[arg-type]
        env=done.env, why="no effect", admission=True))
    assert said == "reverted" and patched is None and name not in kube.configmaps
    assert ("patch-raycluster", "rc") not in kube.log


def test_a_cluster_of_5000_worker_groups_is_held_not_patched_nor_budgeted() -> None:
    """Issue 63, 4: a RayCluster of 5,000 worker groups (829 KB) made a
    patch of 30,000 ops and 11.9 MB, refused 413 every cycle after a 7.1 s
    stall. Past MAX_WORKER_GROUPS it is held (said once), no patch is built
    or sent, no budget kept, and only its first groups are guarded."""
    template = {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.40.0"}]}}
    rc = _rc(workerGroupSpecs=[{"groupName": f"g{i}", "replicas": 1, "template": copy.deepcopy(template)}
                               for i in range(5000)])
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": True},
                            "pdb": {"enabled": True}})
    kube = FakeKube(rc, _guard({}))
    done = asyncio.run(clusters.set_up(kube, namespace=NS, guard=_guard({}), spec=spec,  # type: ignore[arg-type]
                                       clusters=[rc]))
    assert kube.log == [], kube.log[:3]  # no patch, no budget
    assert done.held["rc"].why is kuberayrules.TemplateHold.TOO_MANY_GROUPS
    assert "5000 worker groups" in done.held["rc"].message
    assert [s.reason for s in done.says] == [EventReason.TEMPLATES_HELD]
    declared = clusters.declared_groups([rc])
    assert len(declared) == kuberayrules.MAX_WORKER_GROUPS and ("rc", "g0") in declared
