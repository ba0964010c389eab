"""``make soak``: a bounded soak (about 10 minutes, not in CI).

The world: the emulated API and the KubeRay stand-in (tests/emulator) in
this process; 200 worker pods in 4 RayClusters of 50, each at its own
loopback address (127.3.x.y); one process here plays all their sidecars,
replaying the project's example traces (a mix of healthy and leaking ones,
each pod a random time into its trace); one MemoryGuard per RayCluster; the
real operator as a process. The clock runs 60x, so 10 minutes are 10 hours.

Faults at random all along: 5% of API calls answer 429/500/503, 5% are
0.2-1 s late, watches are dropped every 20-60 s; every 15 s a few sidecars
go down, slow, hang or answer garbage, truncated or skewed JSON for 10-60 s.

The referee (tests/emulator/referee.py) counts breaches of the rules from
the API's side. Printed: rotations, failures, false rotations (a healthy
trace rotated), leaks that reached their OOM unrotated, invariant violations
(must be 0), and the operator's RSS after warm-up and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
from operator_scale import proc_cpu_rss  # benchmarks/, beside this script

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.traces import read_trace
from memoryguard_kuberay.devkit.emulator.api import ApiError, EmulatedApi
from memoryguard_kuberay.devkit.emulator.kuberay import KubeRayStandIn
from memoryguard_kuberay.devkit.emulator.referee import Referee
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.sidecar_faults import Mode, spoil
from memoryguard_kuberay.devkit.emulator.world import load_crds, write_kubeconfig
from memoryguard_kuberay.operator.status import pods_listed
from memoryguard_kuberay.sidecar.replay import ReplayFeed

PORT = 19308
STALE_AFTER_S = 1800.0
SIDECAR_FAULTS = (Mode.DOWN, Mode.SLOW, Mode.HANG, Mode.GARBAGE, Mode.TRUNCATED, Mode.SKEWED)


@dataclasses.dataclass
class FakeSidecar:
    """One pod's sidecar, played in this process: the trace replayed on the
    shared clock, served at the pod's IP, with a fault mode."""

    name: str
    uid: str
    ip: str
    feed: ReplayFeed
    ring: collections.deque[Sample] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=4000))
    mode: Mode = Mode.OK
    server: asyncio.Server | None = None
    last_good: float | None = None
    stopped: bool = False

    async def ready(self) -> bool:
        return True

    def exited(self) -> bool:
        return self.stopped

    def stop(self) -> None:
        self.stopped = True
        if self.server is not None:
            self.server.close()
            self.server = None

    async def listen(self) -> None:
        if self.server is None and not self.stopped:
            self.server = await asyncio.start_server(self.handle, self.ip, PORT, reuse_address=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if mode is Mode.HANG:
                while self.mode is Mode.HANG and not self.stopped:
                    await asyncio.sleep(0.5)
                return
            if mode is Mode.SLOW:
                await asyncio.sleep(6)
            target = head.split(b" ", 2)[1].decode()
            since = float(target.split("since=", 1)[1]) if "since=" in target else None
            now = time.time()
            self.ring.extend(self.feed.due(now))
            samples = [s.to_wire() for s in self.ring if since is None or s.time_s > since]
            clock = self.feed.clock(now)
            body = spoil(mode, json.dumps({"source": "soak", "pod": {"uid": self.uid, "name": self.name},
                                           "samples": samples}).encode())
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
            if mode in (Mode.OK, Mode.SKEWED) and samples:
                self.last_good = clock
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                IndexError):
            pass
        finally:
            writer.close()

    async def set_mode(self, mode: Mode) -> None:
        self.mode = mode
        if mode is Mode.DOWN and self.server is not None:
            self.server.close()
            self.server = None
        elif mode is not Mode.DOWN:
            await self.listen()


def rss_mib(pid: int) -> float:
    return proc_cpu_rss(pid)[1]


