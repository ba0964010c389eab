"""Issue 42, 3: docs/runbooks.md said ``memoryguard.io/rotate=true`` and the
operator took only ``now``: ``true`` did nothing, with no Event, no status,
no log line. Both are taken now; any other value gets one Warning on the
pod saying what is taken."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.cycle import guarding
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import Poll
from memoryguard_kuberay.operator.status import pods_listed

from .test_cycle_steps import GUARD, NS, RC, SPEC, FakeKube, FakePods, FixedClock, _context, _guard, _pod


@pytest.mark.parametrize("value, taken", [("now", True), ("true", True), ("True ", True), ("yes", False),
                                          ("", False)])
def test_the_values_taken(value: str, taken: bool) -> None:
    p = _pod("w", "127.0.0.11")
    p["metadata"]["annotations"] = {C.ANN_ROTATE: value}
    info = pi.pod_info(p)
    assert info.user_requested is taken and (info.ask_ignored is None) is taken


def test_a_value_not_taken_is_said_once_on_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _pod("w-asked", "127.0.0.11")
    asked["metadata"]["annotations"] = {C.ANN_ROTATE: "please"}
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([asked, _pod("w-2", "127.0.0.12")]), FixedClock())

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    asyncio.run(guarding.cycle(loop, kube.guard))
    events = [v for k, v in kube.log if k == "event"]
    assert events.count("RotateAnnotationIgnored") == 1, events
    assert loop.mem.status["remembered"]["ignoredAsks"] == ["uid-w-asked"]


def test_a_pending_pod_and_a_pod_made_before_the_sidecar_degrade_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42, 1 and 2: a worker waiting for a node read SidecarUnreachable
    and made the guard Degraded (two alerts after 10 and 15 minutes); a pod
    made before the injection read "Connect call failed" for ever. Each has
    its own verdict, saying why, and the guard is not Degraded for them."""
    pending = _pod("w-pending", "")
    pending["status"] = {"phase": "Pending"}
    early = _pod("w-early", "127.0.0.12")  # no sidecar container: made before the injection
    spec = {**SPEC, "sidecar": {"inject": True}}
    kube = FakeKube(RC, _guard(spec))
    ctx = _context(kube, FakePods([pending, early]), FixedClock())
    asked: list[str] = []

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        asked.append(ip)
        return Poll((), "Connect call failed", 0.01, failure=sidecar_client.PollFailure.UNREACHABLE)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    st = loop.mem.status
    assert asked == ["127.0.0.12"]  # the pending pod is not asked; the early one is, and nothing answers
    assert pods_listed(st)["w-pending"]["pollFailure"] == "PodNotRunning" and "Pending" in pods_listed(st)["w-pending"][
        "sidecarError"]
    assert pods_listed(st)["w-early"]["pollFailure"] == "NoSidecar"
    assert "gets the sidecar when it is replaced" in pods_listed(st)["w-early"]["sidecarError"]
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False", degraded
    assert st["summary"]["sidecarUnreachable"] == 0 and st["summary"]["notAsked"] == 2


@pytest.mark.parametrize("spec, ready, reason", [
    ({**SPEC, "clusterSelector": {"names": ["rc", "typo-rc"]}}, False, "ClusterNotFound"),
    ({**SPEC, "workerGroups": ["workers", "wrokers"]}, False, "UnknownWorkerGroup"),
    (SPEC, True, "Guarding"),
])
def test_ready_says_whether_the_guard_guards_what_its_spec_names(spec: dict[str, Any], ready: bool, reason: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42, 4: a misspelled cluster name or a worker group no cluster
    has read READY True."""
    class Kube(FakeKube):
        async def get_raycluster(self, namespace: str, name: str, budget: Any = None) -> dict[str, Any]:
            if name != "rc":
                from memoryguard_kuberay.operator.api.errors import NotFound

                raise NotFound(404, "NotFound", f"rayclusters {name} not found")
            return self.rc

    kube = Kube(RC, _guard(spec))
    ctx = _context(kube, FakePods([_pod("w-1", "127.0.0.11")]), FixedClock())

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    cond = next(c for c in loop.mem.status["conditions"] if c["type"] == "Ready")
    assert (cond["status"] == "True", cond["reason"]) == (ready, reason), cond
