"""``make bench-operator``: the real operator guarding 2,000, 10,000 and
20,000 pods (issue 16).

The world: the emulated API (devkit) in this process with N worker pods in
RayClusters of 50, each pod the size KubeRay makes one (``worker_pod``, about
9 KiB of JSON) at its own loopback address (127.2.x.y); this process (and,
past 10,000 pods, helpers) plays all their sidecars (a socket per pod IP; each answer is a
fresh sample stamped when it is served). Up to 10,000 pods one MemoryGuard
selects them all; beyond, guards of 5,000 each. Every guard polls every 15 s.
The operator runs as a real process.

Prints one line per N, after a warm-up: the operator's CPU share (CPU
seconds per wall second, from /proc), its RSS at the end and its peak since
it started (VmHWM: the first LIST included), p50/p99 of the time from a
sample being served to the decision on it (the operator's own
``memoryguard_sample_to_decision_seconds`` histogram, interpolated within
buckets), the mean and longest guard cycle, the longest gap between two
polls of one pod (seen by the sidecars), and the largest guard status.
Exits 1 when a status could not be written or a target is missed: at most 1
core and a peak of 500 MiB, p99 at most 1 s, every pod polled at least once every two
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

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import load_crds, write_kubeconfig

PORT = 19208
GIB = 1024**3
INTERVAL_S = 15
PER_GUARD = 5000  # beyond 10,000 pods, guards of this many
TARGETS = {"cpu_share": 1.0, "peak_rss_mib": 500.0, "p99_s": 1.0, "max_gap_s": 2 * INTERVAL_S,
           "status_bytes": 64 * 1024}
POLLED: dict[str, float] = {}  # pod IP -> when its sidecar was last asked
GAPS: dict[str, float] = {}  # pod IP -> the longest gap between two asks while measuring
MEASURING = {"on": False}
KEEP_ALIVE = {"on": True}  # --no-keep-alive: every ask on a new connection, as before issue 25
HERE_MAX = 10000  # pods whose sidecars one process serves


def pod_ip(i: int) -> str:
    return f"127.2.{i // 250}.{i % 250 + 2}"


def worker_pod(name: str, cluster: str, group: str, ip: str) -> dict[str, Any]:
    """A worker pod the size of one KubeRay makes (about 9 KiB of JSON):
    the fields its pod builder sets (labels, owner, the ray start command,
    its environment, the wait-for-GCS init container, the shared-memory
    volume), what the API server and the kubelet add (managedFields, the
    service account volume, tolerations, container statuses), and a log
    shipper beside Ray. The operator lists these every cycle: their size is
    what a LIST costs it. (The sidecar here is the user's own, not the
    injected one, which would have to name its pod's uid.)"""
    gcs = f"{cluster}-head-svc.default.svc.cluster.local:6379"
    env = [{"name": "FQ_RAY_IP", "value": f"{cluster}-head-svc.default.svc.cluster.local"},
           {"name": "RAY_IP", "value": f"{cluster}-head-svc"}, {"name": "RAY_CLUSTER_NAME", "valueFrom": {
               "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['ray.io/cluster']"}}},
           {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                        "fieldPath": "metadata.name"}}},
           {"name": "RAY_NODE_TYPE_NAME", "valueFrom": {"fieldRef": {
               "apiVersion": "v1", "fieldPath": "metadata.labels['ray.io/group']"}}},
           {"name": "KUBERAY_GEN_RAY_START_CMD", "value": f"ray start  --address={gcs}  --block  --dashboard-agent-"
                                                          "listen-port=52365  --memory=68719476736  --metrics-expo"
                                                          "rt-port=8080  --num-cpus=16  --num-gpus=0 "},
           {"name": "RAY_PORT", "value": "6379"}, {"name": "RAY_ADDRESS", "value": gcs},
           {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"},
           {"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": "kuberay_version=v1.3.0;kuberay_crd=RayCluster"},
           {"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"},
           {"name": "LD_PRELOAD", "value": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
           {"name": "MALLOC_CONF", "value": "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"}]
    ray = {"name": "ray-worker", "image": "rayproject/ray:2.40.0-py311", "imagePullPolicy": "IfNotPresent",
           "command": ["/bin/bash", "-lc", "--"], "args": [
               f"ulimit -n 65536; ray start  --address={gcs}  --block  --dashboard-agent-listen-port=52365  "
               "--memory=68719476736  --metrics-export-port=8080  --num-cpus=16  --num-gpus=0 "],
           "env": env, "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
           "resources": {"limits": {"cpu": "16", "memory": "64Gi"}, "requests": {"cpu": "16", "memory": "64Gi"}},
           "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
           "livenessProbe": {"exec": {"command": ["bash", "-c", "wget -T 2 -q -O- http://localhost:52365/api/local"
                                                  "_raylet_healthz | grep success"]},
                             "failureThreshold": 120, "initialDelaySeconds": 30, "periodSeconds": 5,
                             "successThreshold": 1, "timeoutSeconds": 2},
           "volumeMounts": [{"mountPath": "/dev/shm", "name": "shared-mem"},
                            {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                             "name": "kube-api-access-7x2kq", "readOnly": True}],
           "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    shipper = {"name": "fluent-bit", "image": "fluent/fluent-bit:3.1.9",
                 "ports": [{"containerPort": 2020, "name": "fb-metrics", "protocol": "TCP"}],
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                         "fieldPath": "metadata.name"}}}],
                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"},
                               "requests": {"cpu": "10m", "memory": "32Mi"}}}
    started = "2026-11-30T08:00:00Z"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": f"{cluster}-{group}-worker-", "namespace": "default",
            "labels": {"app.kubernetes.io/created-by": "kuberay-operator", "app.kubernetes.io/name": "kuberay",
                       "ray.io/cluster": cluster, "ray.io/group": group, "ray.io/identifier": f"{cluster}-worker",
                       "ray.io/is-ray-node": "yes", "ray.io/node-type": "worker"},
            "annotations": {"ray.io/ft-enabled": "false"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
                                 "uid": "6f1c2b1e-0000-4000-8000-000000000000", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kuberay-operator", "operation": "Update", "apiVersion": "v1", "time": started,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {
                     "f:generateName": {}, "f:labels": {f"f:{k}": {} for k in (
                         "app.kubernetes.io/created-by", "app.kubernetes.io/name", "ray.io/cluster", "ray.io/group",
                         "ray.io/identifier", "ray.io/is-ray-node", "ray.io/node-type")},
                     "f:ownerReferences": {".": {}, 'k:{"uid":"6f1c2b1e-0000-4000-8000-000000000000"}': {}}},
                     "f:spec": {'f:containers': {'k:{"name":"ray-worker"}': {
                         ".": {}, "f:args": {}, "f:command": {}, "f:env": {f'k:{{"name":"{e["name"]}"}}': {
                             ".": {}, "f:name": {}, "f:value": {}} for e in env}, "f:image": {},
                         "f:lifecycle": {}, "f:name": {}, "f:ports": {}, "f:resources": {}, "f:volumeMounts": {}}},
                         "f:initContainers": {}, "f:restartPolicy": {}, "f:volumes": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": started,
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                     "f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {},
                                                              "f:lastTransitionTime": {}, "f:status": {},
                                                              "f:type": {}}
                                      for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers",
                                                "PodScheduled", "Ready")},
                     "f:containerStatuses": {}, "f:hostIP": {}, "f:initContainerStatuses": {}, "f:phase": {},
                     "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}}]},
        "spec": {
            "containers": [ray, shipper],
            "initContainers": [{"name": "wait-gcs-ready", "image": "rayproject/ray:2.40.0-py311",
                                "command": ["/bin/bash", "-lc", "--"], "args": [
                                    f"until ray health-check --address {gcs} > /dev/null 2>&1; do echo wait for GCS "
                                    "to be ready; sleep 5; done"],
                                "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}}}],
            "volumes": [{"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                        {"name": "kube-api-access-7x2kq", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                                                  "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "nodeName": f"node-{ip}", "restartPolicy": "Never", "schedulerName": "default-scheduler",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
            "tolerations": [{"effect": "NoExecute", "key": f"node.kubernetes.io/{t}", "operator": "Exists",
                             "tolerationSeconds": 300} for t in ("not-ready", "unreachable")]},
        "status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip, "hostIPs": [{"ip": ip}],
            "qosClass": "Guaranteed", "startTime": started,
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "initContainerStatuses": [{"name": "wait-gcs-ready", "ready": True, "restartCount": 0,
                                       "image": "docker.io/rayproject/ray:2.40.0-py311",
                                       "imageID": "docker.io/rayproject/ray@sha256:" + "a" * 64,
                                       "containerID": "containerd://" + "b" * 64, "started": False,
                                       "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                                "startedAt": started, "finishedAt": started,
                                                                "containerID": "containerd://" + "b" * 64}}}],
            "containerStatuses": [{"name": c, "ready": True, "restartCount": 0, "started": True,
                                   "image": "docker.io/rayproject/ray:2.40.0-py311",
                                   "imageID": "docker.io/rayproject/ray@sha256:" + "c" * 64,
                                   "containerID": "containerd://" + "d" * 64,
                                   "state": {"running": {"startedAt": started}}}
                                  for c in ("fluent-bit", "ray-worker")]}}


