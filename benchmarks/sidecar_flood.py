"""``make bench-flood``: a legitimate poller beside a request flood (issue 24).

A real sidecar (replaying a trace) on loopback; a child process runs N loops
that each send complete ``/v1/samples`` requests as fast as they are
answered, from one peer address, or each from its own; meanwhile this
process polls ``/v1/samples`` every 0.25 s for 8 s from another address, as
the operator would (2 s timeout). Prints answered and dropped polls and
their latency; asserts nothing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from memoryguard_kuberay.core import commands

BIN = Path(sys.executable).parent
HOST = "127.0.0.91"
REQUEST = b"GET /v1/samples HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


async def _get(port: int, source: str, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            r, w = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
            w.write(REQUEST)
            await w.drain()
            data = await r.read()
            w.close()
            return data.startswith(b"HTTP/1.1 200")
    except (OSError, TimeoutError):
        return False


def _flood(port: int, loops: int, distinct: bool, stop_at: float) -> None:
    async def loop(i: int) -> None:
        source = f"127.0.{1 + i // 250}.{2 + i % 250}" if distinct else "127.0.0.92"
        while time.time() < stop_at:
            await _get(port, source, 5)

    async def main() -> None:
        await asyncio.gather(*(loop(i) for i in range(loops)))

    asyncio.run(main())


async def _legit(port: int, seconds: float) -> tuple[int, int, list[float]]:
    ok = dropped = 0
    took: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        if await _get(port, "127.0.0.93", 2.0):
            ok += 1
            took.append(time.monotonic() - t0)
        else:
            dropped += 1
        await asyncio.sleep(max(0.0, 0.25 - (time.monotonic() - t0)))
    return ok, dropped, took


def run(loops: int, distinct: bool) -> None:
    port = _free_port()
    sidecar = subprocess.Popen([str(BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{HOST}:{port}", "--replay",
                                str(commands.examples_dir() / "leak_steady.csv"), "--speed", "600", "--interval", "1",
                                "--window", "21600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2.0)
        flood = multiprocessing.Process(target=_flood, args=(port, loops, distinct, time.time() + 10), daemon=True)
        flood.start()
        time.sleep(1.0)
        ok, dropped, took = asyncio.run(_legit(port, 8.0))
        flood.join(15)
        if flood.is_alive():
            flood.kill()
        took.sort()
        p50 = took[len(took) // 2] if took else float("nan")
        worst = took[-1] if took else float("nan")
        print(f"{loops:>4} loops from {'as many peers' if distinct else 'one peer':<14} legitimate poller: "
              f"{ok:>3} answered, {dropped:>3} dropped in 8 s; latency p50 {p50:.3f} s, worst {worst:.3f} s")
    finally:
        os.kill(sidecar.pid, signal.SIGTERM)
        sidecar.wait(10)


if __name__ == "__main__":
    for loops, distinct in ((0, False), (50, False), (200, False), (50, True), (200, True)):
        run(loops, distinct)
