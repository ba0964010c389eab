"""What the operator reads from outside (a sidecar's answer, a pod, its
status): any input, no exception, and nothing invalid let through."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import PodWindow
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.operator.api import podinfo
from memoryguard_kuberay.operator.rotations import ledger
from memoryguard_kuberay.operator.sidecars import sidecar_client

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                           max_leaves=20)
NOW = 1_800_000_000.0


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_sidecar_answer_any_bytes(body: bytes) -> None:
    p = sidecar_client.parse(body, latency_s=0.01, now_s=NOW)
    assert p.samples == () or p.error is None or "rejected" in p.error


@settings(max_examples=300)
@given(st.lists(st.dictionaries(st.sampled_from(["time", "memory_current", "memory_max", "inactive_file",
                                                 "oom_kill", "psi_full_avg10"]), json_values), max_size=8))
def test_sidecar_samples_are_valid_ordered_and_never_from_the_future(raw: list) -> None:  # type: ignore[type-arg]
    p = sidecar_client.parse(json.dumps({"samples": raw}).encode(), latency_s=0.0, now_s=NOW)
    times = [s.time_s for s in p.samples]
    assert times == sorted(times) and all(t <= NOW + sidecar_client.MAX_FUTURE_S for t in times)
    assert p.rejected + len(p.samples) == len(raw)
    w = PodWindow(PolicySettings())
    for s in p.samples:  # and the policy takes whatever got through
        w.add(s)


def test_truncated_and_garbage_answers() -> None:
    good = json.dumps({"source": "x", "samples": [{"time": NOW, "memory_current": 5}]}).encode()
    assert sidecar_client.parse(good, latency_s=0, now_s=NOW).samples[0].memory_current_bytes == 5
    assert sidecar_client.parse(good[:-7], latency_s=0, now_s=NOW).error == "response is not JSON"
    assert sidecar_client.parse(b"[]", latency_s=0, now_s=NOW).error == "response has no samples list"
    skewed = json.dumps({"samples": [{"time": NOW + 86400}]}).encode()
    p = sidecar_client.parse(skewed, latency_s=0, now_s=NOW)
    assert p.samples == () and p.rejected == 1


@given(st.dictionaries(st.sampled_from(["metadata", "status", "spec"]), json_values))
def test_pod_info_any_shape(pod: dict) -> None:  # type: ignore[type-arg]
    info = podinfo.pod_info(pod)
    assert isinstance(info.name, str) and isinstance(info.annotations, Mapping)
    assert info.ip is None or isinstance(info.ip, str)
    assert not info.user_requested or info.annotations.get(C.ANN_ROTATE, "").strip().lower() == "now"


@given(st.dictionaries(st.sampled_from(["pod", "uid", "cluster", "group", "reason", "requestedAt", "phase",
                                        "evictedAt", "refused", "peers", "lastAttempt"]), json_values))
def test_in_flight_from_any_status(d: dict) -> None:  # type: ignore[type-arg]
    r = ledger.InFlight.from_status(d)
    assert r is None or isinstance(r.requested_at, float)


def _sample(t: float) -> dict[str, object]:
    return {"time": t, "memory_current": 5, "memory_max": 10, "working_set": 4}


def test_answer_from_another_pod_is_dropped() -> None:
    body = json.dumps({"pod": {"uid": "u-other", "name": "w-other"}, "samples": [_sample(NOW)]}).encode()
    p = sidecar_client.parse(body, latency_s=0, now_s=NOW, pod_uid="u-mine")
    assert p.samples == () and p.error is not None and "w-other" in p.error
    assert len(sidecar_client.parse(body, latency_s=0, now_s=NOW, pod_uid="u-other").samples) == 1
    # A sidecar that names no pod is believed (run by hand, older version).
    anon = json.dumps({"samples": [_sample(NOW)]}).encode()
    assert len(sidecar_client.parse(anon, latency_s=0, now_s=NOW, pod_uid="u-mine").samples) == 1


async def test_a_large_answer_arriving_in_pieces_is_read_whole() -> None:
    """The first poll after a restart brings hours of samples; they come in
    several TCP reads and must all be read (a single read gets a part)."""
    import asyncio

    body = json.dumps({"samples": [_sample(NOW - 1800 + i) for i in range(1800)]}).encode()

    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 50_000):
            writer.write(body[i:i + 50_000])
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.close()

    server = await asyncio.start_server(dribble, "127.0.0.31", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        p = await sidecar_client.poll("127.0.0.31", port, None, timeout_s=5, now=lambda: NOW)
    assert p.error is None and len(p.samples) == 1800


# -- a hostile sidecar (issue 12): bounded whatever it sends ----------------------------------
def test_hostile_answers_are_refused_whole() -> None:
    cap = sidecar_client.MAX_BODY
    empties = b'{"samples":[' + b",".join([b"{}"] * (cap // 3)) + b"]}"
    assert len(empties) > cap and "too large" in str(sidecar_client.parse(empties, latency_s=0, now_s=NOW).error)
    many = json.dumps({"samples": [{}] * (sidecar_client.MAX_SAMPLES + 1)}).encode()
    assert len(many) < cap
    p = sidecar_client.parse(many, latency_s=0, now_s=NOW)
    assert p.samples == () and "at most 2000" in str(p.error)
    deep = b'{"samples":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert sidecar_client.parse(deep[:cap], latency_s=0, now_s=NOW).error == "response is not JSON"


def test_samples_too_old_or_from_the_future_are_not_taken() -> None:
    body = json.dumps({"samples": [_sample(NOW - 7200), _sample(NOW - 60), _sample(NOW + 11),
                                   _sample(NOW + 119)]}).encode()
    p = sidecar_client.parse(body, latency_s=0, now_s=NOW, oldest_s=NOW - 3600)
    assert [s.time_s for s in p.samples] == [NOW - 60]
    assert p.rejected == 2  # the future ones; the old one is skipped, not counted as bad


def test_the_injected_sidecar_must_name_its_pod() -> None:
    anon = json.dumps({"samples": [_sample(NOW)]}).encode()
    p = sidecar_client.parse(anon, latency_s=0, now_s=NOW, pod_uid="u-mine", require_uid=True)
    assert p.samples == () and "names no pod" in str(p.error)
    named = json.dumps({"pod": {"uid": "u-mine"}, "samples": [_sample(NOW)]}).encode()
    assert len(sidecar_client.parse(named, latency_s=0, now_s=NOW, pod_uid="u-mine", require_uid=True).samples) == 1


class _Pages:
    """A loopback sidecar answering each ``/v1/samples?since=`` with what
    ``page(since)`` gives, and ``more: true``; ``asked`` records each since."""

    def __init__(self, page: Any) -> None:
        self.page, self.asked = page, []  # type: ignore[var-annotated]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(head.split(" ")[1]).query)
        since = float(query["since"][0]) if "since" in query else None
        self.asked.append(since)
        body = json.dumps({"samples": self.page(since), "more": True}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


async def test_paged_answers_are_followed_within_the_page_limit() -> None:
    pages = _Pages(lambda since: [_sample((since or NOW - 1000) + 1 + i) for i in range(10)])
    server = await asyncio.start_server(pages.handle, "127.0.0.31", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        p = await sidecar_client.poll("127.0.0.31", port, None, timeout_s=5, now=lambda: NOW, max_pages=3,
                                      oldest_s=NOW - 500)
    assert pages.asked == [NOW - 500, NOW - 490, NOW - 480]  # from the window's start, then from each last sample
    assert len(p.samples) == 30 and p.more


async def test_pages_share_one_budget_per_poll() -> None:
    # Issue 24: each page within the caps, `more: true` page after page, was
    # 32,000 samples a poll. Now a poll stops at MAX_POLL_SAMPLES across its
    # pages; the rest comes with the next poll, from its last sample.
    pages = _Pages(lambda since: [_sample(since + 0.001 * (i + 1)) for i in range(sidecar_client.MAX_SAMPLES - 1)])
    server = await asyncio.start_server(pages.handle, "127.0.0.31", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        first = await sidecar_client.poll("127.0.0.31", port, None, timeout_s=5, now=lambda: NOW,
                                          oldest_s=NOW - 7000)
        second = await sidecar_client.poll("127.0.0.31", port, first.samples[-1].time_s, timeout_s=5,
                                           now=lambda: NOW, oldest_s=NOW - 7000)
    assert len(first.samples) == sidecar_client.MAX_POLL_SAMPLES and first.more and len(pages.asked) == 2 + 2
    assert second.samples[0].time_s > first.samples[-1].time_s  # the next poll goes on where this one stopped


mark_values = st.text(max_size=12) | st.sampled_from(["draining", "evicting", "replacing", "leak-guard", "nan",
                                                       "inf", "-1e308", "1800000000"])


@settings(max_examples=300)
@given(st.lists(st.dictionaries(st.sampled_from([C.ANN_PHASE, C.ANN_GUARD, C.ANN_REQUESTED_AT,
                                                 C.ANN_REASON, "x"]), mark_values), max_size=6))
def test_rotation_marks_of_any_content_adopt_within_budget(marks: list[dict[str, str]]) -> None:
    """Rotation annotations anyone with pod patch rights could write: a
    restarted guard adopts only known steps, never more than maxUnavailable
    of a group, and never a time that is not a number."""
    import math

    book = ledger.Ledger()
    pods = [podinfo.pod_info({"metadata": {"name": f"w{i}", "uid": f"u{i}", "annotations": {**m, C.ANN_GUARD: (
        m.get(C.ANN_GUARD) if i % 2 else "leak-guard")}, "labels": {
        C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "g"}}}) for i, m in enumerate(marks)]
    book.adopt(pods, guard="leak-guard", max_unavailable=PolicySettings().max_unavailable, now=1e9)
    assert len(book.inflight) <= PolicySettings().max_unavailable
    for r in book.inflight.values():
        assert r.phase in set(ledger.Phase) and math.isfinite(r.requested_at)


def test_desired_replicas_counts_hosts_and_the_head() -> None:
    from memoryguard_kuberay.operator.rayclusters.groups import desired_replicas

    rc = {"metadata": {"name": "rc"}, "spec": {"workerGroupSpecs": [
        {"groupName": "cpu", "replicas": 3}, {"groupName": "tpu", "replicas": 2, "numOfHosts": 4},
        {"groupName": "bad", "replicas": "x"}, {"replicas": 5}]}}
    assert desired_replicas(rc) == {("rc", "headgroup"): 1, ("rc", "cpu"): 3, ("rc", "tpu"): 8}


@settings(max_examples=200)
@given(json_values)
def test_desired_replicas_of_any_spec(spec: object) -> None:
    from memoryguard_kuberay.operator.rayclusters.groups import desired_replicas

    out = desired_replicas({"metadata": {"name": "rc"}, "spec": spec if isinstance(spec, dict) else {
        "workerGroupSpecs": spec}})
    assert all(isinstance(n, int) and n >= 0 for n in out.values())


def test_group_short_counts_missing_and_unready_pods_and_rotations_started_this_cycle() -> None:
    from memoryguard_kuberay.operator.rayclusters.groups import Groups

    book = ledger.Ledger()
    # KubeRay keeps 4; one is missing and one is not ready: 2 available.
    groups = Groups(desired={("rc", "g"): 4}, available={("rc", "g"): ("a", "b")})
    assert groups.short("rc", "g", rotating=0, inflight=book.inflight) == 2
    # One of the available pods starts rotating this cycle: it leaves the
    # available ones and counts as rotating, so the group is no shorter.
    book.inflight["a"] = ledger.InFlight(pod="a", uid="a", cluster="rc", group="g", reason="",
                                         requested_at=0.0, phase=ledger.Phase.DRAINING)
    assert book.rotating_in("rc", "g") == 1
    assert groups.short("rc", "g", rotating=1, inflight=book.inflight) == 2
    assert groups.short("rc", "other", rotating=0, inflight=book.inflight) == 0  # a group the RayCluster does not name


class _Clock:
    """The operator's clock, moved by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def real_seconds(self, s: float) -> float:
        return s


