"""``make bench-tenants``: one tenant's hostile pods against the shared
operator, and another tenant's leak beside them (issue 24).

The world: the emulated API (devkit) in this process; the operator a real
process, as in ``make bench-operator``. In the namespace ``default`` two
tenants:

- the **hostile** one: a RayCluster with ``--per-kind`` pods (100) of each
  hostile kind below, every one at its own loopback address, their sidecars
  played by a child process (its memory is neither the operator's nor
  ours); and a MemoryGuard over them, polling every 5 s;
- the **other** one: a RayCluster of 3 workers, one of them leaking so fast
  that its projected OOM is minutes away, and its own MemoryGuard with the
  test profile's short windows (examples/guards/test-profile.yaml).

Printed: the operator's peak resident set (VmHWM) against half the chart's
memory limit, the longest time its health endpoint took to answer (polled
every 0.25 s: the event loop's longest stall as a client sees it), and when
the other tenant's leaking worker was evicted, against the same run with no
hostile pods (``--per-kind 0`` alone). Exit 1 on a miss: peak RSS over 192
MiB, a health answer over 1 s, the leak not evicted, or evicted more than
30 s later than without the hostile tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from memoryguard_kuberay.core import helptext
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import free_port, load_crds, write_kubeconfig
from memoryguard_kuberay.operator.sidecars import sidecar_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operator_scale import proc_cpu_rss, worker_pod  # the same KubeRay-sized pods

GIB = 1024**3
PORT = 19308
TEST_PROFILE = Path(__file__).resolve().parents[1] / "examples" / "guards" / "test-profile.yaml"
CHART_LIMIT_MIB = 384  # charts/memoryguard/values.yaml resources.limits.memory
TARGETS = {"peak_rss_mib": CHART_LIMIT_MIB / 2, "health_max_s": 1.0, "evicted_later_s": 30.0}
LEAK_LIMIT = 8 * GIB
LEAK_OOM_S = 420.0  # the other tenant's leak reaches its limit this long after the run starts
KINDS = ("pages forever", "16 MiB of empty objects", "171,195 backdated samples", "nested a million deep",
         "a byte every 0.2 s", "accept, never answer", "random bytes")


def hostile_ip(kind: int, i: int) -> str:
    return f"127.3.{kind * 2 + i // 250}.{i % 250 + 2}"


def victim_ip(i: int) -> str:
    return f"127.4.0.{i + 2}"


def _sample(t: float, used: float) -> dict[str, Any]:
    return {"time": t, "memory_current": int(used) + GIB, "memory_max": LEAK_LIMIT, "anon": int(used),
            "file": GIB, "inactive_file": GIB, "shmem": 0, "working_set": int(used), "plasma_used": GIB // 4,
            "plasma_capacity": 2 * GIB, "plasma_spilled": 0, "psi_some_avg10": 0.1, "psi_full_avg10": 0.0,
            "oom_kill": 0}


def _bodies() -> list[bytes]:
    now = time.time()
    # A full page just under the operator's body cap, whole samples, and more: true.
    one = len(json.dumps(_sample(now, 2 * GIB))) + 1
    fit = min(sidecar_client.MAX_SAMPLES - 1, (sidecar_client.MAX_BODY - 64) // one)
    page = ",".join(json.dumps(_sample(now - 3600 + i * 0.001, 2 * GIB)) for i in range(fit))
    rng = random.Random(24)
    return [
        ('{"more":true,"samples":[' + page + "]}").encode(),
        b'{"samples":[' + b"{}," * (16 * 2**20 // 3) + b"{}]}",
        ('{"samples":[' + ",".join(json.dumps(_sample(now - 86400 + i * 0.5, 2 * GIB)) for i in range(171_195))
         + "]}").encode(),
        b'{"samples":' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}",
        json.dumps({"samples": [_sample(now, 2 * GIB)]}).encode(),
        b"",
        bytes(rng.getrandbits(8) for _ in range(65536)),
    ]


def serve_hostile(per_kind: int, ready: Any) -> None:
    """The hostile tenant's sidecars, in a child process."""
    bodies = _bodies()

    def handler(kind: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
                await reader.readuntil(b"\r\n\r\n")
                body = bodies[kind]
                if KINDS[kind] == "accept, never answer":
                    await asyncio.sleep(3600)
                elif KINDS[kind] == "a byte every 0.2 s":
                    writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    for i in range(len(body)):
                        writer.write(body[i:i + 1])
                        await writer.drain()
                        await asyncio.sleep(0.2)
                elif KINDS[kind] == "random bytes":
                    writer.write(body)
                    await writer.drain()
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body))
                    writer.write(body)
                    await writer.drain()
            writer.close()
        return handle

    async def run() -> None:
        servers = [await asyncio.start_server(handler(k), hostile_ip(k, i), PORT, backlog=64)
                   for k in range(len(KINDS)) for i in range(per_kind)]
        ready.put(len(servers))
        await asyncio.Event().wait()

    asyncio.run(run())


