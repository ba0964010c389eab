"""``make real-leak``: a real leak in a real Ray, killed by the real kernel.

As root, on a host with a cgroup memory controller (v1 here, v2 where the
host has it): a memory cgroup with a real limit (3 GiB by default) holds a
real Ray head (``ray start``, on loopback, its object store sized inside the
limit) and a driver whose long-lived actor leaks the two ways the field
reports: ObjectRefs held by closures it keeps (Plasma objects never
released), and a Python structure that only grows. The real sidecar reads
that cgroup and the raylet's metrics; this script polls it as the operator
would and runs the policy on each sample as it arrives, with the test
profile below. Printed: when the policy said rotate, when the kernel
OOM-killed (the cgroup's ``oom_kill`` counter, the actor's process gone), or
held the cgroup at its limit without killing (seen here: the actor kept in
reclaim at the limit for the rest of the run; the workload ends there all
the same), and the lead. Exit 1 if the kernel came first; 2 if this host cannot run it.

The policy's **test profile** (``examples/guards/test-profile.yaml``: short
windows, for a leak that reaches the OOM in about 10 minutes; never a
production setting): trend buckets of 15 s over 5 minutes, a verdict after
2 minutes of history, rotate when the OOM is projected within 3 minutes.

Before a rotation the operator keeps the evidence of what leaked: so does
this run, as the operator's collection does it (``forensics.collect``: the
sidecar's process table, Ray's objects on the node by call site, with Ray
recording call sites as a guard's ``callSites`` remediation sets), once
when the policy first says rotate and once ``--second-evidence-s`` (45)
later, into ``--evidence-dir`` (``build/real-leak``); the two are then
compared as ``memoryguard-kuberay forensics --diff`` prints them.

The recorded samples are written as a trace (``--trace``, default
``examples/recorded/real_ray_leak.csv``) with its label, for ``make bench``.
Bounded: everything stops after ``--max-minutes`` (15) whatever happens, and
the cgroup, Ray and the sidecar are removed by the PIDs this script started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.policy import Action, Decision, PodWindow, Reason, RotationHistory, decide
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.traces import write_trace
from memoryguard_kuberay.devkit import processes
from memoryguard_kuberay.devkit.emulator.world import free_port
from memoryguard_kuberay.operator.forensics import cli as forensics_cli
from memoryguard_kuberay.operator.forensics import collect as forensics

GIB = 1024**3
MIB = 1024**2
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STORE_REASONS = frozenset({Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL})
# Call sites recorded, as a guard's callSites remediation sets them: the
# evidence then names the line that made each leaked object.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_record_ref_creation_sites": "1"}
TEST_PROFILE = ROOT / "examples" / "guards" / "test-profile.yaml"

LEAKER = textwrap.dedent("""
    import os, sys, time, ray, numpy as np
    ray.init(address=sys.argv[1], logging_level="ERROR")
    heap_mib, store_mib = float(sys.argv[2]), float(sys.argv[3])

    @ray.remote
    class Session:
        '''A long-lived actor that serves requests and forgets to let go.'''
        def __init__(self):
            self.on_disconnect = []  # closures that hold ObjectRefs after the client left
            self.history = []  # a structure that only grows
        def pid(self):
            return os.getpid()
        def handle(self, i):
            ref = ray.put(np.full(int(store_mib * 1024 * 1024), i % 251, dtype=np.uint8))
            self.on_disconnect.append(lambda r=ref: r)
            self.history.append(np.full(int(heap_mib * 1024 * 1024), i % 251, dtype=np.uint8))
            return len(self.history)

    s = Session.remote()
    print("ACTOR", ray.get(s.pid.remote()), flush=True)
    i = 0
    while True:
        i += 1
        try:
            ray.get(s.handle.remote(i))
        except Exception as e:  # the actor was OOM-killed
            print("ACTOR-DIED", type(e).__name__, flush=True)
            break
        time.sleep(0.5)
