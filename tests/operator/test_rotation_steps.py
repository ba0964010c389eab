"""The rotation's steps as a table (issue 23): from each phase and what the
pod and the API answer, the next phase, the calls made and the Events the
step returns (it calls nothing back up)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import EvictionAnswer, ServerError
from memoryguard_kuberay.operator.rotations import rotation
from memoryguard_kuberay.operator.rotations.drain import DrainResult
from memoryguard_kuberay.operator.rotations.ledger import InFlight, OutcomeKind, Phase

NOW = 10_000.0


class Api:
    def __init__(self, evict: Any) -> None:
        self.answer = evict
        self.calls: list[str] = []

    async def patch_pod_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.calls.append("annotate:" + ",".join(f"{k.split('/')[-1]}={v}" for k, v in sorted(ann.items())
                                                  if k == C.ANN_PHASE or v is None))

    async def evict(self, namespace: str, name: str, *, dry_run: bool = False,
                    grace_seconds: int | None = None) -> tuple[EvictionAnswer, str]:
        self.calls.append("evict" if grace_seconds is None else f"evict:grace={grace_seconds}")
        if isinstance(self.answer, Exception):
            raise self.answer
        answer: tuple[EvictionAnswer, str] = self.answer
        return answer


class Drainer:
    async def drain(self, **_: Any) -> DrainResult:
        return DrainResult(ok=True, message="drained in 0.4 s")


def _pod(name: str, uid: str, *, ready: bool = True, terminating: bool = False, ray: str = "running") -> pi.PodInfo:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid,
                            "labels": {C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "w"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    state = {"running": {"startedAt": "2026-12-01T00:00:00Z"}} if ray == "running" else {"waiting": {}}
    return pi.pod_info({"metadata": meta, "spec": {"containers": [{"name": "ray-worker"}]},
                        "status": {"phase": "Running", "podIP": "127.0.0.5", "conditions": [
                            {"type": "Ready", "status": "True" if ready else "False"}],
                            "containerStatuses": [{"name": "ray-worker", "started": ray == "running",
                                                   "state": state}]}})


OLD = _pod("w-1", "u1")
NEW = _pod("w-2", "u2")


def _rot(phase: Phase, **kw: Any) -> InFlight:
    return dataclasses.replace(InFlight(pod="w-1", uid="u1", cluster="rc", group="w", reason="ProjectedOOM: x",
                                        requested_at=NOW - 100, phase=phase), **kw)


ROWS = [
    # (name, rotation, pods, eviction answer, phase after, outcome, calls, Events)
    ("draining: drained, marked evicting", _rot(Phase.DRAINING), [OLD], None, Phase.EVICTING, OutcomeKind.GOING_ON,
     ["annotate:rotation-phase=evicting"], ["WorkerDrained"]),
    ("draining: the pod went by itself", _rot(Phase.DRAINING), [], None, Phase.REPLACING, OutcomeKind.GOING_ON,
     [], []),
    ("evicting: evicted", _rot(Phase.EVICTING), [OLD], (EvictionAnswer.EVICTED, ""), Phase.REPLACING,
     OutcomeKind.GOING_ON, ["evict"], ["WorkerEvicted"]),
    # Ray accepted the drain: nothing left for the pod's own grace period to
    # protect (KubeRay's bash does not pass SIGTERM on), a short one asked (issue 58, 4).
    ("evicting a drained pod: a short grace period", _rot(Phase.EVICTING, drained=True), [OLD],
     (EvictionAnswer.EVICTED, ""), Phase.REPLACING, OutcomeKind.GOING_ON, [f"evict:grace={C.DRAINED_GRACE_SECONDS}"],
     ["WorkerEvicted"]),
    ("evicting: a budget says not now", _rot(Phase.EVICTING), [OLD], (EvictionAnswer.REFUSED, "429 budget"),
     Phase.EVICTING, OutcomeKind.GOING_ON, ["evict"], ["WorkerEvictionRefused"]),
    ("evicting: refused once, inside the backoff: no call",
     _rot(Phase.EVICTING, refused=1, last_attempt=NOW - 5, evicting_since=NOW - 5), [OLD], None, Phase.EVICTING,
     OutcomeKind.GOING_ON, [], []),
    ("evicting: a 5xx is a refusal, never a delete", _rot(Phase.EVICTING), [OLD],
     ServerError(500, "InternalError", "boom"), Phase.EVICTING, OutcomeKind.GOING_ON, ["evict"], []),
    ("evicting: refused past the deadline: marks off, failed",
     _rot(Phase.EVICTING, refused=3, last_attempt=NOW - 400, evicting_since=NOW - 4000), [OLD], None,
     Phase.EVICTING, OutcomeKind.FAILED,
     ["annotate:rotation-drain=None,rotation-guard=None,rotation-phase=None,rotation-reason=None,"
      "rotation-requested-at=None"], []),
    ("replacing: a new pod of the group is ready", _rot(Phase.REPLACING, evicted_at=NOW - 30, peers=("u1",)),
     [NEW], None, Phase.REPLACING, OutcomeKind.ROTATED, [], []),
    ("replacing: a peer that was there before is no replacement",
     _rot(Phase.REPLACING, evicted_at=NOW - 30, peers=("u1", "u2")), [NEW], None, Phase.REPLACING,
     OutcomeKind.GOING_ON, [], []),
    # KubeRay replaces a pod only once it is gone (issue 38): the wait for the
    # replacement counts from then; the pod's own end has a wait of its own.
    ("replacing: the evicted pod still Terminating, in its time", _rot(Phase.REPLACING, evicted_at=NOW - 30,
                                                                        peers=("u1",)),
     [_pod("w-1", "u1", terminating=True)], None, Phase.REPLACING, OutcomeKind.GOING_ON, [], []),
    ("replacing: the evicted pod still Terminating past the timeout", _rot(Phase.REPLACING, evicted_at=NOW - 700,
                                                                           peers=("u1",)),
     [_pod("w-1", "u1", terminating=True)], None, Phase.REPLACING, OutcomeKind.FAILED, [], []),
    ("replacing: gone long after its eviction, the replacement's wait starts now",
     _rot(Phase.REPLACING, evicted_at=NOW - 4000, peers=("u1",)), [], None, Phase.REPLACING, OutcomeKind.GOING_ON,
     [], []),
    ("replacing: none in time", _rot(Phase.REPLACING, evicted_at=NOW - 4000, gone_at=NOW - 700, peers=("u1",)), [],
     None, Phase.REPLACING, OutcomeKind.FAILED, [], []),
]


@pytest.mark.parametrize("serving, pod, kind", [
    (False, _pod("w-2", "u2", ready=False), OutcomeKind.GOING_ON),  # a RayCluster's worker: Ready, as before
    # A RayService's: Ready only once Serve places a replica on it (KubeRay's
    # probe asks its own Serve proxy), so running Ray is a replacement.
    (True, _pod("w-2", "u2", ready=False), OutcomeKind.ROTATED),
    (True, _pod("w-2", "u2", ready=False, ray="waiting"), OutcomeKind.GOING_ON),
])
def test_a_rayservices_replacement_counts_once_ray_runs(serving: bool, pod: pi.PodInfo, kind: OutcomeKind) -> None:
    rot = _rot(Phase.REPLACING, evicted_at=NOW - 30, peers=("u1",))
    out = asyncio.run(rotation.advance(rot, kube=Api(None), drainer=Drainer(), pods=[pod],  # type: ignore[arg-type]
                                       gcs_address="127.0.0.5:6379", drain_timeout_s=60, replacement_timeout_s=600,
                                       eviction_timeout_s=600, now=NOW, serving=serving))
    assert out.kind is kind, out.message


@pytest.mark.parametrize("name,rot,pods,answer,phase,kind,calls,events", ROWS, ids=[r[0] for r in ROWS])
def test_a_rotation_step(name: str, rot: InFlight, pods: list[pi.PodInfo], answer: Any, phase: Phase,
                         kind: OutcomeKind, calls: list[str], events: list[str]) -> None:
    api = Api(answer)
    out = asyncio.run(rotation.advance(rot, kube=api, drainer=Drainer(), pods=pods,  # type: ignore[arg-type]
                                       gcs_address="127.0.0.5:6379", drain_timeout_s=60, replacement_timeout_s=600,
                                       eviction_timeout_s=600, now=NOW))
    assert (rot.phase, out.kind) == (phase, kind)
    assert [c for c in api.calls if c] == calls
    assert [s.reason.value for s in out.says] == events
    assert all(s.about and s.about[0]["metadata"]["uid"] == "u1" for s in out.says)


@pytest.mark.parametrize("drained,ok", [(True, True), (False, False)])
def test_a_drain_accepted_is_remembered_for_the_eviction_and_across_a_restart(drained: bool, ok: bool) -> None:
    class Refusing(Drainer):
        async def drain(self, **_: Any) -> DrainResult:
            return DrainResult(ok=ok, message="drained" if ok else "the GCS refused")

    rot = _rot(Phase.DRAINING)
    asyncio.run(rotation.advance(rot, kube=Api(None), drainer=Refusing(), pods=[OLD],  # type: ignore[arg-type]
                                 gcs_address="127.0.0.5:6379", drain_timeout_s=60, replacement_timeout_s=600,
                                 eviction_timeout_s=600, now=NOW))
    assert rot.drained is drained
    back = InFlight.from_status(rot.to_status())
    assert back is not None and back.drained is drained


def test_a_rayservices_worker_running_ray_counts_in_its_group() -> None:
    """A RayService's worker is Ready only where Serve put a replica; seen on
    the whole cluster: the one worker of a group, leaking, NotReady for that,
    had its rotation deferred ("the group is short of 1 ready pod") until
    the kernel's kill. It counts once its Ray container runs."""
    from memoryguard_kuberay.operator.rayclusters.groups import Groups

    rc = {"metadata": {"name": "rc", "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService",
                                                          "name": "svc", "uid": "s", "controller": True}]},
          "spec": {"workerGroupSpecs": [{"groupName": "w", "replicas": 1}]}}
    plain = {**rc, "metadata": {"name": "rc"}}
    worker = _pod("w-1", "u1", ready=False)
    assert Groups.of([rc], [worker]).short("rc", "w", rotating=0, inflight=()) == 0
    assert Groups.of([plain], [worker]).short("rc", "w", rotating=0, inflight=()) == 1
    assert Groups.of([rc], [_pod("w-1", "u1", ready=False, ray="waiting")]).short(
        "rc", "w", rotating=0, inflight=()) == 1
