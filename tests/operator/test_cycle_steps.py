"""The middle tier (issue 23): a guard's whole cycle driven on a fake API
and fake pollers, no server, no sockets. What it shows: the cycle is the
list of steps it says; each step's decision is applied status first, Events
after; one pod's bad answer is that pod's verdict while a leaking pod of the
same guard is rotated; an invalid spec is said once per generation."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.clock import Clock, micro_time
from memoryguard_kuberay.operator.cycle import guarding, guardstate, steps
from memoryguard_kuberay.operator.cycle.guardroster import GuardRoster
from memoryguard_kuberay.operator.decided import Decided
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import Poll, PollFailure
from memoryguard_kuberay.operator.status import pods_listed

GIB = 1024**3
NS, GUARD = "team-a", "g"


class FakeKube:
    """What a cycle asks of the API, answered from memory; every write is
    recorded in order (with the Events, which the poster hands here)."""

    def __init__(self, rc: dict[str, Any], guard: dict[str, Any]) -> None:
        self.rc, self.guard = rc, guard
        self.log: list[tuple[str, Any]] = []

    async def get_raycluster(self, namespace: str, name: str, budget: Any = None) -> dict[str, Any]:
        return self.rc

    async def raycluster_names(self, namespace: str, *, most: int = 2000) -> list[str]:
        return [self.rc["metadata"]["name"]]

    async def list_guard_identities(self, namespace: str) -> list[dict[str, Any]]:
        return [self.guard]

    async def get_guard(self, namespace: str, name: str) -> dict[str, Any]:
        return self.guard

    async def json_patch_raycluster(self, namespace: str, name: str, ops: list[Any]) -> None:
        self.log.append(("patch-raycluster", name))

    async def pdb_pages(self, namespace: str, selector: str) -> Any:
        for _ in ():
            yield [], ""

    async def create_pdb(self, namespace: str, body: Any) -> None:
        self.log.append(("create-pdb", body["metadata"]["name"]))

    async def patch_pod_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.log.append(("annotate", name))

    async def patch_guard_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.log.append(("status", patch))


class FakeEvents:
    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.said: list[Any] = []

    def announce(self, namespace: str, guard: Any, said: Any) -> None:
        self.kube.log.append(("event", said.reason.value))
        self.said.append(said)


class FakePods:
    def __init__(self, pods: Iterable[dict[str, Any]]) -> None:
        self.infos = [pi.pod_info(p) for p in pods]

    async def pods(self, namespace: str, guard: str, clusters: Iterable[str], *, wait_s: float) -> list[pi.PodInfo]:
        return list(self.infos)

    async def release(self, namespace: str, guard: str) -> None:
        pass


class FixedClock(Clock):
    def __init__(self) -> None:
        super().__init__(1.0, None)
        self.t = 1_000_000.0

    def now(self) -> float:
        return self.t


def _pod(name: str, ip: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": {
        C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "workers", C.LABEL_IS_RAY_NODE: "yes"}},
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


RC = {"metadata": {"name": "rc", "namespace": NS}, "spec": {"workerGroupSpecs": [
    {"groupName": "workers", "replicas": 2, "template": {"spec": {"containers": [{"name": "ray"}]}}}]}}


def _guard(spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
            "metadata": {"name": GUARD, "namespace": NS, "uid": "guard-uid", "generation": generation,
                         "creationTimestamp": "2026-12-01T00:00:00Z"}, "spec": spec}


SPEC = {"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": False}, "pdb": {"enabled": False},
        "forensics": {"enabled": False}, "sampling": {"intervalSeconds": 15}, "policy": {"criticalForSeconds": 300}}


def _leaking(now: float) -> tuple[Sample, ...]:
    # 40 minutes climbing 6 GiB/h, the last ten minutes at 98% of its 4 GiB limit.
    out = []
    for i in range(160):
        t = now - (160 - i) * 15
        cur = min(int(1.0 * GIB + 6 * GIB * (i * 15) / 3600), int(0.98 * 4 * GIB))
        out.append(Sample(time_s=t, memory_current_bytes=cur, memory_max_bytes=4 * GIB, anon_bytes=cur,
                          file_bytes=0, inactive_file_bytes=0, shmem_bytes=0))
    return tuple(out)


def _context(kube: FakeKube, pods: FakePods, clock: FixedClock) -> guardstate.OperatorContext:
    return guardstate.OperatorContext(kube=kube, events=FakeEvents(kube), drainer=None, clock=clock,  # type: ignore[arg-type]
                                    metrics=OperatorMetrics(), pods=pods,  # type: ignore[arg-type]
                                    roster=GuardRoster(kube))  # type: ignore[arg-type]


def test_the_cycle_runs_its_steps_in_order_and_writes_the_status_once_and_at_the_checkpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps run in the order guarding.py says, each called with what
    the ones before it returned; the status is written at the checkpoint
    after the rotations advanced and once at the end, never after each
    step; the Events come after the status that records them."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([_pod("w-leak", "127.0.0.11"), _pod("w-calm", "127.0.0.12")]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll(_leaking(clock.t) if ip == "127.0.0.11" else (), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    ran: list[str] = []
    order = ["read_spec", "admit", "find_clusters", "say_missing_clusters", "set_up_clusters", "read_pods",
             "hold_while_placing", "advance_rotations", "take_evidence", "poll_and_decide", "review_remediations",
             "summarize"]
    for name in order:
        real = getattr(steps, name)

        def traced(*args: Any, _real: Any = real, _name: str = name) -> Any:
            ran.append(_name)
            kube.log.append(("step", _name))
            return _real(*args)

        monkeypatch.setattr(steps, name, traced)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    assert ran == order
    writes = [i for i, (k, _) in enumerate(kube.log) if k == "status"]
    checkpoint = kube.log.index(("step", "advance_rotations"))
    assert all(i > checkpoint for i in writes)  # none of the steps before wrote on its own
    assert len(writes) <= 2 and writes[-1] > kube.log.index(("step", "summarize"))
    events = [i for i, (k, _) in enumerate(kube.log) if k == "event"]
    assert events and min(events) > writes[-1]  # the rotation started is announced after its record
    assert "uid-w-leak" in str(loop.mem.status["rotations"]["inFlight"])


def test_a_bad_pod_is_its_own_verdict_while_its_leaking_neighbour_is_rotated(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FixedClock()
    leaking, odd = _pod("w-leak", "127.0.0.11"), _pod("w-odd", "127.0.0.12")
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([leaking, odd]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        if ip == "127.0.0.12":
            return Poll((), "HTTP/1.1 answer with a Content-Length of 10**400", 0.01, failure=PollFailure.BAD_ANSWER)
        return Poll(_leaking(clock.t), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    delay = asyncio.run(guarding.cycle(loop, kube.guard)).delay_s
    # The next cycle comes at the guard's own place in the interval (cadence.py), within half of one either way.
    assert 7.5 <= delay <= 22.5
    assert (clock.t + delay - loop.phase * 15) % 15 == pytest.approx(0, abs=1e-6)
    kinds = [k for k, _ in kube.log]
    # The leaking pod was marked, its rotation recorded in status, and only then announced.
    assert ("annotate", "w-leak") in kube.log and ("annotate", "w-odd") not in kube.log
    started = kinds.index("event")
    assert kube.log[started] == ("event", "WorkerRotationStarted")
    recorded = [i for i, (k, v) in enumerate(kube.log) if k == "status" and "uid-w-leak" in str(v.get("rotations"))]
    assert recorded and recorded[0] < started
    final = loop.mem.status
    assert pods_listed(final)["w-odd"]["pollFailure"] == "BadAnswer"
    assert pods_listed(final)["w-leak"]["verdict"] != "BadAnswer"
    assert "uid-w-leak" in str(final["rotations"]["inFlight"])


def test_a_pod_whose_samples_break_the_policy_is_named_and_the_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a pod's samples make go wrong past the poller is caught at
    that pod (judging.poll_and_judge), never in the cycle."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([_pod("w-leak", "127.0.0.11"), _pod("w-weird", "127.0.0.13")]), clock)

    @dataclasses.dataclass(frozen=True)
    class Weird(Sample):
        @property
        def working_set_bytes(self) -> int | None:
            raise ArithmeticError("a sample no policy can read")

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        if ip == "127.0.0.13":
            return Poll((Weird(time_s=clock.t - 1, memory_current_bytes=1, memory_max_bytes=2,
                               inactive_file_bytes=0),), None, 0.01)
        return Poll(_leaking(clock.t), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    pods = pods_listed(loop.mem.status)
    assert pods["w-weird"]["pollFailure"] == "BadAnswer" and "ArithmeticError" in pods["w-weird"]["sidecarError"]
    assert ("annotate", "w-leak") in kube.log


def test_while_the_first_placement_is_under_way_a_cycle_counts_its_pods_and_polls_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """shards.py: a release's first placement weighs each shard by its pods
    before any is polled (a shard polled, then moved, cost its first holder
    those polls' memory for nothing)."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([_pod("w-a", "127.0.0.11"), _pod("w-b", "127.0.0.12")]), clock)

    class Placing(guardstate.AllShards):
        on = True

        def placing(self) -> bool:
            return self.on

    ctx.shards = shards = Placing()
    asked: list[str] = []

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        asked.append(ip)
        return Poll(_leaking(clock.t), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    ended = asyncio.run(guarding.cycle(loop, kube.guard))
    assert ended == guarding.Ended(guarding.PLACING_RETRY_S, 2)
    assert asked == [] and not any(k == "annotate" for k, _ in kube.log)
    shards.on = False
    ended = asyncio.run(guarding.cycle(loop, kube.guard))
    assert sorted(asked) == ["127.0.0.11", "127.0.0.12"] and ended.pods == 2
    assert any(k == "annotate" for k, _ in kube.log)  # a leaking pod rotated, once polled


def test_a_guard_that_could_not_read_its_pods_has_not_counted_them() -> None:
    """Its shard is not weighed on it (the bench's first placement settled on
    zeros while the namespace's 40,000 pods were still being listed); one
    ended by a decision before its pods (an invalid spec) polls none: 0."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))

    class Unlisted(FakePods):
        async def pods(self, namespace: str, guard: str, clusters: Iterable[str], *, wait_s: float) -> list[pi.PodInfo]:
            raise ApiError(0, "PodCacheUnusable", "pods not listed yet")

    loop = guarding.Guard(_context(kube, Unlisted([_pod("w-a", "127.0.0.11")]), clock), NS, GUARD)
    assert asyncio.run(guarding.cycle(loop, kube.guard)).pods is None
    bad = FakeKube(RC, _guard({"clusterSelector": {"names": ["rc"]}, "sampling": {"intervalSeconds": -3}}))
    loop = guarding.Guard(_context(bad, FakePods([_pod("w-a", "127.0.0.11")]), clock), NS, GUARD)
    assert asyncio.run(guarding.cycle(loop, bad.guard)).pods == 0


def test_an_invalid_spec_is_said_once_per_generation_and_ends_the_cycle() -> None:
    clock = FixedClock()
    kube = FakeKube(RC, _guard({"clusterSelector": {"names": ["rc"]}, "sampling": {"intervalSeconds": -3}}))
    loop = guarding.Guard(_context(kube, FakePods([]), clock), NS, GUARD)
    assert asyncio.run(guarding.cycle(loop, kube.guard)).delay_s == guarding.INVALID_RETRY_S
    assert asyncio.run(guarding.cycle(loop, kube.guard)).delay_s == guarding.INVALID_RETRY_S
    assert [v for k, v in kube.log if k == "event"] == ["InvalidSpec"]
    ready = next(c for c in loop.mem.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    kube.guard = _guard(kube.guard["spec"], generation=2)
    asyncio.run(guarding.cycle(loop, kube.guard))
    assert [v for k, v in kube.log if k == "event"] == ["InvalidSpec", "InvalidSpec"]


def test_a_step_that_fails_unexpectedly_still_leaves_what_the_steps_before_decided_recorded_and_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The status is written once a cycle; a step that raises past the API
    errors (the daemon logs it and retries) must not lose the rotation a
    step before it started: its record and its Event go out first."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([_pod("w-leak", "127.0.0.11"), _pod("w-calm", "127.0.0.12")]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll(_leaking(clock.t) if ip == "127.0.0.11" else (), None, 0.01)

    async def broken(*_: Any) -> Decided:
        raise RuntimeError("a bug in a later step")

    monkeypatch.setattr(sidecar_client, "poll", poll)
    monkeypatch.setattr(steps, "review_remediations", broken)
    loop = guarding.Guard(ctx, NS, GUARD)
    with pytest.raises(RuntimeError):
        asyncio.run(guarding.cycle(loop, kube.guard))
    assert ("event", "WorkerRotationStarted") in kube.log
    assert "uid-w-leak" in str(loop.mem.status["rotations"]["inFlight"])


def test_the_status_carries_a_heartbeat_written_at_least_every_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 61, 2: the status held no time of its last cycle, and after the
    operator stopped nothing told it from a guard at rest. Every status
    write carries lastCycleTime; a cycle that changed nothing writes only
    that, once it is a heartbeat old (status writes are otherwise skipped)."""
    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    ctx = _context(kube, FakePods([_pod("w-calm", "127.0.0.12")]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    writes = []
    for dt in (0, 15, 30, 45, 60, 75):  # a cycle every interval, nothing changing after the first
        clock.t = 1_000_000.0 + dt
        before = len(kube.log)
        asyncio.run(guarding.cycle(loop, {**kube.guard, "status": loop.memory.status if loop.memory else {}}))
        writes += [(dt, v) for k, v in kube.log[before:] if k == "status"]
    assert writes[0][0] == 0 and writes[0][1]["lastCycleTime"] == micro_time(1_000_000.0)
    later = [(dt, v) for dt, v in writes[1:]]
    assert [dt for dt, _ in later] == [60], later  # the heartbeat, a minute on
    assert later[0][1] == {"lastCycleTime": micro_time(1_000_060.0)}


def test_a_warning_event_is_logged_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 61, 7: Warning Events were logged at INFO.
    from memoryguard_kuberay.operator.decided import Decided, say
    from memoryguard_kuberay.operator.events import EventReason

    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    loop = guarding.Guard(_context(kube, FakePods([]), clock), NS, GUARD)
    loop.memory = guardstate.Memory.from_status({})
    said = (say(EventReason.EVICTION_REFUSED, "w-1: eviction refused (429)"),
            say(EventReason.EVICTED, "w-2 evicted"))
    with caplog.at_level("INFO", logger="memoryguard_kuberay.operator"):
        asyncio.run(guarding._write(loop, kube.guard, Decided(says=said)))
    levels = {r.getMessage().split(" ", 2)[1]: r.levelname for r in caplog.records if "evict" in r.getMessage()}
    assert levels == {"WorkerEvictionRefused:": "WARNING", "WorkerEvicted:": "INFO"}, levels


class NamesKube(FakeKube):
    async def get_raycluster(self, namespace: str, name: str, budget: Any = None) -> dict[str, Any]:
        if name != "rc":
            raise api_error_not_found(name)
        return await super().get_raycluster(namespace, name, budget)

    async def raycluster_names(self, namespace: str, *, most: int = 2000) -> list[str]:
        return ["rc", "serving-rc"]


def api_error_not_found(name: str) -> Exception:
    from memoryguard_kuberay.operator.api.errors import NotFound

    return NotFound(404, "NotFound", f'rayclusters.ray.io "{name}" not found')


def test_a_misspelled_cluster_name_gets_a_warning_with_the_nearest_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 61, 6: a name the namespace lacks was a condition alone, no
    Event and no log line. Now a Warning Event names it with what the
    namespace has near it, once while the missing set stays the same."""
    clock = FixedClock()
    kube = NamesKube(RC, _guard({**SPEC, "clusterSelector": {"names": ["rc", "servng-rc"]}}))
    ctx = _context(kube, FakePods([]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    asyncio.run(guarding.cycle(loop, kube.guard))
    said = [s.message for s in ctx.events.said if s.reason.value == "ClusterNotFound"]  # type: ignore[attr-defined]
    assert said == ["spec.clusterSelector.names: RayCluster(s) not found in namespace team-a: servng-rc "
                    "(did you mean serving-rc?)"]
    assert loop.mem.status.get("clustersNotFound") == ["servng-rc"]


def test_pods_labelled_with_groups_their_cluster_does_not_declare_are_not_guarded_nor_series(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 63, 6: the per-group series followed each pod's own
    ``ray.io/group`` label, so 1,000 Pending pods with distinct labels made
    1,102 series. Only the RayCluster's declared groups are guarded now:
    200 pods with forged groups add no series and no pod to the status."""
    from prometheus_client import generate_latest

    clock = FixedClock()
    kube = FakeKube(RC, _guard(SPEC))
    forged = []
    for i in range(200):
        p = _pod(f"forged-{i}", f"127.0.1.{i % 250 + 1}")
        p["metadata"]["labels"][C.LABEL_GROUP] = f"g{i}"
        p["status"] = {"phase": "Pending"}
        forged.append(p)
    ctx = _context(kube, FakePods([_pod("w-calm", "127.0.0.12"), *forged]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll((), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    text = generate_latest(ctx.metrics.registry).decode()
    groups = {line.split('group="')[1].split('"')[0] for line in text.splitlines()
              if line.startswith("memoryguard_group_") and 'group="' in line}
    assert groups == {"workers"}, sorted(groups)[:10]
    assert [p["name"] for p in loop.mem.status["pods"]] == ["w-calm"]
