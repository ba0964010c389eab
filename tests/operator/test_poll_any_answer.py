"""Whatever a pod sends, the real poller (``sidecar_client.poll`` over
``podhttp``, on a loopback socket) returns a ``Poll`` with a typed failure
and never raises (issue 23: an integer of a few hundred digits in a sample
field, or a status line or Content-Length it did not expect, raised and
stopped the whole guard's cycle). Answers are generated, not listed: a
status line, headers and a body, each drawn from what a sidecar sends and
what it could send instead; 10,000 of them, each on through the policy as
the cycle feeds it; and the peak memory over 2,000 more, bounded. The cycle itself beside a
pod answering such shapes: the fault-matrix row ``sidecar-odd``."""

from __future__ import annotations

import asyncio
import json
import math
import resource
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryguard_kuberay.core.policy import PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import PollFailure

IP = "127.0.0.71"
NOW = 1_800_000_000.0
FIELDS = ["time", "memory_current", "memory_max", "inactive_file", "anon", "oom_kill", "psi_full_avg10",
          "plasma_used", "plasma_capacity", "spilled_bytes"]

numbers = (st.integers() | st.integers(min_value=10**300, max_value=10**400) | st.integers(max_value=-10**300)
           | st.floats() | st.just(NOW) | st.floats(min_value=NOW - 3600, max_value=NOW + 60))
values = numbers | st.none() | st.booleans() | st.text(max_size=12) | st.lists(st.integers(), max_size=3)
sample = st.dictionaries(st.sampled_from(FIELDS), values, max_size=len(FIELDS))
doc = st.fixed_dictionaries({"samples": st.lists(sample, max_size=6)}, optional={
    "more": st.booleans() | values, "source": values, "pod": st.dictionaries(st.sampled_from(["uid", "name"]),
                                                                             values) | values})
body = (doc.map(lambda d: json.dumps(d).encode()) | st.binary(max_size=300)
        | st.integers(min_value=10**300, max_value=10**400).map(lambda n: f'{{"samples": [{{"time": {n}}}]}}'.encode()))
status_line = st.sampled_from(["HTTP/1.1 200 OK", "HTTP/1.0 200 OK", "HTTP/1.1 ²00 OK", "HTTP/1.1 200", "HTTP/2 200",
                               "HTTP/1.1 9999999999999999999 OK", "HTTP/1.1 404 Not Found", "", "garbage",
                               "HTTP/1.1 -200 X", "HTTP/1.1 ٢٠٠ OK"]) | st.text(max_size=20)
length = st.sampled_from(["exact", "none", "²", "99999999999999999999999", "-1", "1e3", " 12 ", "0", "twice",
                          "short", "٣"])


