"""Bounded HTTP/1.1 GETs to pods (their sidecars), on bare sockets, with
the connection kept for the next poll.

Polling is most of what the operator does per pod: one GET per pod per
interval, 20,000 pods every 15 s. A general client (aiohttp) spends much of
that on machinery a poll does not need (URL objects, timers per phase,
connector pools, happy eyeballs): with it the operator took 0.45 core for
10,000 pods, with a bare socket 0.24 (``make bench-operator``), of which
opening and closing a TCP connection per poll was about half (issue 25).
So ``Pool`` keeps one idle connection per pod (``Connection: keep-alive``,
which the sidecar honours, server.py) and reuses it at the next poll; a
connection the sidecar has closed meanwhile is found out before any byte
of an answer and the GET is sent once more on a new one (a GET changes
nothing). The sidecar speaks a small, fixed dialect (a ``Content-Length``
on every answer), so the operator speaks exactly that and nothing more.

Every Ray pod may be hostile (code in a Ray worker shares the sidecar's
pod), so an answer costs bounded memory and time whatever it holds: the
head at most ``MAX_HEAD`` bytes, the body at most the caller's
``max_body``, all of it within ``timeout_s`` (a slow drip ends there).
``Transfer-Encoding`` is refused: the sidecar never sends it. A connection
is kept only after a whole answer of the declared length, and kept idle
for at most ``IDLE_S``; the pool holds at most ``max_idle`` (descriptors):
when full, a new connection is closed after its answer and those kept stay.

Errors are ``PodHttpError`` with a reason a person can read; nothing else
is raised for anything the peer does.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import socket
import time
from collections.abc import Callable

MAX_HEAD = 8 * 1024
READ_CHUNK = 64 * 1024
IDLE_S = 40.0  # under the sidecar's keep-alive timeout (server.py KEEP_ALIVE_S, 60 s): it never closes one mid-ask


class PodHttpError(Exception):
    """The pod's answer could not be had; the message says why.
    ``unreachable``: nothing came back (refused, timed out), as opposed to
    an answer that could not be read."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


async def get(ip: str, port: int, target: str, *, timeout_s: float, max_body: int) -> Answer:
    """``GET target`` (path and query, already encoded) from ``ip:port``, on
    a connection of its own, closed after."""
    return await Pool(max_idle=0).get(ip, port, target, timeout_s=timeout_s, max_body=max_body)


class _ClosedBeforeAnswer(Exception):
    """A kept connection the peer had closed: nothing of an answer came."""


