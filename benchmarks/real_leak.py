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
from memoryguard_kuberay.core.policy.ladder import Judgement, Level, Move, Step, climb
from memoryguard_kuberay.core.policy.trend import theil_sen
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.traces import write_trace
from memoryguard_kuberay.devkit import processes
from memoryguard_kuberay.devkit.emulator.world import free_port
from memoryguard_kuberay.operator.cycle.laddering import asked_of, said_key
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
EXAMPLE = ROOT / "examples" / "ladder"  # cache_actor.py, the cache workload
CLIMB_EVERY_S = 5.0  # the operator's cycle: a guard's sampling.intervalSeconds in the real-pod tier

LEAKER = textwrap.dedent("""
    import gc, json, os, sys, time, ray, numpy as np
    from memoryguard_kuberay.pressure import on_pressure, reclaim_ray
    address, heap_mib, store_mib, workload, pressure_file, answers_file, example = sys.argv[1:8]
    heap_mib, store_mib = float(heap_mib), float(store_mib)
    ray.init(address=address, logging_level="ERROR", runtime_env={"env_vars": {"PYTHONPATH": example}})
    sys.path.insert(0, example)  # cache_actor.py here too, not only in Ray's workers

    def answered(step, what, t0):
        with open(answers_file, "a") as f:
            f.write(json.dumps({"t": time.time(), "step": step, "did": what, "took_s": round(time.time() - t0, 3)})
                    + "\\n")

    @ray.remote
    class Session:
        '''A long-lived actor that serves requests. ``leak``: it forgets to let
        go (closures that hold ObjectRefs after the client left, a structure
        that only grows); ``cyclic``: what it drops is held in reference
        cycles, which only a garbage collection frees (the collector off
        between runs, as on a busy worker). Both answer the pod's pressure
        file as the ladder asks: reclaim_ray() on Reclaim or Shed.'''
        def __init__(self, kind):
            self.kind = kind
            self.on_disconnect = []  # closures that hold ObjectRefs after the client left
            self.history = []  # a structure that only grows
            if kind == "cyclic":
                gc.disable()
            on_pressure(self._pressure, path=pressure_file, interval_s=1.0)
        def _pressure(self, p):
            if p.step in ("Reclaim", "Shed"):
                t0 = time.time()
                reclaim_ray()
                answered(p.step, "reclaim_ray", t0)
        def pid(self):
            return os.getpid()
        def handle(self, i):
            ref = ray.put(np.full(int(store_mib * 1024 * 1024), i % 251, dtype=np.uint8))
            heap = np.full(int(heap_mib * 1024 * 1024), i % 251, dtype=np.uint8)
            if self.kind == "cyclic":
                d = {"ref": ref, "heap": heap}
                d["self"] = d  # dropped here: freed only by a collection
                return i
            self.on_disconnect.append(lambda r=ref: r)
            self.history.append(heap)
            return len(self.history)

    if workload == "cache":
        # examples/ladder/cache_actor.py as it is: a new 4 MiB key a request
        # (a second apart: the leak's rate), the cache dropped on Reclaim,
        # best-effort work refused on Shed.
        from cache_actor import CachingModel
        s = CachingModel.remote(path=pressure_file)
        ray.get(s.cached_mib.remote())
        call, pause = (lambda i: s.predict.remote(f"k{i}")), 1.0
    else:
        s = Session.remote(workload)
        ray.get(s.pid.remote())
        call, pause = (lambda i: s.handle.remote(i)), 0.5
    print("ACTOR", workload, flush=True)
    i = 0
    while True:
        i += 1
        try:
            ray.get(call(i))
        except Exception as e:  # the actor was OOM-killed
            print("ACTOR-DIED", type(e).__name__, flush=True)
            break
        time.sleep(pause)
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
    ap.add_argument("--workload", choices=("leak", "cyclic", "cache"), default="leak",
                    help="leak: references kept (the default); cyclic: garbage in reference cycles that only a "
                         "collection frees; cache: examples/ladder/cache_actor.py, which drops its cache when told")
    ap.add_argument("--ladder-settle-s", type=int, default=None,
                    help="ladder.settleSeconds (default: the test profile's, scaled to its windows; production: 600)")
    ap.add_argument("--ladder-reclaim-horizon-s", type=int, default=None,
                    help="ladder.reclaimHorizonSeconds (default: the test profile's; production: 21600)")
    ap.add_argument("--ladder-shed-horizon-s", type=int, default=None,
                    help="ladder.shedHorizonSeconds (default: the test profile's; production: 10800)")
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
    # Decide as a guard that rotates would, its ladder's times the profile's (scaled to its windows).
    settings = dataclasses.replace(
        settings, dry_run=False, ladder_enabled=True,
        ladder_settle_s=args.ladder_settle_s or settings.ladder_settle_s,
        reclaim_horizon_s=args.ladder_reclaim_horizon_s or settings.reclaim_horizon_s,
        shed_horizon_s=args.ladder_shed_horizon_s or settings.shed_horizon_s)
    limit = int(args.limit_gib * GIB)
    deadline = time.monotonic() + args.max_minutes * 60
    group = MemoryGroup(limit)
    gcs_port, metrics_port, sidecar_port = free_port("127.0.0.1"), free_port("127.0.0.1"), free_port("127.0.0.1")
    env = {**os.environ, **RAY_ENV}
    tmp = tempfile.mkdtemp(prefix="mg-real-leak-")
    print(f"cgroup {group.path} ({'v1' if group.v1 else 'v2'}), limit {args.limit_gib:g} GiB, object store "
          f"{args.store_mib} MiB; workload {args.workload}"
          + ("" if args.workload == "cache" else
             f", per request: {args.heap_mib:g} MiB heap + {args.leak_store_mib:g} MiB Plasma")
          + f"; ladder: reclaim at {settings.reclaim_fraction:.0%} or the OOM within {settings.reclaim_horizon_s} s, "
            f"shed at {settings.shed_fraction:.0%} or within {settings.shed_horizon_s} s, each step judged after "
            f"{settings.ladder_settle_s} s", flush=True)
    samples: list[Sample] = []
    first_rotate: tuple[float, str] | None = None
    policy_alone: float | None = None  # when the policy's own rules first said rotate
    first_memory: tuple[float, str] | None = None  # the first rotation for memory itself, not the store
    oom_at: float | None = None
    ended = "OOM-killed"  # or: stalled at the limit, never killed
    leak_start: float | None = None
    t0 = time.time()
    kept: Evidence | None = None
    ladder: Ladder | None = None
    answers_file = Path(tmp) / "answers.jsonl"
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
                ladder = Ladder(settings, Path(tmp) / "pressure", t0)
                leaker = group.enter_cmd([sys.executable, "-c", LEAKER, f"127.0.0.1:{gcs_port}", str(args.heap_mib),
                                          str(args.leak_store_mib), args.workload, str(ladder.path),
                                          str(answers_file), str(EXAMPLE)])
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
                                if policy_alone is None and d[0].action is Action.ROTATE:
                                    policy_alone = s.time_s  # today's rotation: the policy's rules alone
                                if ladder.due(s.time_s) and first_rotate is None:
                                    move = ladder.climb(d[0], window, s.time_s)
                                    if move.wants_replace and d[0].action is not Action.ROTATE:
                                        # As the operator does: the ladder's last rung asks the
                                        # policy for the rotation, through its gates.
                                        d = decide(settings=settings, window=window, now_s=s.time_s,
                                                   history=RotationHistory(ladder_replace=True))
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
                                  f"{(s.plasma_spilled_bytes or 0) / MIB:.0f} MiB; {ladder.now()}", flush=True)
                        if driver.poll() is not None and group.oom_kills() == kills0:
                            out = driver.stdout.read() if driver.stdout else ""
                            print(f"real-leak: the driver ended before any OOM kill (exit {driver.returncode}):\n"
                                  f"{out[-3000:]}", flush=True)
                            return 1
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
    if ladder is not None:
        print(f"\nthe ladder: {ladder.summary()}")
        answers = [json.loads(ln) for ln in answers_file.read_text().splitlines()] if answers_file.exists() else []
        if answers:  # (the cache actor keeps its own: its what_it_did)
            print("the workload's answers: " + "; ".join(f"{a['t'] - t0:.0f} s {a['step']}: {a['did']} "
                                                         f"({a['took_s']} s)" for a in answers))
    kept_paths = kept.paths if kept is not None else []
    if len(kept_paths) == 2:
        print(f"\nwhat grew between the two artifacts (memoryguard-kuberay forensics --diff "
              f"{kept_paths[0]} {kept_paths[1]}):", flush=True)
        forensics_cli.main(["--diff", str(kept_paths[0]), str(kept_paths[1])])
    elif kept_paths:
        print(f"one artifact kept ({kept_paths[0]}); the second was not taken before the run ended")
    if args.workload != "leak":  # what the ladder can answer without a rotation
        if samples:
            used = [(s.unreclaimable_bytes or 0) / MIB for s in samples]
            print(f"in use over the run: peak {max(used):.0f} MiB, last {used[-1]:.0f} MiB of {limit / MIB:.0f} MiB")
        rotated = "never" if first_rotate is None else f"at {first_rotate[0] - t0:.0f} s ({first_rotate[1][:120]})"
        killed = "no OOM kill" if oom_at is None else f"{ended} at {oom_at - t0:.0f} s"
        print(f"RESULT: {args.workload} workload over {(time.time() - t0) / 60:.1f} minutes: rotated {rotated}; "
              f"{killed}")
        return 0 if first_rotate is None and oom_at is None else 1
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
    if policy_alone is not None:
        print(f"        the policy's rules alone (no ladder): rotate at {policy_alone - t0:.0f} s, lead "
              f"{oom_at - policy_alone:.0f} s")
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


class Ladder:
    """The ladder climbed as the operator climbs it (operator/cycle/
    laddering.py: every ``CLIMB_EVERY_S``, on the policy's decision then),
    each new step written to the pressure file the workload's
    ``on_pressure`` reads, as the kubelet shows the pod's annotation in a
    pod. Keeps what a person wants of the run: each step asked and judged,
    and the time spent at each level."""

    def __init__(self, settings: PolicySettings, path: Path, t0: float) -> None:
        self.settings, self.path, self.t0 = settings, path, t0
        self.step: Step | None = None
        self.said: tuple[object, ...] = ()  # laddering.said_key of what the file says
        self.last_climb: float | None = None
        self.level: tuple[Level, float] | None = None  # the level held, since
        self.time_at: dict[Level, float] = {}
        self.why = "not climbed yet"
        # Each verdict, with what the climbs saw: the creep before and after, memory in use at the step and now.
        self.judgements: list[tuple[Judgement, float | None, float | None, float | None, float | None]] = []
        self.points: list[tuple[float, float]] = []  # memory in use at each climb
        path.write_text("")  # no annotation yet: the downward API file is empty

    def now(self) -> str:
        """The level held and the step in effect, for the run's progress lines."""
        level = self.level[0].value if self.level else "unknown"
        return f"pressure {level}, step {self.step.rung.value if self.step else 'none'} ({self.why})"

    def due(self, now_s: float) -> bool:
        return self.last_climb is None or now_s - self.last_climb >= CLIMB_EVERY_S

    def climb(self, decision: Decision, window: PodWindow, now_s: float) -> Move:
        self.last_climb = now_s
        move = climb(settings=self.settings, step=self.step, decision=decision, window=window, now_s=now_s)
        self.step = move.step
        self.why = move.message
        if decision.evidence.used_bytes is not None:
            self.points.append((now_s, float(decision.evidence.used_bytes)))
        self._held(move.level, now_s)
        asked = asked_of("real-leak", move, decision.evidence.projected_oom_s)
        said = said_key(asked, False)
        if said != self.said:
            self.said = said
            self.path.write_text(asked.to_json())
        if move.judged is not None:
            # The ladder's creep reads five one-minute means on each side of a
            # step: more than a settle time scaled to minutes holds. The same
            # Theil-Sen over this run's climbs, every CLIMB_EVERY_S, says it here.
            since = now_s - move.judged.after_s
            self.judgements.append((move.judged, self._creep(since - self.settings.ladder_settle_s, since),
                                    self._creep(since, now_s + 1), self._used_at(since), self._used_at(now_s)))
        if move.started or move.judged is not None or move.ended:
            print(f"[{now_s - self.t0:6.0f} s] LADDER {move.level.value}: {move.message}", flush=True)
        return move

    def _creep(self, start_s: float, end_s: float) -> float | None:
        pts = [(t, y) for t, y in self.points if start_s <= t < end_s]
        line = theil_sen([t for t, _ in pts], [y for _, y in pts]) if len(pts) >= 3 else None
        return None if line is None else line.slope * 3600.0

    def _used_at(self, t_s: float) -> float | None:
        return next((y for t, y in reversed(self.points) if t <= t_s + 1e-6), None)

    def _held(self, level: Level, now_s: float) -> None:
        if self.level is not None:
            was, since = self.level
            self.time_at[was] = self.time_at.get(was, 0.0) + now_s - since
        self.level = (level, now_s)

    def summary(self) -> str:
        at = ", ".join(f"{lv.value} {self.time_at[lv]:.0f} s" for lv in Level if self.time_at.get(lv))
        steps = "; ".join(f"{j.rung.value} {j.after_s:.0f} s after: {_freed(j.freed_bytes)}, creep "
                          f"{_per_h(j.creep_before_bytes_per_h)} -> {_per_h(j.creep_after_bytes_per_h)} (on the "
                          f"climbs: {_per_h(before)} -> {_per_h(after)}, in use {_mib(at)} -> {_mib(now)}), "
                          f"{j.effect.value}" for j, before, after, at, now in self.judgements)
        return f"time at each level: {at or 'none'}\n        steps judged: {steps or 'none'}"


def _mib(b: float | None) -> str:
    return "unknown" if b is None else f"{b / MIB:.0f} MiB"


def _freed(b: int) -> str:
    return f"freed {b / MIB:.0f} MiB" if b >= 0 else f"grew {-b / MIB:.0f} MiB"


def _per_h(b: float | None) -> str:
    return "unknown" if b is None else f"{b / MIB:+.0f} MiB/h"


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
