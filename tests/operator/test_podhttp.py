"""The operator's one HTTP client for pods (podhttp.py), against loopback
servers that answer well, badly or with hostility: every answer is either
the body or a PodHttpError saying why, within the timeout and the cap."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from memoryguard_kuberay.operator import podhttp

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