class Victim:
    """The other tenant's sidecars: pod 0 leaks (from 30% of its limit to
    the limit in LEAK_OOM_S), the others hold flat; each answer is the
    samples since ``since``, one a second, at most 10 minutes of them."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0

    def used(self, pod: int, t: float) -> float:
        if pod:
            return 0.4 * LEAK_LIMIT
        return LEAK_LIMIT * min(1.0, 0.3 + 0.7 * (t - self.t0) / LEAK_OOM_S)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            pod = int(writer.get_extra_info("sockname")[0].rsplit(".", 1)[1]) - 2
            target = head.split(" ", 2)[1]
            now = time.time()
            since = float(target.split("since=", 1)[1]) if "since=" in target else now - 600
            start = max(since, now - 600, self.t0 - 1)
            ts = [float(int(start) + 1 + k) for k in range(int(now - start))]
            await answer(writer, [_sample(t, self.used(pod, t)) for t in ts])
        writer.close()


async def answer(writer: asyncio.StreamWriter, samples: list[dict[str, Any]]) -> None:
    """A sidecar's answer of ``samples``."""
    body = json.dumps({"source": "bench", "samples": samples}).encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()


def _cluster(name: str, replicas: int) -> dict[str, Any]:
    group = {"groupName": "w", "replicas": replicas, "minReplicas": 0, "maxReplicas": replicas,
             "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}
    return {"metadata": {"name": name, "namespace": "default", "labels": {"tenant": name}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                     "workerGroupSpecs": [group]}}


async def health_watch(url: str, stop: asyncio.Event, worst: list[float]) -> None:
    """Ask the operator's health endpoint every 0.25 s; the longest answer."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    while not stop.is_set():
        t0 = time.monotonic()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError):
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 30)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await asyncio.wait_for(reader.read(), 30)
            writer.close()
            worst.append(time.monotonic() - t0)
        await asyncio.sleep(0.25)


async def run(per_kind: int, seconds: float, guards: int = 0, pad: int = 0) -> dict[str, Any]:
    api = EmulatedApi()
    load_crds(api)
    api.put("namespaces", {"metadata": {"name": "default"}})
    child = None
    if per_kind:
        ready: Any = multiprocessing.Queue()
        child = multiprocessing.Process(target=serve_hostile, args=(per_kind, ready), daemon=True)
        child.start()
        await asyncio.to_thread(ready.get, True, 300)
        api.put("rayclusters", _cluster("hostile", per_kind * len(KINDS)))
        for k in range(len(KINDS)):
            for i in range(per_kind):
                api.put("pods", worker_pod(f"hostile-w-{k}-{i}", "hostile", "w", hostile_ip(k, i)))
        api.put("memoryguards", {"metadata": {"name": "hostile", "namespace": "default"}, "spec": {
            "clusterSelector": {"matchLabels": {"tenant": "hostile"}},
            "sampling": {"intervalSeconds": 5, "sidecarPort": PORT, "timeoutSeconds": 5}}})
    t0 = time.time()
    victim = Victim(t0)
    servers = [await asyncio.start_server(victim.handle, victim_ip(i), PORT) for i in range(3)]
    api.put("rayclusters", _cluster("victim", 3))
    for i in range(3):
        api.put("pods", worker_pod(f"victim-w-{i}", "victim", "w", victim_ip(i)))
    profile = yaml.safe_load(TEST_PROFILE.read_text())["spec"]["policy"]
    api.put("memoryguards", {"metadata": {"name": "victim", "namespace": "default"}, "spec": {
        "clusterSelector": {"matchLabels": {"tenant": "victim"}}, "dryRun": False, "policy": profile,
        "sampling": {"intervalSeconds": 5, "sidecarPort": PORT, "timeoutSeconds": 5}}})
    # The hostile tenant's guards, after the other tenant's: the namespace's
    # cap admits the oldest, and refuses the rest (TooManyGuards).
    for i in range(guards):
        meta: dict[str, Any] = {"name": f"tiny-{i}", "namespace": "default"}
        if pad:
            meta["annotations"] = {"tenant.example/pad": "x" * pad}
        api.put("memoryguards", {"metadata": meta, "spec": {"clusterSelector": {"names": [f"none-{i}"]}}})
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        tmp = Path(tempfile.mkdtemp(prefix="mg-bench-tenants-"))
        write_kubeconfig((tmp / "kubeconfig"), f"http://127.0.0.1:{server.port}")
        health = f"http://127.0.0.1:{free_port('127.0.0.1')}/healthz"
        env = {**os.environ, "KUBECONFIG": str(tmp / "kubeconfig"), "MEMORYGUARD_METRICS_HOST": "127.0.0.1",
               "MEMORYGUARD_METRICS_PORT": str(free_port("127.0.0.1")), "MEMORYGUARD_DRAIN": "false",
               "MEMORYGUARD_LIVENESS_ENDPOINT": health, "MEMORYGUARD_LOG_LEVEL": "WARNING"}
        with (tmp / "operator.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memoryguard_kuberay", "operator", "--standalone", "-n", "default", env=env,
                stdout=log, stderr=log)
        stop, answers = asyncio.Event(), []  # type: ignore[var-annotated]
        watch = asyncio.create_task(health_watch(health, stop, answers))
        evicted_at = None
        try:
            print(f"[{per_kind} hostile pods of each of {len(KINDS)} kinds, {guards} hostile guards] running up "
                  f"to {seconds:.0f} s ...", file=sys.stderr)
            while time.time() - t0 < seconds:
                if evicted_at is None and any(e[1] == "victim-w-0" for e in api.evictions):
                    evicted_at = time.time() - t0
                    print(f"  the other tenant's leaking worker evicted at {evicted_at:.0f} s", file=sys.stderr)
                if evicted_at is not None and time.time() - t0 > evicted_at + 20:
                    break  # a little longer under the hostile load after the rotation
                await asyncio.sleep(0.5)
            _, rss, peak = proc_cpu_rss(proc.pid)
            victims = [e[1] for e in api.evictions]
            return {"per_kind": per_kind, "guards": guards, "peak_rss_mib": round(peak, 1), "rss_mib": round(rss, 1),
                    "health_max_s": round(max(answers), 3) if answers else None, "health_answers": len(answers),
                    "evicted_at_s": evicted_at, "evicted": victims,
                    "ran_s": round(time.time() - t0, 1)}
        finally:
            stop.set()
            watch.cancel()
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            for sv in servers:
                sv.close()
            if child is not None:
                child.terminate()
                child.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=helptext.summary(__doc__))
    ap.add_argument("--per-kind", type=int, default=100, help="hostile pods of each kind (default 100)")
    ap.add_argument("--guards", type=int, default=0,
                    help="the hostile tenant's guards beside its pods, in the other tenant's namespace after its "
                         "guard (the namespace's cap refuses all but the oldest; issue 44, 3); default 0")
    ap.add_argument("--guard-pad", type=int, default=0,
                    help="bytes of annotation on each hostile guard (default 0)")
    ap.add_argument("--seconds", type=float, default=LEAK_OOM_S,
                    help="give up on the other tenant's rotation after this long (default: its OOM)")
    a = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(65536, _soft), max(65536, hard)))
    alone = asyncio.run(run(0, a.seconds))
    attacked = a.per_kind or a.guards
    hostile = asyncio.run(run(a.per_kind, a.seconds, a.guards, a.guard_pad)) if attacked else alone
    for r in (alone, hostile) if attacked else (alone,):
        when = "-" if r["evicted_at_s"] is None else f"{r['evicted_at_s']:.0f} s"
        print(f"{r['per_kind']:>4} hostile pods of each of {len(KINDS)} kinds, {r['guards']} hostile guards: "
              f"operator peak RSS "
              f"{r['peak_rss_mib']:.0f} MiB (target <= {TARGETS['peak_rss_mib']:.0f}), health endpoint at most "
              f"{r['health_max_s']} s over {r['health_answers']} asks (target <= {TARGETS['health_max_s']:g}), "
              f"the other tenant's leak evicted at "
              f"{when} "
              f"(OOM at {LEAK_OOM_S:.0f} s); evictions {r['evicted']}")
    missed = []
    if hostile["peak_rss_mib"] > TARGETS["peak_rss_mib"]:
        missed.append(f"peak RSS {hostile['peak_rss_mib']} MiB")
    if hostile["health_max_s"] is None or hostile["health_max_s"] > TARGETS["health_max_s"]:
        missed.append(f"health endpoint {hostile['health_max_s']} s")
    if hostile["evicted_at_s"] is None or alone["evicted_at_s"] is None:
        missed.append("the other tenant's leak was not evicted")
    elif hostile["evicted_at_s"] - alone["evicted_at_s"] > TARGETS["evicted_later_s"]:
        missed.append(f"the other tenant's leak evicted {hostile['evicted_at_s'] - alone['evicted_at_s']:.0f} s "
                      "later than with no hostile tenant")
    if set(hostile["evicted"]) - {"victim-w-0"}:
        missed.append(f"evicted what does not leak: {sorted(set(hostile['evicted']) - {'victim-w-0'})}")
    print("targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