class Pool:
    """Idle connections to pods, at most one per address: long-lived, it
    holds sockets and when each was last used, nothing of a poll."""

    def __init__(self, *, max_idle: int, idle_s: float = IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_idle, self.idle_s, self.clock = max_idle, idle_s, clock
        self._idle: collections.OrderedDict[tuple[str, int, str], tuple[socket.socket, float]] = (
            collections.OrderedDict())
        self.reused = self.opened = 0  # for the benchmark and the tests

    def __len__(self) -> int:
        return len(self._idle)

    def _take(self, key: tuple[str, int, str]) -> socket.socket | None:
        held = self._idle.pop(key, None)
        if held is None:
            return None
        sock, since = held
        if self.clock() - since > self.idle_s:
            sock.close()
            return None
        return sock

    def _keep(self, key: tuple[str, int, str], sock: socket.socket) -> None:
        if self.max_idle <= 0:
            sock.close()
            return
        old = self._idle.pop(key, None)
        if old is not None:
            old[0].close()
        now = self.clock()
        while self._idle:  # the oldest first: those idle too long
            _k, (first, since) = next(iter(self._idle.items()))
            if now - since <= self.idle_s:
                break
            self._idle.popitem(last=False)
            first.close()
        if len(self._idle) >= self.max_idle:
            # Full: the new one is closed, not the oldest. Pods are polled in
            # turn, so the oldest idle connection is the next to be asked
            # for; closing it for this one (least recently used) reuses none
            # once there are more pods than the cap (seen: 20,000 pods, a cap
            # of 9,744 descriptors, 0 reused); this way the cap's worth are.
            sock.close()
            return
        self._idle[key] = (sock, now)

    def close(self) -> None:
        while self._idle:
            self._idle.popitem()[1][0].close()

    async def get(self, ip: str, port: int, target: str, *, timeout_s: float, max_body: int,
                  owner: str = "") -> Answer:
        """``owner``: whose address it is (the pod's uid). A connection is
        reused only for the same owner: a new pod given an old pod's IP
        never reads from a connection to the old pod's sidecar."""
        loop = asyncio.get_running_loop()
        keep = self.max_idle > 0
        request = (f"GET {target} HTTP/1.1\r\nHost: {ip}:{port}\r\nAccept: application/json\r\n"
                   f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode("ascii")
        key = (ip, port, owner)
        sock = self._take(key) if keep else None
        try:
            async with asyncio.timeout(timeout_s):
                if sock is not None:
                    try:
                        await loop.sock_sendall(sock, request)
                        answer, reusable = await _read_answer(loop, sock, max_body, first=True)
                        self.reused += 1
                    except (_ClosedBeforeAnswer, ConnectionError):
                        sock.close()  # closed by the sidecar while idle: ask once more, anew
                        sock = None
                if sock is None:
                    sock = await _connect(loop, ip, port)
                    self.opened += 1
                    await loop.sock_sendall(sock, request)
                    try:
                        answer, reusable = await _read_answer(loop, sock, max_body, first=True)
                    except _ClosedBeforeAnswer:
                        raise PodHttpError("connection closed before a whole answer head") from None
            if keep and reusable:
                self._keep(key, sock)
                sock = None
            return answer
        except TimeoutError:
            raise PodHttpError(f"unreachable: no answer within {timeout_s:.3g} s", unreachable=True) from None
        except OSError as exc:
            raise PodHttpError(f"unreachable: {exc.strerror or type(exc).__name__}", unreachable=True) from None
        finally:
            if sock is not None:
                sock.close()


async def _connect(loop: asyncio.AbstractEventLoop, ip: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:  # out of descriptors: this poll fails, the next one tries again
        raise PodHttpError(f"no socket: {exc.strerror or exc}", unreachable=True) from exc
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, (ip, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def _read_answer(loop: asyncio.AbstractEventLoop, sock: socket.socket, max_body: int, *,
                       first: bool = False) -> tuple[Answer, bool]:
    """The answer, and whether the connection may carry another request
    (a whole answer of a declared length, and the peer did not say close)."""
    buf = bytearray()
    while (end := buf.find(b"\r\n\r\n")) < 0:
        if len(buf) > MAX_HEAD:
            raise PodHttpError(f"answer head larger than {MAX_HEAD} bytes")
        chunk = await loop.sock_recv(sock, READ_CHUNK)
        if not chunk:
            if first and not buf:
                raise _ClosedBeforeAnswer
            raise PodHttpError("connection closed before a whole answer head")
        buf += chunk
    if end > MAX_HEAD:
        raise PodHttpError(f"answer head larger than {MAX_HEAD} bytes")
    status, length, close = _head(bytes(buf[:end]))
    if length is not None and length > max_body:
        raise PodHttpError(f"response too large ({length} bytes > {max_body})")
    body = buf[end + 4:]
    # Close-delimited: one byte past the cap is enough to know it is too large.
    limit = max_body + 1 if length is None else length
    while len(body) < limit:
        chunk = await loop.sock_recv(sock, min(READ_CHUNK, limit - len(body)))
        if not chunk:
            break
        body += chunk
    if length is None:
        if len(body) > max_body:
            raise PodHttpError(f"response too large (over {max_body} bytes)")
        return Answer(status, bytes(body)), False
    if len(body) < length:
        raise PodHttpError(f"answer cut short: {len(body)} of {length} bytes")
    # Bytes past the declared length would be read as the next answer: not kept then.
    return Answer(status, bytes(body[:length])), not close and len(body) == length


def _head(head: bytes) -> tuple[int, int | None, bool]:
    """(status, Content-Length or None, whether the peer closes) from an answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    # ASCII digits only: str.isdigit() admits '²' and other digits int() refuses.
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not _ascii_digits(parts[1], 3):
        raise PodHttpError(f"not an HTTP answer: {lines[0][:60]!r}")
    length: int | None = None
    close = parts[0] != "HTTP/1.1"  # HTTP/1.0 keeps nothing alive unless asked; we never ask it
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            value = value.strip()
            if not _ascii_digits(value, 18) or (length is not None and int(value) != length):
                raise PodHttpError(f"bad Content-Length: {value[:30]!r}")
            length = int(value)
        elif name == "transfer-encoding":
            raise PodHttpError(f"Transfer-Encoding {value.strip()[:30]!r} is not read (the sidecar never sends it)")
        elif name == "connection" and "close" in value.lower():
            close = True
    return int(parts[1]), length, close


def _ascii_digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and all("0" <= c <= "9" for c in text)