async def sidecar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A pod's sidecar as the operator sees one: a fresh sample per ask, the
    connection kept when the ask says keep-alive (as the real sidecar does)."""
    try:
        while True:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            now = time.time()
            ip = writer.get_extra_info("sockname")[0]
            if MEASURING["on"] and ip in POLLED:
                GAPS[ip] = max(GAPS.get(ip, 0.0), now - POLLED[ip])
            POLLED[ip] = now
            ws = int(20 * GIB + (hash((ip, int(now / 15))) % 1000) * 1024 * 1024)
            sample = {"time": now, "memory_current": ws + GIB, "memory_max": 64 * GIB, "anon": ws, "file": 2 * GIB,
                      "inactive_file": GIB, "shmem": GIB, "working_set": ws, "plasma_used": 2 * GIB,
                      "plasma_capacity": 16 * GIB, "psi_some_avg10": 0.1, "psi_full_avg10": 0.0, "oom_kill": 0}
            body = json.dumps({"source": "bench", "samples": [sample]}).encode()
            keep = b"keep-alive" in head.lower() and KEEP_ALIVE["on"]
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: "
                         + (b"keep-alive" if keep else b"close")
                         + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            if not keep:
                return
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
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


def proc_cpu_rss(pid: int) -> tuple[float, float, float]:
    """CPU seconds, RSS and peak RSS (MiB) of a process."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    status = {x.split(":")[0]: x.split()[1] for x in Path(f"/proc/{pid}/status").read_text().splitlines()
              if x.startswith(("VmRSS", "VmHWM"))}
    return cpu, int(status["VmRSS"]) / 1024, int(status["VmHWM"]) / 1024


