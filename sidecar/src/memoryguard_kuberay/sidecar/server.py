"""A small, strict HTTP/1.1 server for the sidecar on asyncio streams.

GET only; the request head is bounded (8 KiB) and must arrive within a
timeout. A request that asks ``Connection: keep-alive`` (the operator's
polls, issue 25: a TCP connection opened and closed per poll was half the
operator's CPU) keeps the connection for the next request, idle at most
``KEEP_ALIVE_S``; any other is answered and closed. Routes:
``/v1/samples?since=<unix s>``, ``/metrics``, ``/healthz``, and
``/v1/processes`` (the Ray container's processes by memory: the operator's
evidence before a rotation; one scan at a time, a recent answer reused).

Open connections are capped (memory stays bounded: at most
``MAX_CONNECTIONS`` answers of at most a page of samples each), and shared
fairly between peers (issue 24: 200 loops of complete requests from one
peer left a legitimate poller 5 answers in 8 s): a peer holds at most
``MAX_PER_PEER`` connections (a further one closes that peer's own oldest),
and a full house makes room by closing a connection of the peer that holds
the most (the one that has waited longest for its request head, else its
oldest). A flood or a slowloris (from code in the Ray container or from
anywhere the network policy lets in) so costs the attacker its own
connections, never the kubelet's probe or the operator's poll.
No TLS and no auth by design: the pod network policy decides who may ask
(see docs/security.md), and nothing here can change state.
"""

from __future__ import annotations

import asyncio
import collections
import json
import urllib.parse
from typing import Any

from memoryguard_kuberay.core import constants as C

MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 96
MAX_PER_PEER = 8  # the operator polls one connection at a time; the kubelet probes one or two
KEEP_ALIVE_S = 60.0  # a kept connection's wait for its next request (the operator polls every 15 s)


class Routes:
    """What the server serves; implemented by the running sidecar."""

    def samples_since(self, since: float | None) -> dict[str, Any]:
        raise NotImplementedError

    def metrics(self) -> bytes:
        raise NotImplementedError

    def healthy(self) -> tuple[bool, str]:
        raise NotImplementedError

    async def processes(self) -> dict[str, Any] | None:
        """None: a scan is already running."""
        raise NotImplementedError


