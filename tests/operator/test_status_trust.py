"""Issue 44, 2: a guard's status is trusted no further than what the
operator itself would have written. Whoever may patch
``memoryguards/status`` could list every pod, the head included, as
``evicting``: read back at a restart (or a shard's move), all were evicted.
Rotations read back are now held to the operator's own invariants before
any step of theirs runs; those that fail are dropped with a Warning."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.cycle import guarding
from memoryguard_kuberay.operator.rotations.ledger import Ledger
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import Poll

from .test_cycle_steps import GUARD, NS, RC, SPEC, FakeKube, FakePods, FixedClock, _context, _guard, _pod


def _head() -> dict[str, Any]:
    p = _pod("rc-head", "127.0.0.20")
    p["metadata"]["labels"].update({C.LABEL_NODE_TYPE: "head", C.LABEL_GROUP: C.HEAD_GROUP})
    return p


def _marked(p: dict[str, Any], guard: str = GUARD) -> dict[str, Any]:
    p["metadata"]["annotations"] = {C.ANN_GUARD: guard, C.ANN_PHASE: "evicting", C.ANN_REQUESTED_AT: "1"}
    return p


def _forged(pods: list[dict[str, Any]], phase: str = "evicting") -> dict[str, Any]:
    return {"rotations": {"total": 0, "inFlight": [
        {"pod": p["metadata"]["name"], "uid": p["metadata"]["uid"], "cluster": "rc",
         "group": p["metadata"]["labels"][C.LABEL_GROUP], "reason": "forged", "requestedAt": 1.0 + i,
         "phase": phase} for i, p in enumerate(pods)]}}


class NoEvictions(FakeKube):
    async def evict(self, namespace: str, name: str, *, dry_run: bool = False, grace_seconds: int | None = None) -> Any:
        self.log.append(("evict", name))
        from memoryguard_kuberay.operator.api.errors import EvictionAnswer

        return EvictionAnswer.EVICTED, "evicted"


def test_a_forged_status_evicts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [_head(), _pod("w-1", "127.0.0.11"), _pod("w-2", "127.0.0.12"), _pod("w-3", "127.0.0.13")]
    guard = _guard(SPEC)
    guard["status"] = _forged(pods)
    kube = NoEvictions(RC, guard)
    ctx = _context(kube, FakePods(pods), FixedClock())

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    assert [k for k, _ in kube.log if k == "evict"] == []
    events = [v for k, v in kube.log if k == "event"]
    assert events.count("StatusRecordDropped") == 4, events
    assert loop.mem.status["rotations"]["inFlight"] == []


def test_a_rotation_the_operator_started_is_resumed_within_the_groups_budget() -> None:
    """What a restart must keep: a rotation this guard marked on the pod
    goes on; a second in the same group past maxUnavailable (1) does not."""
    pods = [pi.pod_info(_marked(_pod("w-1", "127.0.0.11"))), pi.pod_info(_marked(_pod("w-2", "127.0.0.12"))),
            pi.pod_info(_marked(_pod("w-3", "127.0.0.13"), guard="another-guard"))]
    ledger = Ledger.from_status(_forged([_pod("w-1", "x"), _pod("w-2", "x"), _pod("w-3", "x")]))
    dropped = ledger.vet(pods, guard=GUARD, guarded=lambda p: True, max_unavailable=1)
    assert list(ledger.inflight) == ["uid-w-1"]
    assert any("maxUnavailable" in d and "w-2" in d for d in dropped)
    assert any("marks" in d and "w-3" in d for d in dropped)
    # Vetted once: a rotation started afterwards is the operator's own and is not asked again.
    assert ledger.unvetted == set()


def test_a_rotation_past_its_eviction_is_kept_as_it_evicts_nothing_more() -> None:
    ledger = Ledger.from_status(_forged([_pod("w-1", "x")], phase="replacing"))
    assert ledger.vet([], guard=GUARD, guarded=lambda p: False, max_unavailable=1) == []
    assert list(ledger.inflight) == ["uid-w-1"]


def test_a_revert_refuses_a_forged_record_of_what_was_there() -> None:
    """The RayCluster's memoryguard.io/remediation-previous is read back as a
    revert writes it: a record MemoryGuard could not have written
    (LD_PRELOAD=/tmp/evil.so where jemalloc's library stood alone) is
    refused, and the template is left as it is."""
    import copy
    import json

    from memoryguard_kuberay.operator.guardspec import Jemalloc
    from memoryguard_kuberay.operator.rayclusters import patches

    rc = copy.deepcopy(RC)
    rc["metadata"]["resourceVersion"] = "3"
    env = patches.jemalloc_env(Jemalloc(), None)
    from memoryguard_kuberay.devkit.emulator.patching import json_patch

    done = json_patch(rc, patches.remediation_patch(rc, "workers", env, record="test"))
    assert patches.revert_patch(done, "workers", env) != []  # the record as MemoryGuard wrote it: reverted
    forged = copy.deepcopy(done)
    notes = forged["metadata"]["annotations"]
    was = json.loads(notes[patches.PREVIOUS_ANNOTATION])
    was["workers"]["LD_PRELOAD"] = {"name": "LD_PRELOAD", "value": "/tmp/evil.so"}
    notes[patches.PREVIOUS_ANNOTATION] = json.dumps(was)
    out = patches.revert_patch(forged, "workers", env)
    assert isinstance(out, str) and "not one MemoryGuard wrote" in out and "refused" in out
    was["workers"]["LD_PRELOAD"] = {"name": "LD_PRELOAD", "valueFrom": {"secretKeyRef": {"name": "x", "key": "y"}}}
    notes[patches.PREVIOUS_ANNOTATION] = json.dumps(was)
    assert isinstance(patches.revert_patch(forged, "workers", env), str)


def test_an_infinite_time_read_back_holds_no_slot_for_ever() -> None:
    ledger = Ledger.from_status({"rotations": {"inFlight": [
        {"pod": "w-1", "uid": "u1", "cluster": "rc", "group": "workers", "requestedAt": 1.0,
         "phase": "replacing", "goneAt": float("inf")}]}})
    assert ledger.inflight["u1"].gone_at is None  # the replacement's wait starts afresh, and ends