def longest_gaps(pods: range, *, since: float, end: float) -> dict[str, float]:
    """Pod IP -> the longest gap between two asks while measuring; the gap
    still open at the end counts (a pod never asked has one since the start)."""
    return {ip: max(GAPS.get(ip, 0.0), end - POLLED.get(ip, since)) for ip in map(pod_ip, pods)}


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
            gaps = longest_gaps(range(lo, hi), since=t0, end=end)
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
            api.put("pods", worker_pod(f"{name}-w-{i}", name, "w", pod_ip(i)))
    for g in range(guards):
        api.put("memoryguards", {"metadata": {"name": f"bench-{g}", "namespace": "default"}, "spec": {
            "clusterSelector": {"matchLabels": {"bench": "yes", "shard": str(g)}},
            "sampling": {"intervalSeconds": INTERVAL_S, "sidecarPort": PORT, "timeoutSeconds": 5}}})
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        tmp = Path(tempfile.mkdtemp())
        write_kubeconfig((tmp / "kubeconfig"), f"http://127.0.0.1:{server.port}")
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
            c0, _, _ = proc_cpu_rss(proc.pid)
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
            c1, rss, peak = proc_cpu_rss(proc.pid)
            h1 = histogram(url, "memoryguard_sample_to_decision_seconds")
            s1 = cycle_stats(url)
            wall = time.time() - t0
            gaps = longest_gaps(range(here), since=t0, end=end)
            gaps.update(far)
            window = [(le, c - dict(h0).get(le, 0.0)) for le, c in h1]
            statuses = [(g.get("status") or {}) for g in api.objects("memoryguards", "default")]
            cycles = s1[1] - s0[1]
            not_written = log_path.read_text(errors="replace").count("status not written")
            return {"pods": n, "guards": guards,
                    "guarded": sum((s.get("summary") or {}).get("pods", 0) for s in statuses),
                    "decisions": int(window[-1][1]),
                    "cpu_share": round((c1 - c0) / wall, 3), "rss_mib": round(rss, 1),
                    "peak_rss_mib": round(peak, 1),
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
              f"{r['cpu_share']:.2f} core, RSS {r['rss_mib']} MiB (peak {r['peak_rss_mib']}), sample->decision "
              f"p50 {p50} s, p99 {p99} s over {r['decisions']} decisions, {r['rotations']} rotations; cycle "
              f"{r['cycle_mean_s']} s, longest poll gap {r['max_gap_s']} s, status {r['status_bytes'] / 1024:.1f} KiB"
              + (f"  MISSED: {'; '.join(bad)}" if bad else "  (targets met)"), flush=True)
        failed += bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
