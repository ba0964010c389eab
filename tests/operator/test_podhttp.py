"""The operator's one HTTP client for pods (podhttp.py), against loopback
servers that answer well, badly or with hostility: every answer is either
the body or a PodHttpError saying why, within the timeout and the cap."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from memoryguard_kuberay.operator.sidecars import podhttp

IP = "127.0.0.61"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serving(handler: Handler) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, IP, 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


def _answer(raw: bytes, *, then_hold: bool = False) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        if then_hold:  # the connection stays open after the answer
            await asyncio.sleep(30)
        writer.close()
    return handle


async def _get(handler: Handler, *, max_body: int = 1024, timeout_s: float = 2.0) -> podhttp.Answer:
    async for port in _serving(handler):
        return await podhttp.get(IP, port, "/v1/samples?since=1.5", timeout_s=timeout_s, max_body=max_body)
    raise AssertionError("no server")


async def test_the_request_is_one_plain_get_that_closes() -> None:
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        writer.close()

    answer = await _get(record)
    assert answer == podhttp.Answer(200, b"{}")
    head = seen[0].decode()
    assert head.startswith("GET /v1/samples?since=1.5 HTTP/1.1\r\n") and "Connection: close" in head


@pytest.mark.parametrize("raw, body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello, and more", b"hello"),  # past the length: not read
    (b"HTTP/1.0 200 OK\r\n\r\nto the end", b"to the end"),  # no length: until the peer closes
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""),
], ids=["length", "extra", "close-delimited", "404"])
async def test_answers_are_read_to_their_length_or_their_end(raw: bytes, body: bytes) -> None:
    assert (await _get(_answer(raw))).body == body


async def test_a_peer_that_holds_the_connection_after_its_answer_costs_no_wait() -> None:
    t0 = time.monotonic()
    answer = await _get(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", then_hold=True), timeout_s=5)
    assert answer.body == b"ok" and time.monotonic() - t0 < 1


@pytest.mark.parametrize("raw, says", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n", "too large (4096 bytes > 1024)"),
    (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 5000, "too large (over 1024 bytes)"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "cut short: 5 of 10 bytes"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "Transfer-Encoding"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", "bad Content-Length"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 20000 + b"\r\n\r\n", "head larger than"),
    (b"HTTP/1.1 200 OK\r\n", "closed before a whole answer head"),
], ids=["length-over-cap", "stream-over-cap", "short", "chunked", "negative", "two-lengths", "not-http",
        "huge-head", "no-head"])
async def test_bad_answers_are_errors_that_say_why(raw: bytes, says: str) -> None:
    with pytest.raises(podhttp.PodHttpError) as e:
        await _get(_answer(raw))
    assert says in str(e.value)


async def test_a_slow_drip_ends_at_the_timeout() -> None:
    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        try:
            for _ in range(1000):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        writer.close()

    t0 = time.monotonic()
    with pytest.raises(podhttp.PodHttpError, match=r"no answer within 0\.5 s"):
        await _get(drip, max_body=4096, timeout_s=0.5)
    assert time.monotonic() - t0 < 1.5


async def test_nobody_listening_is_unreachable() -> None:
    with pytest.raises(podhttp.PodHttpError, match="unreachable"):
        await podhttp.get("127.0.0.62", 1, "/", timeout_s=2, max_body=10)


async def test_a_flood_is_cut_at_the_cap_not_read_whole() -> None:
    """A peer that would send 64 MiB: the client stops one byte past its cap."""
    sent = {"bytes": 0}

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        try:
            for _ in range(1024):
                writer.write(b"z" * 65536)
                await writer.drain()
                sent["bytes"] += 65536
        except ConnectionError:
            pass
        writer.close()

    with pytest.raises(podhttp.PodHttpError, match="too large"):
        await _get(flood, max_body=256 * 1024)
    await asyncio.sleep(0.2)
    assert sent["bytes"] < 16 * 2**20


# -- connections kept between polls (Pool), against the sidecar's own server ------------
class _Routes:
    def samples_since(self, since: float | None) -> dict[str, object]:
        return {"source": "test", "samples": []}

    def metrics(self) -> bytes:
        return b""

    def healthy(self) -> tuple[bool, str]:
        return True, "ok"

    async def processes(self) -> dict[str, object] | None:
        return {}


async def _sidecar_server(ip: str) -> tuple[object, int]:
    from memoryguard_kuberay.sidecar.server import SidecarServer

    server = SidecarServer(_Routes())
    await server.start(ip, 0)
    assert server.server is not None
    return server, server.server.sockets[0].getsockname()[1]


async def test_a_pool_polls_a_sidecar_on_one_kept_connection() -> None:
    server, port = await _sidecar_server("127.0.0.62")
    pool = podhttp.Pool(max_idle=10)
    try:
        for _ in range(5):
            answer = await pool.get("127.0.0.62", port, "/v1/samples", timeout_s=2, max_body=4096)
            assert answer.status == 200 and b'"samples":[]' in answer.body
        assert (pool.opened, pool.reused, len(pool)) == (1, 4, 1)
        assert len(server.conns) == 1  # type: ignore[attr-defined]  # the sidecar holds that one connection
    finally:
        pool.close()
        await server.close()  # type: ignore[attr-defined]


async def test_polls_through_the_sidecar_client_share_the_operator_s_pool() -> None:
    """The path the operator takes (sidecar_client.poll with the operator's
    pool). Found in issue 25's bench: ``pool or Pool(max_idle=0)`` replaced
    the shared pool while it was empty (a Pool with no idle connection is
    falsy), so it stayed empty and every poll opened a connection."""
    from memoryguard_kuberay.operator.sidecars import sidecar_client

    server, port = await _sidecar_server("127.0.0.69")
    pool = podhttp.Pool(max_idle=10)
    try:
        for _ in range(3):
            got = await sidecar_client.poll("127.0.0.69", port, None, timeout_s=2, now=time.time, pool=pool)
            assert got.error is None, got.error
        assert (pool.opened, pool.reused, len(pool)) == (1, 2, 1)
    finally:
        pool.close()
        await server.close()  # type: ignore[attr-defined]


async def test_a_kept_connection_the_sidecar_closed_is_found_out_and_the_get_sent_anew() -> None:
    server, port = await _sidecar_server("127.0.0.63")
    pool = podhttp.Pool(max_idle=10)
    try:
        await pool.get("127.0.0.63", port, "/v1/samples", timeout_s=2, max_body=4096)
        for writer in list(server.conns.values()):  # type: ignore[attr-defined]  # as after its idle timeout
            writer.close()
        await asyncio.sleep(0.05)
        answer = await pool.get("127.0.0.63", port, "/v1/samples", timeout_s=2, max_body=4096)
        assert answer.status == 200 and (pool.opened, pool.reused) == (2, 0)
    finally:
        pool.close()
        await server.close()  # type: ignore[attr-defined]


async def test_the_sidecar_closes_a_connection_that_did_not_ask_to_be_kept() -> None:
    server, port = await _sidecar_server("127.0.0.64")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.64", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = await asyncio.wait_for(reader.read(), 2)  # read to the end: the sidecar closed it
        assert got.startswith(b"HTTP/1.1 200") and b"Connection: close" in got
        writer.close()
    finally:
        await server.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",  # the peer says it closes
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}and more",  # bytes past the length: not a clean stream
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",  # HTTP/1.0 keeps nothing
])
async def test_a_connection_is_kept_only_after_one_whole_clean_answer(raw: bytes) -> None:
    pool = podhttp.Pool(max_idle=10)
    try:
        async for port in _serving(_answer(raw, then_hold=True)):
            answer = await pool.get(IP, port, "/v1/samples", timeout_s=2, max_body=1024)
            assert answer.body == b"{}" and len(pool) == 0
    finally:
        pool.close()


async def test_the_pool_keeps_at_most_its_cap_and_nothing_idle_past_its_time() -> None:
    now = [0.0]
    pool = podhttp.Pool(max_idle=2, idle_s=40, clock=lambda: now[0])
    servers = [await _sidecar_server(f"127.0.0.{65 + i}") for i in range(3)]
    try:
        for i, (_s, port) in enumerate(servers):
            await pool.get(f"127.0.0.{65 + i}", port, "/healthz", timeout_s=2, max_body=1024)
        assert len(pool) == 2  # the oldest closed
        now[0] += 41
        await pool.get("127.0.0.67", servers[2][1], "/healthz", timeout_s=2, max_body=1024)
        assert len(pool) == 1 and pool.opened == 4  # the idle one too old was not reused, the other dropped
    finally:
        pool.close()
        for server, _ in servers:
            await server.close()  # type: ignore[attr-defined]


async def test_more_pods_than_the_cap_polled_in_turn_reuse_the_cap_s_worth() -> None:
    """Five pods polled in turn, three rounds, a cap of three: the first
    three keep their connections, the other two open one each round. (The
    oldest closed for the newest, every connection would be closed just
    before its pod's turn: 0 reused; issue 25's bench at 20,000 pods.)"""
    servers = [await _sidecar_server(f"127.0.0.{80 + i}") for i in range(5)]
    pool = podhttp.Pool(max_idle=3)
    try:
        for _round in range(3):
            for i, (_s, port) in enumerate(servers):
                await pool.get(f"127.0.0.{80 + i}", port, "/healthz", timeout_s=2, max_body=1024)
        assert len(pool) == 3 and (pool.opened, pool.reused) == (5 + 2 + 2, 3 + 3)
    finally:
        pool.close()
        for server, _ in servers:
            await server.close()  # type: ignore[attr-defined]


async def test_a_connection_is_reused_only_for_the_pod_it_was_opened_for() -> None:
    """A new pod given an old pod's IP must not read from a connection kept
    to the old pod's sidecar (which, in a test world, may still answer)."""
    server, port = await _sidecar_server("127.0.0.68")
    pool = podhttp.Pool(max_idle=10)
    try:
        await pool.get("127.0.0.68", port, "/healthz", timeout_s=2, max_body=1024, owner="uid-old")
        await pool.get("127.0.0.68", port, "/healthz", timeout_s=2, max_body=1024, owner="uid-new")
        assert (pool.opened, pool.reused) == (2, 0)
        await pool.get("127.0.0.68", port, "/healthz", timeout_s=2, max_body=1024, owner="uid-new")
        assert (pool.opened, pool.reused) == (2, 1)
    finally:
        pool.close()
        await server.close()  # type: ignore[attr-defined]
