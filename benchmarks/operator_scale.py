"""``make bench-operator``: the real operator guarding 2,000, 10,000 and
20,000 pods (issue 16).

The world: the emulated API (devkit) in this process with N worker pods in
RayClusters of 50, each pod at its own loopback address (127.2.x.y); one
process here plays all their sidecars (a socket per pod IP; each answer is a
fresh sample stamped when it is served). Up to 10,000 pods one MemoryGuard
selects them all; beyond, guards of 5,000 each. Every guard polls every 15 s.
The operator runs as a real process.

Prints one line per N, after a warm-up: the operator's CPU share (CPU
seconds per wall second, from /proc), its RSS, p50/p99 of the time from a
sample being served to the decision on it (the operator's own
``memoryguard_sample_to_decision_seconds`` histogram, interpolated within
buckets), the mean and longest guard cycle, the longest gap between two
polls of one pod (seen by the sidecars), and the largest guard status.
Exits 1 when a status could not be written or a target is missed: at most 1
core and 500 MiB, p99 at most 1 s, every pod polled at least once every two
intervals (30 s), every status within 64 KiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import load_crds

PORT = 19208
GIB = 1024**3
INTERVAL_S = 15
PER_GUARD = 5000  # beyond 10,000 pods, guards of this many
TARGETS = {"cpu_share": 1.0, "rss_mib": 500.0, "p99_s": 1.0, "max_gap_s": 2 * INTERVAL_S,
           "status_bytes": 64 * 1024}
POLLED: dict[str, float] = {}  # pod IP -> when its sidecar was last asked
GAPS: dict[str, float] = {}  # pod IP -> the longest gap between two asks while measuring
MEASURING = {"on": False}
HERE_MAX = 10000  # pods whose sidecars one process serves


def pod_ip(i: int) -> str:
    return f"127.2.{i // 250}.{i % 250 + 2}"


async def sidecar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        now = time.time()
        ip = writer.get_extra_info("sockname")[0]
        if MEASURING["on"] and ip in POLLED:
            GAPS[ip] = max(GAPS.get(ip, 0.0), now - POLLED[ip])
        POLLED[ip] = now
        ws = int(20 * GIB + (hash((writer.get_extra_info("sockname")[0], int(now / 15))) % 1000) * 1024 * 1024)
        sample = {"time": now, "memory_current": ws + GIB, "memory_max": 64 * GIB, "anon": ws, "file": 2 * GIB,
                  "inactive_file": GIB, "shmem": GIB, "working_set": ws, "plasma_used": 2 * GIB,
                  "plasma_capacity": 16 * GIB, "psi_some_avg10": 0.1, "psi_full_avg10": 0.0, "oom_kill": 0}
        body = json.dumps({"source": "bench", "samples": [sample]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Quantile from cumulative (le, count) buckets, linear within a bucket."""
    total = buckets[-1][1]
    if not total:
        return None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / max(c - prev_c, 1e-9))
        prev_le, prev_c = le, c
    return None


def histogram(url: str, name: str) -> list[tuple[float, float]]:
    """Cumulative (le, count) buckets, summed over every guard's series."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket"):
            le_text = line.split('le="')[1].split('"')[0]
            le = float("inf") if le_text == "+Inf" else float(le_text)
            out[le] = out.get(le, 0.0) + float(line.split()[-1])
    return sorted(out.items())


def proc_cpu_rss(pid: int) -> tuple[float, float]:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(x.split()[1]) for x in Path(f"/proc/{pid}/status").read_text().splitlines()
               if x.startswith("VmRSS")) / 1024
    return cpu, rss


async def serve_only(lo: int, hi: int) -> None:
    """A helper: the sidecars of pods [lo, hi); "start" on stdin starts the
    gap count, "end" prints the gaps (pod IP -> longest, seconds) as JSON."""
    servers = [await asyncio.start_server(sidecar, pod_ip(i), PORT, backlog=64) for i in range(lo, hi)]
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    t0 = time.time()
    while line := (await reader.readline()).strip():
        if line == b"start":
            GAPS.clear()
            MEASURING["on"] = True
            t0 = time.time()
        elif line == b"end":
            MEASURING["on"] = False
            end = time.time()
            gaps = {ip: max(GAPS.get(ip, 0.0), end - POLLED.get(ip, t0)) for ip in (pod_ip(i) for i in range(lo, hi))}
            print(json.dumps(gaps), flush=True)
    for sv in servers:
        sv.close()


def cycle_stats(url: str) -> tuple[float, float]:
    """(sum, count) of the guards' cycle seconds, all guards together, and
    the upper bound of the highest bucket any cycle fell in."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("memoryguard_guard_cycle_seconds_sum"):
            total += float(line.split()[-1])
        elif line.startswith("memoryguard_guard_cycle_seconds_count"):
            count += float(line.split()[-1])
    return total, count