def test_the_budget_follows_the_time_since_a_pod_was_last_fed() -> None:
    full = (sidecar_client.MAX_POLL_SAMPLES, sidecar_client.MAX_POLL_BYTES)
    assert sidecar_client.poll_budget(None) == full  # a first poll, or the first after an outage
    n, size = sidecar_client.poll_budget(15.0)
    assert n == 130 and size < 100 * 1024  # one 15 s interval: room for 130 samples, not a 512 KiB page
    assert sidecar_client.poll_budget(3600.0) == full  # an hour's backlog comes whole


async def test_a_pod_that_brings_a_full_page_at_every_poll_is_refused_unread_until_time_allows() -> None:
    # Issue 24: 100 pods answering a full page with `more: true` at every
    # poll, each poll within the caps, stalled the operator's loop 5.5 s.
    from memoryguard_kuberay.operator.cycle import judging
    from memoryguard_kuberay.operator.metrics import OperatorMetrics

    # Always newer than asked for: without a budget each page would be taken whole.
    flood = _Pages(lambda since: [_sample((since or NOW - 3000) + 0.001 * (i + 1))
                                  for i in range(sidecar_client.MAX_SAMPLES - 1)])
    steady = _Pages(lambda since: [_sample(t) for t in (NOW - 10, NOW - 5) if since is None or t > since])
    clock = _Clock(NOW)
    settings_ = PolicySettings()
    async with await asyncio.start_server(flood.handle, "127.0.0.32", 0) as s1, \
            await asyncio.start_server(steady.handle, "127.0.0.33", 0) as s2:
        how = judging.Polling(port=0, timeout_s=5, clock=clock, metrics=OperatorMetrics(),  # type: ignore[arg-type]
                              namespace="ns", guard="g", slots=(asyncio.Semaphore(4), asyncio.Semaphore(4)),
                              at_once=4)
        pods = {}
        for name, ip, srv in (("flood", "127.0.0.32", s1), ("steady", "127.0.0.33", s2)):
            pod = podinfo.pod_info({"metadata": {"name": name, "uid": name}, "status": {"phase": "Running",
                                                                                          "podIP": ip}})
            pods[name] = (pod, judging.PodState(PodWindow(settings_), "w"), srv.sockets[0].getsockname()[1])
        seen: dict[str, list[int]] = {"flood": [], "steady": []}
        for _ in range(3):
            for name, (pod, track, port) in pods.items():
                await judging.poll_into(pod, track, dataclasses.replace(how, port=port), settings_)
                seen[name].append(track.window.samples_seen)
            clock.t += 15
    assert seen["flood"][0] >= sidecar_client.MAX_SAMPLES - 1  # its first poll: the whole budget
    assert seen["flood"][1:] == [seen["flood"][0]] * 2  # then nothing: each page refused unread
    assert "too large" in (pods["flood"][1].error or "")
    assert seen["steady"] == [2, 2, 2] and pods["steady"][1].error is None  # a sidecar as it should be