def _answer(status: str, content_length: str, payload: bytes, extra: list[str]) -> bytes:
    head = [status.replace("\r", "").replace("\n", "")]
    if content_length == "exact":
        head.append(f"Content-Length: {len(payload)}")
    elif content_length == "twice":
        head += [f"Content-Length: {len(payload)}", f"Content-Length: {len(payload) + 1}"]
    elif content_length == "short":
        head.append(f"Content-Length: {len(payload) + 50}")
    elif content_length != "none":
        head.append(f"Content-Length: {content_length}")
    head += [h.replace("\r", "").replace("\n", "") for h in extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode("utf-8", "replace") + payload


class Server:
    """Loopback, answering each connection with the current answer bytes."""

    def __init__(self) -> None:
        self.answer = b""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.answer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _poll_once(server: Server, answer: bytes, uid: str | None) -> sidecar_client.Poll:
    server.answer = answer
    srv = await asyncio.start_server(server.handle, IP, 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        return await sidecar_client.poll(IP, port, None, timeout_s=2, now=lambda: NOW, pod_uid=uid,
                                         oldest_s=NOW - 7200, max_pages=2)
    finally:
        srv.close()
        await srv.wait_closed()


WINDOW = PodWindow(PolicySettings())  # one pod's policy state, fed every answer as the cycle feeds it


@settings(max_examples=10_000, suppress_health_check=[HealthCheck.too_slow])
@given(status_line, length, body, st.lists(st.sampled_from(["Transfer-Encoding: chunked", "Content-Type: x",
                                                            "X: " + "y" * 100, ":", "Content-Length"]), max_size=2),
       st.sampled_from([None, "uid-1"]))
def test_any_answer_is_a_poll_never_an_exception(status: str, content_length: str, payload: bytes,
                                                 extra: list[str], uid: str | None) -> None:
    p = asyncio.run(_poll_once(Server(), _answer(status, content_length, payload, extra), uid))
    assert isinstance(p, sidecar_client.Poll)
    # ... and on through the policy, as the guard's cycle takes it (samples
    # into the pod's window, then a decision): nothing may escape there either.
    for sample in p.samples:
        WINDOW.add(sample)
    assert decide(settings=WINDOW.settings, window=WINDOW, history=RotationHistory(), now_s=NOW)
    if p.samples:
        assert all(math.isfinite(s.time_s) and s.time_s <= NOW + sidecar_client.MAX_FUTURE_S for s in p.samples)
        assert p.failure is None
    else:
        assert (p.error is None) == (p.failure is None), p  # no samples and an error: a typed reason
        assert p.failure is None or isinstance(p.failure, PollFailure)


def test_memory_stays_bounded_over_many_odd_answers() -> None:
    # Hypothesis keeps what it generated (its own memory grows with the run),
    # so the bound is measured here, on 2,000 answers drawn from a seeded
    # generator of the same shapes, through the same poller and policy.
    import random

    rng = random.Random(2026)
    window = PodWindow(PolicySettings())
    server = Server()

    def one(i: int) -> bytes:
        t = NOW - 3600 + i
        samples = [{f: rng.choice([t, 10**rng.randint(1, 400), -1, "x", None, 1.5, True])
                    for f in rng.sample(FIELDS, rng.randint(1, len(FIELDS)))} | {"time": rng.choice([t, t, 10**350])}
                   for _ in range(rng.randint(0, 8))]
        payload = rng.choice([json.dumps({"samples": samples, "more": rng.random() < 0.3}).encode(),
                              bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))])
        return _answer(rng.choice(["HTTP/1.1 200 OK", "HTTP/1.1 ²00 OK", "garbage"]),
                       rng.choice(["exact", "none", "²", "short", "twice"]), payload, [])

    async def run(n: int) -> None:
        for i in range(n):
            p = await _poll_once(server, one(i), None)
            for sample in p.samples:
                window.add(sample)
            decide(settings=window.settings, window=window, history=RotationHistory(), now_s=NOW)

    asyncio.run(run(200))  # warm: imports, caches
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    asyncio.run(run(2000))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 16 * 1024, f"peak RSS grew {grown_kib} KiB over 2,000 answers"
def test_the_shapes_named_in_the_issue() -> None:
    big = 10**350
    cases: list[tuple[bytes, Any]] = [
        (_answer("HTTP/1.1 200 OK", "exact", json.dumps({"samples": [{"time": NOW, "memory_current": big}]}).encode(),
                 []), None),  # a huge value: that field unknown, the sample kept
        (_answer("HTTP/1.1 200 OK", "exact", f'{{"samples": [{{"time": {big}}}]}}'.encode(), []),
         PollFailure.BAD_ANSWER),  # a huge time: the sample rejected
        (_answer("HTTP/1.1 ²00 OK", "exact", b"{}", []), PollFailure.BAD_ANSWER),
        (_answer("HTTP/1.1 200 OK", "²", b"{}", []), PollFailure.BAD_ANSWER),
    ]
    for answer, failure in cases:
        p = asyncio.run(_poll_once(Server(), answer, None))
        assert p.failure == failure, (answer[:80], p)
