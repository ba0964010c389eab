"""``memoryguard-kuberay sidecar``: settings, the sampling loop and the server.

Every flag can also be set as ``MEMORYGUARD_<FLAG>`` (``--ray-metrics-url``
is ``MEMORYGUARD_RAY_METRICS_URL``); a flag beats the variable. SIGTERM and
SIGINT stop the loop and the server cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryguard_kuberay.core import answer, helptext
from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.traces import TraceError, read_trace
from memoryguard_kuberay.sidecar import metrics as sidecar_metrics
from memoryguard_kuberay.sidecar.objectstore import RayMetricsScraper, StoreReading, shm_charged_bytes
from memoryguard_kuberay.sidecar.processes import top_processes
from memoryguard_kuberay.sidecar.procfs import DEFAULT_PATTERN
from memoryguard_kuberay.sidecar.sampler import Sampler
from memoryguard_kuberay.sidecar.server import MAX_CONNECTIONS, Routes, SidecarServer

if TYPE_CHECKING:
    from memoryguard_kuberay.sidecar.replay import ReplayFeed

log = logging.getLogger("memoryguard_kuberay.sidecar")
MAX_RING = 100_000
PAGE_SAMPLES = C.PAGE_SAMPLES


PROCESSES_REUSE_S = 10.0


def _env(name: str, default: Any) -> Any:
    return os.environ.get(C.sidecar_env(name), default)


def _share(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a share from 0 to 1, got {text!r}")
    return share


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay sidecar",
                                description=helptext.summary(__doc__))
    p.add_argument("--listen", default=_env("listen", f"0.0.0.0:{C.SIDECAR_PORT}"), help="HOST:PORT to serve on")
    p.add_argument("--interval", type=float, default=_env("interval", str(5)), help="seconds between samples")
    # Four hours: the policy's trend needs more than two (trendMinSpanSeconds).
    p.add_argument("--window", type=float, default=_env("window", str(14400)),
                   help="seconds of samples kept (default 14400: 4 h, as the docs say)")
    p.add_argument("--cgroup-root", default=_env("cgroup_root", None), help="read this cgroup directory")
    p.add_argument("--proc-root", default=_env("proc_root", "/proc"), help="find the Ray processes here")
    p.add_argument("--ray-process-pattern", default=_env("ray_process_pattern", DEFAULT_PATTERN),
                   help="regex on /proc/<pid>/cmdline that marks the Ray container's processes")
    p.add_argument("--memory-limit-bytes", type=int, default=_env("memory_limit_bytes", None),
                   help="the Ray container's limit (downward API), for the smaps fallback")
    p.add_argument("--ray-metrics-url", default=_env("ray_metrics_url", C.ray_metrics_url()),
                   help="the raylet's Prometheus endpoint ('' to skip the object store)")
    p.add_argument("--ray-metrics-interval", type=float, default=_env("ray_metrics_interval", str(10)),
                   help="minimum seconds between object store scrapes (Ray refreshes about every 10 s)")
    p.add_argument("--shm-path", default=_env("shm_path", "/dev/shm"),
                   help="where Plasma's shared memory is mounted (default /dev/shm)")
    p.add_argument("--process-scope", choices=("pod", "session", "cgroup"), default=_env("process_scope", "pod"),
                   help="which processes /v1/processes lists: every one it sees (pod: in a pod, the pod's), only "
                        "its own session's (session: a simulated pod on a shared machine), or only those in the "
                        "cgroup it reads (cgroup: with --cgroup-root, where /proc shows the host's)")
    p.add_argument("--max-connections", type=int, default=_env("max_connections", str(MAX_CONNECTIONS)),
                   help="open connections at most; past it the longest idle one is closed for a new one")
    p.add_argument("--replay", default=_env("replay", None), metavar="TRACE.csv",
                   help="serve a recorded trace as if live instead of reading memory")
    p.add_argument("--speed", type=float, default=_env("speed", str(1)), help="replay time scale")
    p.add_argument("--epoch", type=float, default=_env("epoch", None),
                   help="replay: unix time at which the accelerated clock equals the wall clock (default: now)")
    p.add_argument("--start", type=float, default=_env("start", None),
                   help="replay: time on that clock at which the trace begins (default: the clock's now)")
    p.add_argument("--clock-file", default=_env("clock_file", None), metavar="PATH",
                   help="replay: the clock is the time written in this file (the demo's world moves it on when "
                        "everyone has caught up), not the wall's")
    p.add_argument("--replay-pressure-file", default=_env("replay_pressure_file", None), metavar="PATH",
                   help="replay: the pod's pressure file (what the ladder asks, as the kubelet shows it); a step "
                        "read there frees its share below")
    p.add_argument("--replay-reclaim", type=_share, default=_env("replay_reclaim", "0"), metavar="SHARE",
                   help="replay: the share (0-1) of what the pod gained since its start a Reclaim frees "
                        "(simulate --step-effects' reclaim; default 0)")
    p.add_argument("--replay-shed", type=_share, default=_env("replay_shed", "0"), metavar="SHARE",
                   help="replay: likewise for a Shed (default 0)")
    p.add_argument("--pod-uid", default=_env("pod_uid", ""),
                   help="this pod's uid (downward API), sent with the samples so the operator can tell an "
                        "answer from a pod that took over the IP")
    p.add_argument("--pod-name", default=_env("pod_name", ""), help="this pod's name (downward API), likewise")
    p.add_argument("--log-level", default=_env("log_level", "INFO"), type=helptext.log_level,
                   help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    a = p.parse_args(list(argv))
    host, sep, port = a.listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        p.error(f"--listen must be HOST:PORT, got {a.listen!r}")
    a.host, a.port = host.strip("[]") or "0.0.0.0", int(port)
    if a.interval <= 0 or a.window <= 0 or a.speed <= 0:
        p.error("--interval, --window and --speed must be positive")
    return a


class Sidecar(Routes, sidecar_metrics.StateView):
    """The running sidecar: its ring buffer, sources and counters."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ring: collections.deque[Sample] = collections.deque(maxlen=MAX_RING)
        self.taken = 0
        self._processes: tuple[float, dict[str, Any]] | None = None  # (monotonic time, the last scan)
        self._scanning = False
        self.loop_errors = 0
        self.last_loop_wall: float | None = None
        self.logged_source: str | None = None  # the memory source last logged
        self.store = StoreReading()
        self.scraper = (RayMetricsScraper(args.ray_metrics_url, min_interval_s=args.ray_metrics_interval)
                        if args.ray_metrics_url and not args.replay else None)
        self.sampler = Sampler(cgroup_root=args.cgroup_root, proc_root=args.proc_root,
                               pattern=args.ray_process_pattern, limit_bytes=args.memory_limit_bytes)
        self.feed: ReplayFeed | None = None
        if args.replay:
            # Only a replay loads the policy's modules (what a step frees): the
            # sidecar in a pod starts without them (in the cgroup v2 guest,
            # under load, those imports cost a case its sidecar's start).
            from memoryguard_kuberay.core.simulate import StepEffects
            from memoryguard_kuberay.sidecar.replay import ReplayFeed

            trace = read_trace(args.replay)
            epoch = float(args.epoch) if args.epoch is not None else time.time()
            self.feed = ReplayFeed(trace.samples, speed=args.speed, epoch_s=epoch,
                                   effects=StepEffects(reclaim=args.replay_reclaim, shed=args.replay_shed),
                                   pressure_file=Path(args.replay_pressure_file) if args.replay_pressure_file
                                   else None, clock_file=Path(args.clock_file) if args.clock_file else None)
            # Default: the trace begins now, on the shared clock.
            self.feed.start_s = float(args.start) if args.start is not None else self.feed.clock(time.time())

    # -- sampling -------------------------------------------------------
    def add(self, sample: Sample) -> None:
        self.ring.append(sample)
        self.taken += 1
        horizon = sample.time_s - self.args.window
        while self.ring and self.ring[0].time_s < horizon:
            self.ring.popleft()

    def sample_once(self, now_s: float) -> None:
        if self.feed is not None:
            for s in self.feed.due(now_s):
                self.add(s)
        else:
            self.add(self.sampler.take(now_s, self.store))
            self.note_source()
        self.last_loop_wall = now_s

    def note_source(self) -> None:
        """Log when the memory source is found, changes or is lost: a sidecar
        that reads nothing must say so, not look healthy."""
        name = self.sampler.source_name
        if name == self.logged_source:
            return
        if name == answer.SOURCE_NONE:
            log.warning("memory source lost%s: no cgroup and no Ray process to read; samples carry no memory",
                        f" (was {self.logged_source})" if self.logged_source else "")
        else:
            log.info("memory source found: %s", name)
        self.logged_source = name

    async def run(self, stop: asyncio.Event) -> None:
        loop_interval = self.args.interval if self.feed is None else min(self.args.interval, 15.0 / self.args.speed)
        scraping: asyncio.Future[StoreReading] | None = None
        while not stop.is_set():
            now = time.time()
            if self.scraper is not None:
                # The store is scraped beside the loop, never in its way: the
                # cgroup's samples must not wait on a slow Ray endpoint (a
                # scrape ends within its deadline; one at a time).
                if (scraping is None or scraping.done()) and self.scraper.due(now):
                    scraping = asyncio.ensure_future(asyncio.to_thread(self.scraper.scrape, now))
                self.store = self.scraper.last
            try:
                self.sample_once(time.time())
            except Exception:  # the loop must never die; the error is counted and logged
                self.loop_errors += 1
                log.exception("sampling failed")
            delay = max(0.05, loop_interval - (time.time() - now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    # -- Routes ---------------------------------------------------------
    def samples_since(self, since: float | None) -> dict[str, Any]:
        """The oldest ``PAGE_SAMPLES`` samples after ``since``, and ``more``
        when there are others after them: an answer stays far below what
        the operator accepts (its cap is C.OPERATOR_MAX_SAMPLES samples, 512 KiB), and the
        operator asks again from the last one."""
        if self.feed is not None and self.feed.clock_file is not None:
            # On the demo's shared clock an answer is never behind it: the
            # world moves the time on while this loop may not have run.
            with contextlib.suppress(OSError, ValueError):
                self.sample_once(time.time())
        page: list[dict[str, Any]] = []
        more = False
        for s in self.ring:
            if since is not None and s.time_s <= since:
                continue
            if len(page) == PAGE_SAMPLES:
                more = True
                break
            page.append(s.to_wire())
        return answer.envelope(page, source=self.source_name(), more=more, pod_uid=self.args.pod_uid,
                               pod_name=self.args.pod_name)

    async def processes(self) -> dict[str, Any] | None:
        """The Ray container's processes by memory, scanned in a thread (it
        reads a file per process). One scan at a time; an answer younger
        than PROCESSES_REUSE_S is given again, so whoever can reach the port
        cannot make the sidecar walk /proc in a loop."""
        now = time.monotonic()
        if self._processes is not None and now - self._processes[0] < PROCESSES_REUSE_S:
            return self._processes[1]
        if self._scanning:
            return None
        self._scanning = True
        try:
            session = os.getsid(0) if self.args.process_scope == "session" else None
            doc = await asyncio.to_thread(top_processes, proc_root=self.args.proc_root, session=session,
                                          cgroup=self.scope_cgroup())
        finally:
            self._scanning = False
        doc = {"time": time.time(), **doc}
        self._processes = (time.monotonic(), doc)
        return doc

    def scope_cgroup(self) -> str | None:
        """With --process-scope cgroup: the path in its hierarchy of the
        cgroup read (``--cgroup-root`` below /sys/fs/cgroup[/memory])."""
        if self.args.process_scope != "cgroup" or not self.args.cgroup_root:
            return None
        root = os.path.realpath(self.args.cgroup_root)
        for mount in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
            if root == mount or root.startswith(mount + "/"):
                return root[len(mount):] or "/"
        return "/"

    def metrics(self) -> bytes:
        return sidecar_metrics.render(self)

    def healthy(self) -> tuple[bool, str]:
        if self.last_loop_wall is None:
            return False, "no sample yet"
        age = time.time() - self.last_loop_wall
        if age > 3 * self.args.interval + 5:
            return False, f"sampling loop stalled ({age:.0f} s)"
        if self.source_name() == answer.SOURCE_NONE:
            # Alive (a restart would not help), but blind: say so.
            return True, "degraded: no memory source (no cgroup and no Ray process found)"
        return True, "ok"

    # -- StateView ------------------------------------------------------
    def last_sample(self) -> Sample | None:
        return self.ring[-1] if self.ring else None

    def shm_charged_bytes(self) -> int | None:
        return None if self.feed else shm_charged_bytes(self.args.shm_path)

    def scrape_success(self) -> dict[str, bool]:
        last = self.last_sample()
        out = {"memory": last is not None and last.memory_current_bytes is not None}
        if self.scraper is not None:
            out["ray"] = self.store.used_bytes is not None
        return out

    def read_errors(self) -> dict[str, int]:
        errs = self.sampler.errors()
        errs["sampling_loop"] = self.loop_errors
        if self.scraper is not None:
            errs["ray_metrics"] = self.scraper.errors
        return errs

    def samples_taken(self) -> int:
        return self.taken

    def source_name(self) -> str:
        return f"replay:{os.path.basename(self.args.replay)}" if self.feed else self.sampler.source_name


async def serve(args: argparse.Namespace) -> int:
    sidecar = Sidecar(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = SidecarServer(sidecar, max_connections=args.max_connections)
    await server.start(args.host, args.port)
    log.info("serving on %s:%d, source %s", args.host, args.port,
             sidecar.source_name())
    try:
        await sidecar.run(stop)
    finally:
        await server.close()
    log.info("stopped")
    return 0


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(serve(args))
    except TraceError as exc:
        print(f"memoryguard-kuberay sidecar: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"memoryguard-kuberay sidecar: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