async def test_a_guards_polls_under_way_are_bounded_by_its_workers_not_its_pods() -> None:
    # 40 pods, room for 100 polls in the slots, 3 workers: never more than 3
    # asks in flight at the sidecars, and every pod polled and judged once.
    from memoryguard_kuberay.core.policy import RotationHistory
    from memoryguard_kuberay.operator.cycle import judging
    from memoryguard_kuberay.operator.metrics import OperatorMetrics

    open_now, most, asked = 0, 0, 0

    async def slow_sidecar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, most, asked
        open_now, asked = open_now + 1, asked + 1
        most = max(most, open_now)
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.02)
        body = json.dumps({"samples": [_sample(NOW - 5)]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()
        open_now -= 1

    async with await asyncio.start_server(slow_sidecar, "127.0.0.42", 0) as server:
        how = judging.Polling(port=server.sockets[0].getsockname()[1], timeout_s=5, clock=_Clock(NOW),  # type: ignore[arg-type]
                              metrics=OperatorMetrics(), namespace="ns", guard="g",
                              slots=(asyncio.Semaphore(100), asyncio.Semaphore(100)), at_once=3)
        pods = [podinfo.pod_info({"metadata": {"name": f"w{i}", "uid": f"u{i}"},
                                  "status": {"phase": "Running", "podIP": "127.0.0.42"}}) for i in range(40)]
        tracks: dict[str, judging.PodState] = {}
        judged = await judging.poll_and_judge(pods, tracks, how, PolicySettings(), lambda p: RotationHistory())
    assert most == 3 and asked == 40
    assert sorted(j.pod.name for j in judged) == sorted(p.name for p in pods)
    assert all(t.window.samples_seen == 1 and t.error is None for t in tracks.values())


def test_the_pod_cache_keeps_one_copy_of_what_many_pods_carry() -> None:
    # The cache holds every pod of the watched namespaces: what pods share
    # is one object, what is a pod's own is its own, and nothing is lost.
    def pod(i: int) -> dict[str, Any]:
        raw = {"metadata": {"name": f"rc-w-{i}", "namespace": "team-a", "uid": f"u{i}",
                            "labels": {C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "workers"},
                            "annotations": {"unrelated": "x" * 100}},
               "spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.49.0",
                                        "env": [{"name": "MALLOC_CONF", "value": "background_thread:true"}]}]},
               "status": {"phase": "Running", "podIP": f"10.0.0.{i}"}}
        return json.loads(json.dumps(raw))  # each parsed on its own, as the watch hands them over

    a, b = podinfo.pod_info(pod(1)), podinfo.pod_info(pod(2))
    for field in ("namespace", "cluster", "group", "phase", "template"):
        assert getattr(a, field) is getattr(b, field), field
    assert next(iter(a.remedy_env.values())) is next(iter(b.remedy_env.values()))
    assert a.annotations is b.annotations and dict(a.annotations) == {}  # not ours: not kept
    assert (a.name, a.uid, a.ip, a.namespace, a.group) == ("rc-w-1", "u1", "10.0.0.1", "team-a", "workers")
    assert dict(a.remedy_env) == {"MALLOC_CONF": "background_thread:true"} and a.template == b.template
    assert not hasattr(a, "__dict__")  # slots: no dict a pod