def _response(status: int, reason: str, body: bytes, ctype: str, extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\nCache-Control: no-store\r\n{extra}\r\n")
    return head.encode("ascii") + body


KEPT = f"Connection: keep-alive\r\nKeep-Alive: timeout={KEEP_ALIVE_S:.0f}\r\n".encode("ascii")


def _kept(response: bytes) -> bytes:
    """The same answer, saying the connection stays open."""
    return response.replace(b"Connection: close\r\n", KEPT, 1)


def _wants_keep_alive(head: bytes) -> bool:
    lines = head.split(b"\r\n")
    if not lines[0].endswith(b"HTTP/1.1"):
        return False
    return any(line.lower().startswith(b"connection:") and b"keep-alive" in line.lower() for line in lines[1:])


def _text(status: int, reason: str, text: str, extra: str = "") -> bytes:
    return _response(status, reason, text.encode() + b"\n", "text/plain; charset=utf-8", extra)


class SidecarServer:
    def __init__(self, routes: Routes, *, max_connections: int = MAX_CONNECTIONS) -> None:
        self.routes = routes
        self.max_connections = max_connections
        # Open connections, oldest first, and those still waiting for their request head.
        self.conns: collections.OrderedDict[int, asyncio.StreamWriter] = collections.OrderedDict()
        self.waiting: collections.OrderedDict[int, asyncio.StreamWriter] = collections.OrderedDict()
        self.peers: dict[str, collections.OrderedDict[int, asyncio.StreamWriter]] = {}  # peer -> its connections
        self.evicted = 0  # idle connections closed to make room (a metric)
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._handle, host, port, limit=MAX_HEAD_BYTES)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            # Kept connections end too, and their handlers return before the
            # loop stops (else each is cancelled mid-read, logged as an error).
            for writer in list(self.conns.values()):
                writer.transport.abort()
            for _ in range(10):
                if not self.conns:
                    break
                await asyncio.sleep(0.01)
            await self.server.wait_closed()

    def _make_room(self, peer: str) -> None:
        if len(self.peers.get(peer) or ()) >= MAX_PER_PEER:
            victim = peer  # a peer over its share pays with its own connections
        elif len(self.conns) >= self.max_connections:
            victim = max(self.peers, key=lambda p: len(self.peers[p]))
        else:
            return
        theirs = self.peers[victim]
        key = next((k for k in self.waiting if k in theirs), None) or next(iter(theirs))
        writer = theirs.pop(key)
        self.waiting.pop(key, None)
        self.conns.pop(key, None)
        if not theirs:
            del self.peers[victim]
        writer.transport.abort()  # its read or write then fails, and its handler returns
        self.evicted += 1

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        self._make_room(peer)
        key = id(writer)
        self.conns[key] = writer
        self.waiting[key] = writer
        self.peers.setdefault(peer, collections.OrderedDict())[key] = writer
        try:
            wait_s = HEAD_TIMEOUT_S  # the first request's head; a kept connection waits KEEP_ALIVE_S for the next
            while True:
                self.waiting[key] = writer  # waiting for a head: the first to go when room is made
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    writer.close()
                    return
                except asyncio.LimitOverrunError:
                    await self._send(writer, _text(431, "Request Header Fields Too Large", "request head too large"))
                    return
                finally:
                    self.waiting.pop(key, None)
                _, path, response = self._route(head)
                if path == C.PATH_PROCESSES:
                    doc = await self.routes.processes()
                    body = json.dumps(doc, separators=(",", ":")).encode() if doc is not None else b""
                    response = (_text(429, "Too Many Requests", "a scan is running", "Retry-After: 5\r\n")
                                if doc is None else _response(200, "OK", body, "application/json"))
                keep = _wants_keep_alive(head) and key in self.conns  # not if room was made of it meanwhile
                if not await self._send(writer, _kept(response) if keep else response, close=not keep):
                    return
                wait_s = KEEP_ALIVE_S
        finally:
            self.conns.pop(key, None)
            self.waiting.pop(key, None)
            mine = self.peers.get(peer)
            if mine is not None:
                mine.pop(key, None)
                if not mine:
                    del self.peers[peer]

    def _route(self, head: bytes) -> tuple[int, str, bytes]:
        """(status, path for metrics, response bytes)."""
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, "", _text(400, "Bad Request", "malformed request line")
        method, target, _ = parts
        if method != "GET":
            return 405, "", _text(405, "Method Not Allowed", "only GET", "Allow: GET\r\n")
        url = urllib.parse.urlsplit(target)
        path = url.path
        if path == C.PATH_SAMPLES:
            since: float | None = None
            try:
                query = urllib.parse.parse_qs(url.query, max_num_fields=4)
                if "since" in query:
                    since = float(query["since"][0])
            except ValueError:
                return 400, path, _text(400, "Bad Request", "since must be unix seconds")
            if since is not None and since != since:  # NaN
                return 400, path, _text(400, "Bad Request", "since must be unix seconds")
            body = json.dumps(self.routes.samples_since(since), separators=(",", ":")).encode()
            return 200, path, _response(200, "OK", body, "application/json")
        if path == C.PATH_PROCESSES:
            return 200, path, b""  # answered by _handle, off the event loop
        if path == C.PATH_METRICS:
            return 200, path, _response(200, "OK", self.routes.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        if path == C.PATH_HEALTHZ:
            ok, why = self.routes.healthy()
            if ok:
                return 200, path, _text(200, "OK", why)
            return 503, path, _text(503, "Service Unavailable", why)
        return 404, "", _text(404, "Not Found", "try /v1/samples, /v1/processes, /metrics or /healthz")

    async def _send(self, writer: asyncio.StreamWriter, data: bytes, *, close: bool = True) -> bool:
        """Write an answer; True when the connection stays open for another."""
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError):
            close = True
        if close:
            writer.close()
        return not close
