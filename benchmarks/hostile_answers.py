"""``make bench-hostile``: what a hostile sidecar's answer costs the
operator (issue 12).

For each kind of hostile answer, at the worst size the operator still reads
(just under its 512 KiB cap) and at the size an attacker would send (16 MiB,
171,195 samples, deep nesting, a byte every 0.2 s), a loopback server in a
child process plays the sidecar and the operator's real poll reads it in
this process, while a watchdog task measures how late the event loop wakes
(the longest stall is what every other guard waited). Then this process's
peak RSS, which is the operator side only. Prints figures; asserts nothing
(targets: no stall over 100 ms, peak RSS far under 200 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import resource
import time
from collections.abc import Callable

from memoryguard_kuberay.operator.sidecars import sidecar_client

CAP = sidecar_client.MAX_BODY
NOW = time.time()


def _sample(t: float) -> str:
    return json.dumps({"time": t, "memory_current": 2**34, "memory_max": 2**36, "anon": 2**33, "file": 2**30,
                       "inactive_file": 2**29, "shmem": 2**28, "plasma_used": 2**30, "plasma_capacity": 2**32,
                       "psi_some_avg10": 0.5, "psi_full_avg10": 0.1, "oom_kill": 0}, separators=(",", ":"))


def _under_cap(items: Callable[[int], str], n_max: int) -> bytes:
    n = min(n_max, (CAP - 32) // (len(items(0)) + 1))
    return ('{"samples":[' + ",".join(items(i) for i in range(n)) + "]}").encode()


BODIES: dict[str, Callable[[], bytes]] = {
    "empty objects, just under the cap": lambda: _under_cap(lambda i: "{}", 10**9),
    "empty objects, 16 MiB": lambda: b'{"samples":[' + b"{}," * (16 * 2**20 // 3) + b"{}]}",
    "valid samples, as many as fit (all taken)": lambda: _under_cap(lambda i: _sample(NOW - 2000 + i), 2000),
    "backdated samples, as many as fit": lambda: _under_cap(lambda i: _sample(NOW - 86400 + i), 2000),
    "backdated samples, 171,195": lambda: ('{"samples":[' + ",".join(
        _sample(NOW - 86400 + i * 0.5) for i in range(171_195)) + "]}").encode(),
    "nested 262,000 deep (just under the cap)": lambda: b'{"samples":' + b"[" * (CAP // 2 - 8) + b"]" * (
        CAP // 2 - 8) + b"}",
    "a valid answer dripped a byte every 0.2 s": lambda: _sample(NOW).encode(),
}
DRIP = "a valid answer dripped a byte every 0.2 s"


def _serve_forever(name: str, ready: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """The hostile sidecar, in a child process (its memory is not ours)."""
    body, drip = BODIES[name](), name == DRIP

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            if drip:
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                for i in range(len(body)):
                    writer.write(body[i:i + 1])
                    await writer.drain()
                    await asyncio.sleep(0.2)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
                writer.write(body)
                await writer.drain()
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(handle, "127.0.0.51", 0)
        ready.put((server.sockets[0].getsockname()[1], len(body)))
        async with server:
            await server.serve_forever()

    asyncio.run(run())


async def _measure(name: str, *, timeout_s: float = 5.0) -> None:
    ready: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    child = multiprocessing.Process(target=_serve_forever, args=(name, ready), daemon=True)
    child.start()
    port, size = await asyncio.to_thread(ready.get, True, 120)
    worst = 0.0
    done = asyncio.Event()

    async def watchdog() -> None:
        nonlocal worst
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - t0 - 0.005)

    dog = asyncio.create_task(watchdog())
    t0 = time.perf_counter()
    p = await sidecar_client.poll("127.0.0.51", port, None, timeout_s=timeout_s, now=time.time,
                                  oldest_s=time.time() - 14400)
    took = time.perf_counter() - t0
    done.set()
    await dog
    child.terminate()
    child.join()
    print(f"{name:<44} {size / 2**20:8.2f} MiB  poll {took:6.3f} s  longest loop stall {worst * 1000:6.1f} ms  "
          f"samples {len(p.samples):>5}  {p.error or 'ok'}")


def _serve_pages(ready: multiprocessing.Queue, pods: int) -> None:  # type: ignore[type-arg]
    """``pods`` hostile sidecars, each answering every request with a full
    page (just under the caps) and ``more: true``, forever (issue 24)."""
    page = [_sample(NOW - 3600 + i * 0.001) for i in range(sidecar_client.MAX_SAMPLES - 1)]
    body = ('{"more":true,"samples":[' + ",".join(page) + "]}").encode()[:CAP - 64]
    body = body[:body.rfind(b"},") + 1] + b"]}"  # whole samples, under the body cap

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
            writer.write(body)
            await writer.drain()
        writer.close()

    async def run() -> None:
        servers = [await asyncio.start_server(handle, "127.0.0.52", 0) for _ in range(pods)]
        ready.put([srv.sockets[0].getsockname()[1] for srv in servers])
        await asyncio.Event().wait()

    asyncio.run(run())


async def _measure_paged(pods: int) -> None:
    ready: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    child = multiprocessing.Process(target=_serve_pages, args=(ready, pods), daemon=True)
    child.start()
    ports = await asyncio.to_thread(ready.get, True, 120)
    t0 = time.perf_counter()
    polls = await asyncio.gather(*(sidecar_client.poll("127.0.0.52", port, None, timeout_s=10, now=lambda: NOW + 60,
                                                       oldest_s=NOW - 14400) for port in ports))
    took = time.perf_counter() - t0
    child.terminate()
    child.join()
    most = max(len(p.samples) for p in polls)
    print(f"{'more: true forever, ' + str(pods) + ' pods at once':<44} samples a poll at most {most:>5} "
          f"(cap {sidecar_client.MAX_POLL_SAMPLES})  all polls {took:6.2f} s")


async def main() -> None:
    print(f"operator caps: body {CAP // 1024} KiB, {sidecar_client.MAX_SAMPLES} samples an answer, "
          f"{sidecar_client.MAX_PAGES} pages, {sidecar_client.MAX_POLL_SAMPLES} samples and "
          f"{sidecar_client.MAX_POLL_BYTES // 1024} KiB a poll")
    for name in BODIES:
        await _measure(name, timeout_s=2.0 if name == DRIP else 5.0)
    await _measure_paged(100)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process (the operator's poll and parse, all of the above): {peak:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
