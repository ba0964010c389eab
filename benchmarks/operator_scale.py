"""``make bench-operator``: the real operator guarding 500 and 2,000 pods.

The world: the emulated API (tests/emulator) in this process with N worker
pods in RayClusters of 50, each pod at its own loopback address
(127.2.x.y); one process here plays all their sidecars (a socket per pod IP;
each answer is a fresh sample stamped when it is served). One MemoryGuard
selects them all and polls every 15 s. The operator runs as a real process.

Prints, per N, after a warm-up: the operator's CPU share (CPU seconds per
wall second, from /proc), its RSS, and p50/p99 of the time from a sample
being served to the decision on it (the operator's own
``memoryguard_sample_to_decision_seconds`` histogram, interpolated within
buckets). Targets at 2,000 pods: <= 0.5 core, <= 300 MiB, p99 <= 1 s.
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

import yaml

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import load_crds

PORT = 19208
GIB = 1024**3


def pod_ip(i: int) -> str:
    return f"127.2.{i // 250}.{i % 250 + 2}"


async def sidecar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        now = time.time()
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
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket"):
            le = line.split('le="')[1].split('"')[0]
            out.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    return sorted(out)


def proc_cpu_rss(pid: int) -> tuple[float, float]:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(x.split()[1]) for x in Path(f"/proc/{pid}/status").read_text().splitlines()
               if x.startswith("VmRSS")) / 1024
    return cpu, rss


async def run(n: int, seconds: float, warmup: float) -> dict[str, float | int | None]:
    api = EmulatedApi()
    load_crds(api)
    api.put("namespaces", {"metadata": {"name": "default"}})  # kopf waits for the namespace it serves
    servers = [await asyncio.start_server(sidecar, pod_ip(i), PORT, backlog=64) for i in range(n)]
    per = 50
    for c in range(0, n, per):
        name = f"bench-{c // per:03d}"
        group = {"groupName": "w", "replicas": per, "minReplicas": 0, "maxReplicas": per,
                 "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}
        api.put("rayclusters", {"metadata": {"name": name, "namespace": "default", "labels": {"bench": "yes"}},
                                "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                                         "workerGroupSpecs": [group]}})
        for i in range(c, min(n, c + per)):
            api.put("pods", {"metadata": {"name": f"{name}-w-{i}", "namespace": "default", "labels": {
                "ray.io/is-ray-node": "yes", "ray.io/cluster": name, "ray.io/node-type": "worker",
                "ray.io/group": "w"}}, "status": {"phase": "Running", "podIP": pod_ip(i), "conditions": [
                    {"type": "Ready", "status": "True"}]}})
    api.put("memoryguards", {"metadata": {"name": "bench", "namespace": "default"}, "spec": {
        "clusterSelector": {"matchLabels": {"bench": "yes"}},
        "sampling": {"intervalSeconds": 15, "sidecarPort": PORT, "timeoutSeconds": 5}}})
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        tmp = Path(tempfile.mkdtemp())
        (tmp / "kubeconfig").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e",
            "clusters": [{"name": "e", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
            "users": [{"name": "e", "user": {"token": "x"}}],
            "contexts": [{"name": "e", "context": {"cluster": "e", "user": "e"}}]}))
        metrics_port = PORT + 1
        env = {**os.environ, "KUBECONFIG": str(tmp / "kubeconfig"), "MEMORYGUARD_METRICS_HOST": "127.0.0.1",
               "MEMORYGUARD_METRICS_PORT": str(metrics_port), "MEMORYGUARD_DRAIN": "false",
               "MEMORYGUARD_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "operator", "--standalone",
                                                    "-n", "default", env=env)
        try:
            print(f"[{n} pods] warming up {warmup:.0f} s ...", file=sys.stderr)
            await asyncio.sleep(warmup)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            c0, _ = proc_cpu_rss(proc.pid)
            h0 = histogram(url, "memoryguard_sample_to_decision_seconds")
            t0 = time.time()
            print(f"[{n} pods] measuring {seconds:.0f} s ...", file=sys.stderr)
            await asyncio.sleep(seconds)
            c1, rss = proc_cpu_rss(proc.pid)
            h1 = histogram(url, "memoryguard_sample_to_decision_seconds")
            wall = time.time() - t0
            window = [(le, c - dict(h0).get(le, 0.0)) for le, c in h1]
            status = api.get("memoryguards", "default", "bench")["status"]  # type: ignore[index]
            return {"pods": n, "guarded": status["summary"]["pods"], "decisions": int(window[-1][1]),
                    "cpu_share": round((c1 - c0) / wall, 3), "rss_mib": round(rss, 1),
                    "p50_s": quantile(window, 0.5), "p99_s": quantile(window, 0.99),
                    "rotations": status["rotations"]["total"]}
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            for s in servers:
                s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, action="append", default=[])
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup", type=float, default=45)
    a = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    for n in a.pods or [500, 2000]:
        r = asyncio.run(run(n, a.seconds, a.warmup))
        p50 = "?" if r["p50_s"] is None else f"{r['p50_s']:.3f}"
        p99 = "?" if r["p99_s"] is None else f"{r['p99_s']:.3f}"
        print(f"{r['pods']:>5} pods ({r['guarded']} guarded): operator CPU {r['cpu_share']:.2f} core, "
              f"RSS {r['rss_mib']} MiB, sample->decision p50 {p50} s, p99 {p99} s over {r['decisions']} decisions, "
              f"{r['rotations']} rotations")


if __name__ == "__main__":
    main()