async def soak(minutes: float, workers: int, speed: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    labels = json.loads((commands.examples_dir() / "labels.json").read_text())
    traces = {name: read_trace(commands.examples_dir() / f"{name}.csv") for name in labels}
    healthy = sorted(n for n, v in labels.items() if v["kind"] == "healthy")
    leaks = sorted(n for n, v in labels.items() if v["kind"] != "healthy")
    epoch = time.time()
    api = EmulatedApi()
    load_crds(api)
    api.put("namespaces", {"metadata": {"name": "default"}})
    sidecars: dict[str, FakeSidecar] = {}  # pod name -> sidecar
    truth: dict[str, tuple[str, float]] = {}  # pod name -> (trace, clock time of its OOM or inf)
    lived_at_start: dict[str, float] = {}  # pod name -> seconds of its trace lived before it started
    replacements = 0
    run_clock_s = minutes * 60 * speed

    def clock_at(wall: float) -> float:
        return epoch + (wall - epoch) * speed

    def clock() -> float:
        return clock_at(time.time())

    async def start_pod(pod: dict[str, Any]) -> FakeSidecar:
        nonlocal replacements
        name = pod["metadata"]["name"]
        if pod["metadata"]["labels"].get("ray.io/node-type") == "head":
            trace, lived = healthy[0], 0.0
        elif len(truth) >= workers:  # a replacement: a fresh, healthy worker
            replacements += 1
            trace, lived = rng.choice(healthy), 0.0
        elif rng.random() < 0.3:
            # A leak whose OOM falls 2.5 h into the run or later, so the guard has time to act.
            trace = rng.choice(leaks)
            oom = labels[trace]["oom_at_s"] or labels[trace]["plasma_full_at_s"]
            lo = min(2.5 * 3600, run_clock_s / 2)
            lived = max(0.0, oom - rng.uniform(lo, max(lo, run_clock_s - 1800)))
        else:
            trace = rng.choice(healthy)
            span = traces[trace].samples[-1].time_s - run_clock_s - 600
            lived = rng.uniform(0, max(0.0, span))
        start = clock() - lived
        lived_at_start[name] = lived
        if pod["metadata"]["labels"].get("ray.io/node-type") != "head":
            end = labels[trace]["oom_at_s"] or labels[trace]["plasma_full_at_s"]
            truth[name] = (trace, start + end if end else float("inf"))
        sc = FakeSidecar(name, pod["metadata"]["uid"], pod["status"]["podIP"],
                         ReplayFeed(traces[trace].samples, speed=speed, epoch_s=epoch, start_s=start))
        await sc.listen()
        sidecars[name] = sc
        return sc

    kuberay = KubeRayStandIn(api, start_pod, replace_delay_s=1.0, ip_prefix="127.3")
    per = 50
    for c in range(workers // per):
        name = f"soak-{c}"
        api.put("rayclusters", {"metadata": {"name": name, "namespace": "default"}, "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": per, "minReplicas": 0, "maxReplicas": per,
                                  "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}]}})
        api.put("memoryguards", {"metadata": {"name": f"guard-{c}", "namespace": "default"}, "spec": {
            "clusterSelector": {"names": [name]},
            "sampling": {"intervalSeconds": 300, "sidecarPort": PORT, "timeoutSeconds": 3},
            "policy": {"staleAfterSeconds": int(STALE_AFTER_S)},
            "rotation": {"maxUnavailable": 1, "cooldownSeconds": 600, "maxPerHour": 20,
                         "replacementTimeoutSeconds": 3600}}})
    referee = Referee(api, clock=clock, max_unavailable=1, stale_after_s=STALE_AFTER_S,
                      last_good=lambda n: sidecars[n].last_good if n in sidecars else None).attach()

    faults = {"api_errors": 0, "api_slow": 0, "watch_drops": 0, "sidecar_faults": 0}

    def api_fault(r: kmock.Request) -> ApiError | float | None:
        x = rng.random()
        if x < 0.05:
            faults["api_errors"] += 1
            return rng.choice([ApiError(429, "TooManyRequests", "slow down"),
                               ApiError(500, "InternalError", "etcd timeout"),
                               ApiError(503, "ServiceUnavailable", "unavailable")])
        if x < 0.10:
            faults["api_slow"] += 1
            return rng.uniform(0.2, 1.0)
        return None

    stop = asyncio.Event()
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        kr_task = asyncio.create_task(kuberay.run(stop))
        while len([p for p in api.objects("pods") if p.get("status", {}).get("phase") == "Running"]) < \
                workers + workers // per:
            await asyncio.sleep(0.2)
        referee.leaking = {n for n, (t, _) in truth.items() if labels[t]["kind"] != "healthy"}
        tmp = Path(tempfile.mkdtemp(prefix="memoryguard-soak-"))
        write_kubeconfig((tmp / "kubeconfig"), f"http://127.0.0.1:{server.port}")
        env = {**os.environ, "KUBECONFIG": str(tmp / "kubeconfig"), "MEMORYGUARD_METRICS_PORT": "0",
               "MEMORYGUARD_DRAIN": "false", "MEMORYGUARD_TIME_SCALE": str(speed), "MEMORYGUARD_EPOCH": str(epoch),
               "MEMORYGUARD_WATCH_TIMEOUT_SECONDS": "120"}
        log = open(tmp / "operator.log", "wb")  # noqa: SIM115
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "operator", "--standalone",
                                                    "-n", "default", env=env, stdout=log, stderr=log)
        t0 = time.time()
        end = t0 + minutes * 60
        api.faults.append(api_fault)
        next_watch_drop = t0 + rng.uniform(20, 60)
        next_sidecar_fault = t0 + 15
        next_report = t0 + 30
        rss_start: float | None = None
        healing: list[tuple[float, FakeSidecar]] = []
        try:
            while time.time() < end:
                await asyncio.sleep(0.5)
                now = time.time()
                if rss_start is None and now - t0 > 60:
                    rss_start = rss_mib(proc.pid)
                if now >= next_watch_drop:
                    faults["watch_drops"] += api.drop_watches()
                    next_watch_drop = now + rng.uniform(20, 60)
                if now >= next_sidecar_fault:
                    live = [s for s in sidecars.values() if not s.stopped and s.mode is Mode.OK]
                    for sc in rng.sample(live, min(4, len(live))):
                        await sc.set_mode(rng.choice(SIDECAR_FAULTS))
                        healing.append((now + rng.uniform(10, 60), sc))
                        faults["sidecar_faults"] += 1
                    next_sidecar_fault = now + 15
                for item in [h for h in healing if h[0] <= now]:
                    healing.remove(item)
                    await item[1].set_mode(Mode.OK)
                if now >= next_report:
                    next_report = now + 30
                    figures = tally(api, referee, truth, clock(), clock_at)
                    print(f"[{(now - t0) / 60:4.1f} min, clock +{(clock() - epoch) / 3600:4.1f} h] "
                          f"rotated {figures['rotated']}, failed {figures['failed']}, "
                          f"leaks caught {figures['leaks_caught']}, late {len(figures['leaks_late'])}, "
                          f"missed {len(figures['leaks_missed'])}, "
                          f"evictions {figures['evictions']}, violations {len(referee.violations)}, "
                          f"operator RSS {rss_mib(proc.pid):.0f} MiB", file=sys.stderr, flush=True)
            rss_end = rss_mib(proc.pid)
            api.faults.clear()
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            stop.set()
            await kr_task
            for sc in sidecars.values():
                sc.stop()
            await asyncio.sleep(1.0)  # held (HANG) answers notice and end
        figures = tally(api, referee, truth, clock(), clock_at)
        referee_figures = referee.finish(tuple(f"guard-{c}" for c in range(workers // per)))
        false = sorted(n for n in referee.started.values() if n not in referee.leaking)
        return {**figures, "leaks": len(referee.leaking),
                "details": {what: explain(api, truth, lived_at_start, names) for what, names in (
                    ("false", false), ("late", figures["leaks_late"]), ("missed", figures["leaks_missed"]))},
                "false_rotations": referee_figures["false"], "violations": len(referee.violations),
                "violation_list": referee.violations[:10], "rss_start_mib": round(rss_start or 0, 1),
                "rss_end_mib": round(rss_end, 1), "minutes": minutes, "workers": workers, "speed": speed,
                "replacements": replacements, **faults, "operator_log": str(tmp / "operator.log")}


def tally(api: EmulatedApi, referee: Referee, truth: dict[str, tuple[str, float]], now: float,
          clock_at: Callable[[float], float]) -> dict[str, Any]:
    """Counts so far. A leak is caught when its pod was evicted before the
    trace's OOM; late when evicted after it (the kernel got there first);
    missed when the clock passed its OOM with the pod still there."""
    events = [e for e in api.objects("events") if e["involvedObject"].get("kind") == "MemoryGuard"]
    evicted_at = {name: clock_at(wall) for _, name, wall in api.evictions}
    leaks = {n: oom for n, (_, oom) in truth.items() if n in referee.leaking}
    return {"rotated": sum(1 for e in events if e["reason"] == "WorkerRotated"),
            "failed": sum(1 for e in events if e["reason"] == "WorkerRotationFailed"),
            "evictions": len(referee.evicted),
            "leaks_caught": sum(1 for n, oom in leaks.items() if n in evicted_at and evicted_at[n] < oom),
            "leaks_late": sorted(n for n, oom in leaks.items() if n in evicted_at and evicted_at[n] >= oom),
            "leaks_missed": sorted(n for n, oom in leaks.items() if oom <= now and n not in evicted_at)}


def explain(api: EmulatedApi, truth: dict[str, tuple[str, float]], lived: dict[str, float],
            names: list[str]) -> list[str]:
    """One line per pod: its trace, how far into it the pod started, and
    what the guard said about it (the start Event, else its last decision)."""
    events = [e for e in api.objects("events") if e["involvedObject"].get("kind") == "MemoryGuard"]
    out = []
    for n in names:
        said = next((e["message"] for e in events if e["reason"] == "WorkerRotationStarted" and n in e["message"]),
                    None)
        if said is None:
            for g in api.objects("memoryguards"):
                pod = pods_listed(g.get("status") or {}).get(n)
                if pod:
                    said = f"last decision: {pod.get('lastDecision')}"
        out.append(f"{n}: trace {truth[n][0]} from {lived.get(n, 0) / 3600:.1f} h; {said}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=200, help="a multiple of 50")
    ap.add_argument("--speed", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = asyncio.run(soak(a.minutes, a.workers, a.speed, a.seed))
    print(f"soak: {r['workers']} workers, {r['minutes']:.0f} min at {r['speed']:.0f}x "
          f"({r['minutes'] * r['speed'] / 60:.0f} h of pod time), seed {a.seed}")
    print(f"  faults injected: {r['api_errors']} API errors, {r['api_slow']} slow API answers, "
          f"{r['watch_drops']} watches dropped, {r['sidecar_faults']} sidecar faults")
    print(f"  rotations: {r['rotated']} done, {r['failed']} failed, {r['evictions']} evictions, "
          f"{r['replacements']} replacement pods")
    print(f"  leaks: {r['leaks']} leaking workers; {r['leaks_caught']} rotated before their OOM, "
          f"{len(r['leaks_late'])} rotated after it (OOM kill seen), {len(r['leaks_missed'])} reached it unrotated "
          "(the rest OOM after the run)")
    print(f"  false rotations: {r['false_rotations']}")
    for what, lines in r["details"].items():
        for line in lines:
            print(f"    {what}: {line[:300]}")
    print(f"  invariant violations: {r['violations']}")
    for v in r["violation_list"]:
        print(f"    {v}")
    print(f"  operator RSS: {r['rss_start_mib']} MiB after 1 min, {r['rss_end_mib']} MiB at the end")
    print(f"  operator log: {r['operator_log']}")
    sys.exit(1 if r["violations"] else 0)


if __name__ == "__main__":
    main()
