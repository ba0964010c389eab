"""Faulty sidecars, for the fault tests: a small proxy at the pod's IP and
sidecar port in front of the real sidecar process (which then listens on
the next port), that can be told to misbehave.

The proxy also notes when it last handed the operator a good samples answer
(on the shared clock), so a referee can check that no rotation starts on
missing or stale samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
from collections.abc import Callable

from memoryguard_kuberay.core import constants as C


class Mode(str, enum.Enum):
    OK = "ok"
    DOWN = "down"  # nothing listens: connection refused
    SLOW = "slow"  # answers after the operator's timeout
    GARBAGE = "garbage"  # 200 with random bytes
    TRUNCATED = "truncated"  # 200 with the first half of the JSON
    SKEWED = "skewed"  # samples out of order, a third from a clock a day ahead
    BEHIND = "behind"  # every sample from a clock a day behind (all stale)
    HANG = "hang"  # accepts, reads, never answers (holds the connection)
    # Hostile (code in the Ray container answering in the sidecar's place):
    FLOOD = "flood"  # 16 MiB of empty objects as samples
    BACKDATED = "backdated"  # 171,195 valid samples, all from the past hours
    DEEP = "deep"  # JSON nested a million levels deep
    DRIP = "drip"  # a valid answer, one byte every 0.2 s
    # Shapes a parser may not expect, one per answer in turn (issue 23): an
    # integer of 350 digits in a field and in the time, a status code of
    # non-ASCII digits, a Content-Length of non-ASCII digits.
    ODD = "odd"


class SidecarProxy:
    def __init__(self, ip: str, port: int, backend_port: int, clock: Callable[[], float], *,
                 slow_s: float = 4.0) -> None:
        self.ip, self.port, self.backend_port = ip, port, backend_port
        self.clock = clock
        self.slow_s = slow_s
        self.mode = Mode.OK
        self.server: asyncio.Server | None = None
        self.last_good: float | None = None  # clock time of the last good samples answer
        self.answers: dict[Mode, int] = {}
        self.clients: set[asyncio.StreamWriter] = set()  # connections open to the operator, kept ones included

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.ip, self.port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self.clients):  # kept connections go too: a pod that is down answers nothing
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
            self.server = None

    async def set_mode(self, mode: Mode) -> None:
        if mode is Mode.DOWN and self.server is not None:
            await self.close()
        elif mode is not Mode.DOWN and self.server is None:
            await self.start()
        self.mode = mode

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Every ask on a connection, each in the mode of its moment: the
        operator keeps its connection to a sidecar (keep-alive), and a
        fault must reach a kept connection as it reaches a new one. To the
        backend each ask goes on a connection of its own, asking it to close
        (its answer then ends where the connection does)."""
        self.clients.add(writer)
        try:
            wait_s = 5.0
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
                if not await self._answer(head, writer):
                    return
                wait_s = 60.0  # as the sidecar waits on a kept connection
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.clients.discard(writer)
            writer.close()

    async def _answer(self, head: bytes, writer: asyncio.StreamWriter) -> bool:
        """One ask answered; True when the connection is kept for another."""
        mode = self.mode
        if mode is Mode.HANG:
            while self.mode is Mode.HANG and self.server is not None:
                await asyncio.sleep(0.2)
            return False
        if mode is Mode.SLOW:
            await asyncio.sleep(self.slow_s)
        if mode in HOSTILE:
            await self._hostile(mode, writer)
            return False
        keep = b"keep-alive" in head.lower()
        ask = [h for h in head.split(b"\r\n") if h and not h.lower().startswith(b"connection:")]
        r, w = await asyncio.open_connection(self.ip, self.backend_port)
        w.write(b"\r\n".join([*ask, b"Connection: close"]) + b"\r\n\r\n")
        await w.drain()
        data = await asyncio.wait_for(r.read(), 10)
        w.close()
        status_line, _, rest = data.partition(b"\r\n")
        headers, _, body = rest.partition(b"\r\n\r\n")
        is_samples = head.split(b" ", 2)[1].startswith(C.PATH_SAMPLES.encode()) if b" " in head else False
        if is_samples and b" 200 " in status_line:
            body = spoil(mode, body)
        self.answers[mode] = self.answers.get(mode, 0) + 1
        kept = [h for h in headers.split(b"\r\n") if not h.lower().startswith((b"content-length:", b"connection:"))]
        out = b"\r\n".join([status_line, *kept, b"Connection: " + (b"keep-alive" if keep else b"close"),
                             b"Content-Length: %d" % len(body)]) + b"\r\n\r\n" + body
        writer.write(out)
        await writer.drain()
        if is_samples and mode in (Mode.OK, Mode.SKEWED) and b" 200 " in status_line:
            self.last_good = self.clock()
        return keep


    async def _hostile(self, mode: Mode, writer: asyncio.StreamWriter) -> None:
        body = hostile_body(mode, self.clock())
        n = self.answers[mode] = self.answers.get(mode, 0) + 1
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        if mode is Mode.ODD:
            big = b"1" + b"0" * 350
            shapes = [
                (head, b'{"samples":[{"time":%.1f,"memory_current":%s,"memory_max":2}]}' % (self.clock(), big)),
                (head, b'{"samples":[{"time":%s}]}' % big),
                ("HTTP/1.1 ²00 OK\r\nConnection: close\r\n".encode(), body),
                (head.replace(b"Connection: close\r\n", "Content-Length: ²\r\n".encode()), body),
            ]
            h, b = shapes[n % len(shapes)]
            writer.write(h + (b"" if b"Content-Length" in h else b"Content-Length: %d\r\n" % len(b)) + b"\r\n" + b)
            await writer.drain()
            return
        if mode is Mode.DRIP:
            writer.write(head + b"\r\n")  # no length: the body ends when the connection does
            for i in range(len(body)):
                writer.write(body[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0.2)
                if self.mode is not Mode.DRIP:
                    return
            return
        writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()


HOSTILE = frozenset({Mode.FLOOD, Mode.BACKDATED, Mode.DEEP, Mode.DRIP, Mode.ODD})


def hostile_body(mode: Mode, now: float) -> bytes:
    """What a hostile worker answers in the sidecar's place (issue 12)."""
    if mode is Mode.FLOOD:
        n = 16 * 2**20 // 3
        return b'{"samples":[' + b"{}," * (n - 1) + b"{}]}"
    if mode is Mode.BACKDATED:
        rows = ",".join(f'{{"time":{now - 86400 + i * 0.5:.1f},"memory_current":1,"memory_max":2,'
                        f'"inactive_file":0}}' for i in range(171_195))
        return ('{"samples":[' + rows + "]}").encode()
    if mode is Mode.DEEP:
        return b'{"samples":' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}"
    return json.dumps({"samples": [{"time": now, "memory_current": 1, "memory_max": 2,
                                    "inactive_file": 0}]}).encode()


def spoil(mode: Mode, body: bytes) -> bytes:
    """A samples answer as a faulty sidecar would send it."""
    if mode is Mode.GARBAGE:
        return os.urandom(256)
    if mode is Mode.TRUNCATED:
        return body[: len(body) // 2]
    if mode is Mode.SKEWED:
        doc = json.loads(body)
        samples = list(reversed(doc.get("samples") or []))
        for i, s in enumerate(samples):
            if i % 3 == 0:
                s["time"] = float(s["time"]) + 86400.0  # a clock a day ahead
        doc["samples"] = samples
        return json.dumps(doc).encode()
    if mode is Mode.BEHIND:
        doc = json.loads(body)
        for s in doc.get("samples") or []:
            s["time"] = float(s["time"]) - 86400.0
        return json.dumps(doc).encode()
    return body