""")


def get_json(url: str, timeout: float = 3.0) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


class MemoryGroup:
    """A memory cgroup made for this run: v1 (``memory.limit_in_bytes``,
    ``memory.oom_control``) or v2 (``memory.max``, ``memory.events``)."""

    def __init__(self, limit: int) -> None:
        name = f"memoryguard-real-leak-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/memory")
        v2 = Path("/sys/fs/cgroup")
        if (v1 / "memory.limit_in_bytes").exists():
            self.path, self.v1 = v1 / name, True
        elif "memory" in (v2 / "cgroup.subtree_control").read_text() if (v2 / "cgroup.subtree_control").exists() \
                else False:
            self.path, self.v1 = v2 / name, False
        else:
            raise SystemExit("real-leak: no cgroup memory controller to make a group in (see FACTS.md)")
        self.path.mkdir()
        (self.path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit))
        if self.v1:
            # No swap here, and none wanted: the leak must meet the OOM killer, not the disk.
            with contextlib.suppress(OSError):
                (self.path / "memory.swappiness").write_text("0")

    def oom_kills(self) -> int:
        text = (self.path / ("memory.oom_control" if self.v1 else "memory.events")).read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def enter_cmd(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this group (the shell moves itself in, then execs)."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *argv]

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)
        print(f"real-leak: could not remove {self.path} (processes left in it?)", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-gib", type=float, default=3.0)
    ap.add_argument("--store-mib", type=int, default=400, help="the Ray object store, inside the limit")
    ap.add_argument("--heap-mib", type=float, default=1.5, help="MiB the actor's structure grows per request")
    ap.add_argument("--leak-store-mib", type=float, default=0.5, help="MiB of Plasma pinned per request")
    ap.add_argument("--max-minutes", type=float, default=15.0)
    ap.add_argument("--trace", default=str(ROOT / "examples" / "recorded" / "real_ray_leak.csv"))
    ap.add_argument("--evidence-dir", default=str(ROOT / "build" / "real-leak"),
                    help="where the two kept artifacts are written (default build/real-leak)")
    ap.add_argument("--second-evidence-s", type=float, default=45.0,
                    help="seconds after the first artifact the second is taken (default 45)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("real-leak: needs root to make a memory cgroup", file=sys.stderr)
        return 2
    settings = commands.load_guard_settings(str(TEST_PROFILE))
    settings = dataclasses.replace(settings, dry_run=False)  # decide as a guard that rotates would
    limit = int(args.limit_gib * GIB)
    deadline = time.monotonic() + args.max_minutes * 60
    group = MemoryGroup(limit)
    gcs_port, metrics_port, sidecar_port = free_port("127.0.0.1"), free_port("127.0.0.1"), free_port("127.0.0.1")
    env = {**os.environ, **RAY_ENV}
    tmp = tempfile.mkdtemp(prefix="mg-real-leak-")
    print(f"cgroup {group.path} ({'v1' if group.v1 else 'v2'}), limit {args.limit_gib:g} GiB, object store "
          f"{args.store_mib} MiB; leak per request: {args.heap_mib:g} MiB heap + {args.leak_store_mib:g} MiB Plasma",
          flush=True)
    samples: list[Sample] = []
    first_rotate: tuple[float, str] | None = None
    first_memory: tuple[float, str] | None = None  # the first rotation for memory itself, not the store
    oom_at: float | None = None
    ended = "OOM-killed"  # or: stalled at the limit, never killed
    leak_start: float | None = None
    t0 = time.time()
    kept: Evidence | None = None
    try:
        ray_cmd = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs_port}",
                   "--num-cpus=2", f"--object-store-memory={args.store_mib * MIB}", "--include-dashboard=false",
                   f"--metrics-export-port={metrics_port}", "--disable-usage-stats", f"--temp-dir={tmp}"]
        with processes.group(group.enter_cmd(ray_cmd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            sidecar_cmd = [str(BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"127.0.0.1:{sidecar_port}",
                           "--interval", "1", "--cgroup-root", str(group.path), "--ray-metrics-url",
                           f"http://127.0.0.1:{metrics_port}/metrics", "--ray-metrics-interval", "2",
                           # Its process table: the cgroup's (this host's /proc shows every process).
                           "--process-scope", "cgroup", "--log-level", "WARNING"]
            with processes.group(sidecar_cmd, env=env):
                # In a pod, Ray and its sidecar share the pod's IP: here both are at 127.0.0.1.
                url = f"http://127.0.0.1:{sidecar_port}/v1/samples"
                while time.monotonic() < deadline:  # the sidecar and the raylet's store metrics
                    with contextlib.suppress(OSError, ValueError):
                        doc = get_json(url)
                        if doc["samples"] and doc["samples"][-1].get("plasma_capacity"):
                            break
                    time.sleep(1)
                print(f"[{time.time() - t0:6.0f} s] Ray up, sidecar reading the cgroup", flush=True)
                leaker = group.enter_cmd([sys.executable, "-c", LEAKER, f"127.0.0.1:{gcs_port}", str(args.heap_mib),
                                          str(args.leak_store_mib)])
                with processes.group(leaker, env=env, stdout=subprocess.PIPE, text=True) as driver:
                    leak_start = time.time()
                    window = PodWindow(settings)
                    kills0 = group.oom_kills()
                    last_t = 0.0
                    last_print = 0.0
                    stall = LimitStall(limit)
                    kept = Evidence(Path(args.evidence_dir), node_ip="127.0.0.1", sidecar_port=sidecar_port,
                                    gcs=f"127.0.0.1:{gcs_port}", second_after_s=args.second_evidence_s)
                    while time.monotonic() < deadline:
                        with contextlib.suppress(OSError, ValueError):
                            for raw in get_json(url)["samples"]:
                                s = Sample.from_wire(raw)
                                if s.time_s <= last_t:
                                    continue
                                last_t = s.time_s
                                samples.append(s)
                                window.add(s)
                                stall.add(s)
                                d = decide(settings=settings, window=window, history=RotationHistory(), now_s=s.time_s)
                                if d[0].action is not Action.ROTATE:
                                    continue
                                kept.due(s, d[0])
                                said = (s.time_s, f"{d[0].reason.value}: {d[0].message}")
                                if first_rotate is None:
                                    first_rotate = said
                                    print(f"[{s.time_s - t0:6.0f} s] POLICY: rotate ({said[1]})", flush=True)
                                if first_memory is None and d[0].reason not in STORE_REASONS:
                                    first_memory = said
                                    if said is not first_rotate:
                                        print(f"[{s.time_s - t0:6.0f} s] POLICY (memory rules): rotate ({said[1]})",
                                              flush=True)
                        if time.time() - last_print >= 30 and samples:
                            last_print = time.time()
                            s = samples[-1]
                            print(f"[{s.time_s - t0:6.0f} s] in use {(s.unreclaimable_bytes or 0) / MIB:6.0f} MiB "
                                  f"of {(s.memory_max_bytes or 0) / MIB:.0f} MiB, Plasma "
                                  f"{(s.plasma_used_bytes or 0) / MIB:.0f} MiB, spilled "
                                  f"{(s.plasma_spilled_bytes or 0) / MIB:.0f} MiB", flush=True)
                        if group.oom_kills() > kills0:
                            oom_at = time.time()
                            print(f"[{oom_at - t0:6.0f} s] KERNEL: OOM kill in the cgroup (oom_kill "
                                  f"{group.oom_kills()})", flush=True)
                            break
                        if stall.stalled_since is not None:
                            # Seen on this host's cgroup v1 with a 2 GiB limit: no kill,
                            # the leaking actor held in reclaim at the limit (load ~100,
                            # all system time) until the run's end. The workload died
                            # there all the same: that is the end a rotation must beat.
                            oom_at = stall.stalled_since
                            ended = "stalled at the limit"
                            print(f"[{time.time() - t0:6.0f} s] KERNEL: no OOM kill; the cgroup has been held at its "
                                  f"limit since {oom_at - t0:.0f} s with no progress for {STALL_S:.0f} s (reclaim, "
                                  "not a kill): the run ends there", flush=True)
                            break
                        time.sleep(1)
                    if oom_at is not None and ended == "OOM-killed":
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            out, _ = driver.communicate(timeout=30)
                            died = [ln for ln in out.splitlines() if ln.startswith("ACTOR")]
                            print("driver: " + "; ".join(died), flush=True)
                        # A last poll: the samples up to and after the kill, for the trace.
                        with contextlib.suppress(OSError, ValueError):
                            samples.extend(s for s in (Sample.from_wire(r) for r in get_json(url)["samples"])
                                           if s.time_s > last_t)
                    kept.wait()
    finally:
        group.remove()
    kept_paths = kept.paths if kept is not None else []
    if len(kept_paths) == 2:
        print(f"\nwhat grew between the two artifacts (memoryguard-kuberay forensics --diff "
              f"{kept_paths[0]} {kept_paths[1]}):", flush=True)
        forensics_cli.main(["--diff", str(kept_paths[0]), str(kept_paths[1])])
    elif kept_paths:
        print(f"one artifact kept ({kept_paths[0]}); the second was not taken before the run ended")
    if oom_at is None:
        print(f"real-leak: no OOM kill within {args.max_minutes:g} minutes (leak too slow for this limit?)")
        return 1
    if samples and leak_start is not None:
        _write(samples, args.trace, t0=samples[0].time_s, leak_start=leak_start, oom_at=oom_at, ended=ended)
    if first_rotate is None or first_rotate[0] > oom_at:
        print(f"RESULT: the kernel came first ({ended} at {oom_at - t0:.0f} s, policy "
              f"{'never' if first_rotate is None else f'at {first_rotate[0] - t0:.0f} s'})")
        return 1
    print(f"RESULT: policy said rotate at {first_rotate[0] - t0:.0f} s, {ended} at {oom_at - t0:.0f} s: "
          f"lead {oom_at - first_rotate[0]:.0f} s ({first_rotate[1][:120]})")
    if first_memory is not None and first_memory is not first_rotate:
        print(f"        the memory rules alone: rotate at {first_memory[0] - t0:.0f} s, lead "
              f"{oom_at - first_memory[0]:.0f} s ({first_memory[1][:120]})")
    return 0


class Evidence:
    """The artifacts a guard would keep before rotating this pod, taken
    beside the sampling loop (a collection takes seconds: Ray's probe
    starts an interpreter): the first when the policy first says rotate,
    the second ``second_after_s`` later."""

    def __init__(self, where: Path, *, node_ip: str, sidecar_port: int, gcs: str, second_after_s: float) -> None:
        self.where, self.node_ip, self.sidecar_port = where, node_ip, sidecar_port
        self.gcs, self.second_after_s = gcs, second_after_s
        self.paths: list[Path] = []
        self.first_at: float | None = None
        self.threads: list[threading.Thread] = []

    def due(self, s: Sample, decision: Decision) -> None:
        if self.first_at is None:
            self.first_at = s.time_s
        elif len(self.threads) >= 2 or s.time_s - self.first_at < self.second_after_s:
            return
        n = len(self.threads) + 1
        t = threading.Thread(target=self._take, args=(n, s, decision), daemon=True)
        self.threads.append(t)
        t.start()

    def _take(self, n: int, s: Sample, decision: Decision) -> None:
        subject = forensics.Subject(namespace="real-leak", guard="real-leak", guard_uid="", pod="real-leak",
                                    pod_uid="", cluster="real-leak", group="leaker", ip=self.node_ip,
                                    sidecar_port=self.sidecar_port, gcs_address=self.gcs, decision=decision,
                                    last_sample=s)
        doc = asyncio.run(forensics.collect(subject, budget_s=30.0, with_ray=True))
        self.where.mkdir(parents=True, exist_ok=True)
        path = self.where / f"evidence-{n}.json"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self.paths.append(path)
        print(f"[evidence] artifact {n} kept: {path} (skipped: {doc.get('skipped') or 'nothing'})", flush=True)

    def wait(self) -> None:
        for t in self.threads:
            t.join(timeout=60)
        self.paths.sort()


STALL_S = 60.0  # at the limit this long without growing: held in reclaim, not killed
STALL_AT = 0.98  # of the limit: memory.current there is at the limit (the kernel keeps a little back)


class LimitStall:
    """When the workload stopped at the cgroup's limit: memory.current at
    ``STALL_AT`` of the limit, and memory in use (anon + shmem) growing less
    than 1% of it for ``STALL_S``; it stalled when in use last grew. Not
    memory.current alone: it reaches the limit first while the leak goes on
    growing into the page cache the kernel reclaims (seen: at the limit 228 s
    in, in use still growing 6 MiB/s until about 260 s)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.at_limit: tuple[float, float] | None = None  # (since, memory in use then)
        self.stalled_since: float | None = None

    def add(self, s: Sample) -> None:
        current = s.memory_current_bytes or 0
        if current < STALL_AT * self.limit:
            self.at_limit = None
            return
        used = s.unreclaimable_bytes or 0
        if self.at_limit is None or used - self.at_limit[1] > 0.01 * self.limit:
            self.at_limit = (s.time_s, used)
        elif s.time_s - self.at_limit[0] >= STALL_S:
            self.stalled_since = self.at_limit[0]


def _write(samples: list[Sample], path: str, *, t0: float, leak_start: float, oom_at: float,
           ended: str) -> None:
    """The recorded samples as a trace (t_s from the first), ending at the
    kill, with its label beside it in labels.json."""
    rows = []
    for s in samples:
        if s.time_s > oom_at + 5:
            break
        rows.append(dataclasses.replace(s, time_s=round(s.time_s - t0, 3)))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="") as f:
        write_trace(rows, f)
    labels_path = p.parent / "labels.json"
    labels = json.loads(labels_path.read_text()) if labels_path.exists() else {}
    labels[p.stem] = {"kind": "leak", "leak_start_s": int(leak_start - t0), "oom_at_s": int(oom_at - t0),
                      "plasma_full_at_s": None, "rows": len(rows), "ended": ended}
    labels_path.write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")
    print(f"trace written to {p} ({len(rows)} rows) with its label in {labels_path}")


if __name__ == "__main__":
    sys.exit(main())