async def run(n: int, seconds: float, warmup: float) -> dict[str, Any]:
    api = EmulatedApi()
    load_crds(api)
    api.put("namespaces", {"metadata": {"name": "default"}})  # kopf waits for the namespace it serves
    POLLED.clear()
    GAPS.clear()
    MEASURING["on"] = False
    # A listening socket per pod: a process may hold at most ~20,000 (a hard
    # limit an unprivileged container cannot raise), so beyond HERE_MAX pods the
    # rest are served by helper processes of this same script.
    here = min(n, HERE_MAX)
    servers = [await asyncio.start_server(sidecar, pod_ip(i), PORT, backlog=64) for i in range(here)]
    helpers = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", str(lo), str(min(n, lo + HERE_MAX)), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, limit=2**24) for lo in range(here, n, HERE_MAX)]  # a line of 10,000 gaps
    for h in helpers:
        assert h.stdout is not None
        await h.stdout.readline()  # "ready"
    per = 50
    guards = 1 if n <= 10000 else (n + PER_GUARD - 1) // PER_GUARD
    for c in range(0, n, per):
        name = f"bench-{c // per:03d}"
        shard = str((c // PER_GUARD) % guards)
        group = {"groupName": "w", "replicas": per, "minReplicas": 0, "maxReplicas": per,
                 "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}
        api.put("rayclusters", {"metadata": {"name": name, "namespace": "default",
                                             "labels": {"bench": "yes", "shard": shard}},
                                "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                                         "workerGroupSpecs": [group]}})
        for i in range(c, min(n, c + per)):
            api.put("pods", {"metadata": {"name": f"{name}-w-{i}", "namespace": "default", "labels": {
                "ray.io/is-ray-node": "yes", "ray.io/cluster": name, "ray.io/node-type": "worker",
                "ray.io/group": "w"}}, "status": {"phase": "Running", "podIP": pod_ip(i), "conditions": [
                    {"type": "Ready", "status": "True"}]}})
    for g in range(guards):
        api.put("memoryguards", {"metadata": {"name": f"bench-{g}", "namespace": "default"}, "spec": {
            "clusterSelector": {"matchLabels": {"bench": "yes", "shard": str(g)}},
            "sampling": {"intervalSeconds": INTERVAL_S, "sidecarPort": PORT, "timeoutSeconds": 5}}})
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        tmp = Path(tempfile.mkdtemp())
        (tmp / "kubeconfig").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e",
            "clusters": [{"name": "e", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
            "users": [{"name": "e", "user": {"token": "x"}}],
            "contexts": [{"name": "e", "context": {"cluster": "e", "user": "e"}}]}))
        metrics_port = PORT + 1
        log_path = tmp / "operator.log"
        env = {**os.environ, "KUBECONFIG": str(tmp / "kubeconfig"), "MEMORYGUARD_METRICS_HOST": "127.0.0.1",
               "MEMORYGUARD_METRICS_PORT": str(metrics_port), "MEMORYGUARD_DRAIN": "false",
               "MEMORYGUARD_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memoryguard_kuberay", "operator", "--standalone", "-n", "default", env=env,
                stdout=log, stderr=log)
        try:
            print(f"[{n} pods, {guards} guard(s)] warming up {warmup:.0f} s ...", file=sys.stderr)
            await asyncio.sleep(warmup)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            c0, _ = proc_cpu_rss(proc.pid)
            h0 = histogram(url, "memoryguard_sample_to_decision_seconds")
            s0 = cycle_stats(url)
            GAPS.clear()
            MEASURING["on"] = True
            for h in helpers:
                assert h.stdin is not None
                h.stdin.write(b"start\n")
                await h.stdin.drain()
            t0 = time.time()
            print(f"[{n} pods] measuring {seconds:.0f} s ...", file=sys.stderr)
            await asyncio.sleep(seconds)
            MEASURING["on"] = False
            end = time.time()
            far: dict[str, float] = {}
            for h in helpers:
                assert h.stdin is not None and h.stdout is not None
                h.stdin.write(b"end\n")
                await h.stdin.drain()
                far.update(json.loads(await h.stdout.readline()))
            c1, rss = proc_cpu_rss(proc.pid)
            h1 = histogram(url, "memoryguard_sample_to_decision_seconds")
            s1 = cycle_stats(url)
            wall = time.time() - t0
            # A pod never asked while measuring has an open gap up to the end.
            gaps = {ip: max(GAPS.get(ip, 0.0), end - POLLED.get(ip, t0)) for ip in (pod_ip(i) for i in range(here))}
            gaps.update(far)
            window = [(le, c - dict(h0).get(le, 0.0)) for le, c in h1]
            statuses = [(g.get("status") or {}) for g in api.objects("memoryguards", "default")]
            cycles = s1[1] - s0[1]
            not_written = log_path.read_text(errors="replace").count("status not written")
            return {"pods": n, "guards": guards,
                    "guarded": sum((s.get("summary") or {}).get("pods", 0) for s in statuses),
                    "decisions": int(window[-1][1]),
                    "cpu_share": round((c1 - c0) / wall, 3), "rss_mib": round(rss, 1),
                    "p50_s": quantile(window, 0.5), "p99_s": quantile(window, 0.99),
                    "cycle_mean_s": round((s1[0] - s0[0]) / cycles, 1) if cycles else None,
                    "max_gap_s": round(max(gaps.values()), 1),
                    "status_bytes": max(len(json.dumps(s, separators=(",", ":"))) for s in statuses),
                    "status_missing": sum(1 for s in statuses if "summary" not in s), "not_written": not_written,
                    "rotations": sum(((s.get("rotations") or {}).get("total") or 0) for s in statuses)}
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            for h in helpers:
                h.kill()
                await h.wait()
            for sv in servers:
                sv.close()


def missed(r: dict[str, Any]) -> list[str]:
    out = [f"{k} {r[k]} > {v}" for k, v in TARGETS.items() if r.get(k) is None or r[k] > v]
    if r["status_missing"] or r["not_written"]:
        out.append(f"{r['status_missing']} status(es) missing, {r['not_written']} write(s) refused")
    if r["guarded"] != r["pods"]:
        out.append(f"{r['guarded']} of {r['pods']} pods guarded")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, action="append", default=[])
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--serve", type=int, nargs=2, metavar=("LO", "HI"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve_only(*a.serve))
        return 0
    # A listening socket per simulated pod, plus the connections: 20,000 pods
    # need more descriptors than the usual hard limit; root may raise it.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (262144, 262144))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    failed = []
    for n in a.pods or [2000, 10000, 20000]:
        r = asyncio.run(run(n, a.seconds, a.warmup))
        p50 = "?" if r["p50_s"] is None else f"{r['p50_s']:.3f}"
        p99 = "?" if r["p99_s"] is None else f"{r['p99_s']:.3f}"
        bad = missed(r)
        print(f"{r['pods']:>5} pods ({r['guarded']} guarded, {r['guards']} guard(s)): operator CPU "
              f"{r['cpu_share']:.2f} core, RSS {r['rss_mib']} MiB, sample->decision p50 {p50} s, p99 {p99} s over "
              f"{r['decisions']} decisions, {r['rotations']} rotations; cycle {r['cycle_mean_s']} s, longest poll "
              f"gap {r['max_gap_s']} s, status {r['status_bytes'] / 1024:.1f} KiB"
              + (f"  MISSED: {'; '.join(bad)}" if bad else "  (targets met)"), flush=True)
        failed += bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
