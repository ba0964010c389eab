"""The test world: the emulated API on loopback, the KubeRay stand-in, real
sidecar processes replaying traces at each pod's own loopback IP, and the
real operator as a process (``memoryguard-kuberay operator``) talking to the
emulated API through a kubeconfig, on an accelerated clock shared with the
sidecars. Only the API server and KubeRay are stand-ins.

The clock runs on the wall, ``speed`` times faster, or (``lockstep``, the
demo) it is a time the world writes to a file (core/sharedclock.py) and
moves on at ``speed`` at most, never while the operator is in a cycle or
KubeRay's stand-in is making or ending pods, and never past the time the
operator next has work: every run then tells the same story, however busy
the machine (issue 61, 1)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import sharedclock
from memoryguard_kuberay.core.simulate import NO_EFFECTS, StepEffects

from .api import EmulatedApi
from .kuberay import KubeRayStandIn
from .server import EmulatorServer
from .sidecar_faults import SidecarProxy

BIN = Path(sys.executable).parent
SIDECAR_PORT = 19108
TICK_S = 0.02  # how often a lockstep world looks whether it may move its clock on
# A lockstep world held this long by one process moves on all the same (and
# counts it): a stuck process must not stop the story for ever.
HOLD_LIMIT_S = 30.0
log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def load_crds(api: EmulatedApi, kuberay_crd: Path | None = None) -> None:
    """The MemoryGuard CRD (made by the operator's own generator) and the
    RayCluster kind: with KubeRay's CRD file when given (its schema is then
    enforced, as on a real server), else the same kind without a schema
    (KubeRay's files are not shipped with MemoryGuard)."""
    from memoryguard_kuberay.operator import crd

    if kuberay_crd is not None:
        api.add_crd(yaml.safe_load(kuberay_crd.read_text()))
    else:
        from .wire import Kind

        api.add_kind(Kind("ray.io", "v1", "rayclusters", "RayCluster", status_subresource=True))
    api.add_crd(crd.crd())


class SidecarProcess:
    """A real ``memoryguard-kuberay sidecar --replay`` at the pod's IP."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, start_clock: float, trace: Path) -> None:
        self.proc, self.url, self.start_clock, self.trace = proc, url, start_clock, trace

    async def ready(self) -> bool:
        for _ in range(100):
            if self.proc.returncode is not None:
                return False
            try:
                ok = await asyncio.to_thread(_get_ok, self.url + C.PATH_HEALTHZ)
            except OSError:
                ok = False
            if ok:
                return True
            await asyncio.sleep(0.1)
        return False

    def exited(self) -> bool:
        return self.proc.returncode is not None

    def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)


def _get_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as r:
        return bool(r.status == 200)


@dataclasses.dataclass
class World:
    api: EmulatedApi
    server_url: str
    kubeconfig: Path
    kuberay: KubeRayStandIn
    speed: float
    epoch: float
    workdir: Path
    trace_for: Callable[[dict[str, Any]], Any]  # pod -> trace path, or (trace path, seconds already lived)
    sidecars: dict[str, SidecarProcess] = dataclasses.field(default_factory=dict)  # pod name -> process
    operators: list[asyncio.subprocess.Process] = dataclasses.field(default_factory=list)
    metrics_port: int = 0
    proxied: bool = False  # a SidecarProxy (fault injection) in front of each sidecar
    proxies: dict[str, SidecarProxy] = dataclasses.field(default_factory=dict)  # pod name -> proxy
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)  # figures a scenario measured itself
    # pod -> what its workload frees when the ladder asks (its replay reads the
    # pod's pressure file, which show_pressure keeps as the kubelet would).
    effects_for: Callable[[dict[str, Any]], StepEffects] = lambda pod: NO_EFFECTS
    pressure_files: dict[str, Path] = dataclasses.field(default_factory=dict)  # pod name -> its pressure file
    time_file: Path | None = None  # lockstep: the shared time (core/sharedclock.py), which this world moves on
    moves: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # lockstep: (wall, time) each move
    wake_files: dict[int, Path] = dataclasses.field(default_factory=dict)  # lockstep: operator pid -> its wake file
    forced: int = 0  # lockstep: times the clock moved on past a process that held it HOLD_LIMIT_S
    ceiling: float = float("inf")  # lockstep: the clock waits here until whoever drives the world moves it
    event_times: dict[str, float] = dataclasses.field(default_factory=dict)  # Event name -> the clock when posted

    def clock(self, wall: float | None = None) -> float:
        """The time now, or at the wall time ``wall`` (an eviction's, an Event's)."""
        if self.time_file is None:
            return self.epoch + ((time.time() if wall is None else wall) - self.epoch) * self.speed
        if wall is None:
            return self.moves[-1][1]
        i = bisect.bisect_right(self.moves, (wall, float("inf")))
        return self.moves[max(0, i - 1)][1]

    def reached_speed(self) -> float:
        """Lockstep: how much faster than the wall the clock went, on average."""
        (w0, t0), (w1, t1) = self.moves[0], self.moves[-1]
        return (t1 - t0) / (w1 - w0) if w1 > w0 else 0.0

    def move_time(self, t: float) -> None:
        assert self.time_file is not None
        sharedclock.write_time(self.time_file, t)
        self.moves.append((time.time(), t))

    def may_move_to(self) -> float | None:
        """Lockstep: how far the clock may go now; None while someone is busy."""
        if self.kuberay.tasks or self.api.changed.is_set():
            return None  # pods being made, started or ended; or a change KubeRay has not seen yet
        alive = [proc for proc in self.operators if proc.returncode is None]
        if not alive:
            # Before the operator is up the world waits for it; after it
            # ended (a crash) nothing can catch up any more.
            return None if not self.operators else float("inf")
        wakes = [sharedclock.read_wake(self.wake_files[proc.pid]) for proc in alive]
        return None if None in wakes else min(w for w in wakes if w is not None)

    async def keep_time(self, stop: asyncio.Event) -> None:
        """Lockstep: move the clock on, at ``speed`` at most, as far as every
        process has caught up."""
        last = held = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            step, last = (now - last) * self.speed, now
            t = self.clock()
            if t >= self.ceiling:
                held = now  # the world's driver holds it, not a process
                continue
            limit = self.may_move_to()
            if limit is None or limit <= t:
                if now - held < HOLD_LIMIT_S:
                    continue
                self.forced += 1
                log.warning("the clock held %.0f s at %.0f s: moved on all the same", now - held, t - self.epoch)
                limit = float("inf")
            held = now
            self.move_time(min(t + step, limit, self.ceiling))

    async def start_pod(self, pod: dict[str, Any]) -> SidecarProcess:
        ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
        chosen = self.trace_for(pod)
        # A trace, or (trace, seconds of it already lived): the sidecar then
        # starts with that much history in its buffer, as after a long run.
        trace, lived = chosen if isinstance(chosen, tuple) else (chosen, 0.0)
        start = self.clock() - lived
        port = SIDECAR_PORT + 1 if self.proxied else SIDECAR_PORT
        log = open(self.workdir / f"sidecar-{name}.log", "wb")  # noqa: SIM115
        effects = self.effects_for(pod)
        answering: list[str] = []
        if effects != NO_EFFECTS:
            self.pressure_files[name] = self.workdir / f"pressure-{name}"
            answering = ["--replay-pressure-file", str(self.pressure_files[name]),
                         "--replay-reclaim", str(effects.reclaim), "--replay-shed", str(effects.shed)]
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{ip}:{port}", "--replay", str(trace),
            "--speed", str(self.speed), "--epoch", str(self.epoch), "--start", str(start),
            "--interval", "1", "--window", "21600", "--pod-uid", pod["metadata"]["uid"], "--pod-name", name,
            # A pod of its own: its evidence lists its session's processes, never this machine's others.
            "--process-scope", "session", *answering,
            *(["--clock-file", str(self.time_file)] if self.time_file else []),
            stdout=log, stderr=log, start_new_session=True)
        sc = SidecarProcess(proc, f"http://{ip}:{port}", start, Path(trace))
        self.sidecars[name] = sc
        if self.proxied:
            proxy = SidecarProxy(ip, SIDECAR_PORT, port, self.clock)
            await proxy.start()
            self.proxies[name] = proxy
        return sc

    def show_pressure(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        """The kubelet's part: a pod's ``memoryguard.io/pressure`` annotation
        as the file its containers read (the downward API volume). The real
        kubelet refreshes it within about a minute; here it is written at
        once, a minute being hours of the accelerated clock."""
        name = obj["metadata"]["name"]
        path = self.pressure_files.get(name)
        if plural != "pods" or path is None or event not in ("ADDED", "MODIFIED"):
            return
        value = (obj["metadata"].get("annotations") or {}).get(C.ANN_PRESSURE, "")
        part = path.with_suffix(".part")
        part.write_text(value, encoding="utf-8")
        os.replace(part, path)  # whole, as the kubelet's atomic writer swaps it

    def note_event(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        """When each Event was posted, on this world's clock (an Event's own
        timestamps are the wall's, to the second: a quarter of an hour at 900x)."""
        if plural == "events" and event == "ADDED":
            self.event_times.setdefault(obj["metadata"]["name"], self.clock())

    async def start_operator(self, *, extra_env: dict[str, str] | None = None,
                             shards: int = 0) -> asyncio.subprocess.Process:
        """The real operator as a process; ``shards``: one of several
        replicas sharing that many shards on Leases default/memoryguard-operator-shard-<i>."""
        self.metrics_port = free_port("127.0.0.1")
        shared: dict[str, str] = {}
        wake = self.workdir / f"wake-operator-{len(self.operators)}"
        if self.time_file is not None:
            shared = {"MEMORYGUARD_CLOCK_FILE": str(self.time_file), "MEMORYGUARD_CLOCK_WAKE_FILE": str(wake)}
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "MEMORYGUARD_TIME_SCALE": str(self.speed),
               "MEMORYGUARD_EPOCH": str(self.epoch), "MEMORYGUARD_METRICS_HOST": "127.0.0.1",
               "MEMORYGUARD_METRICS_PORT": str(self.metrics_port), "MEMORYGUARD_DRAIN": "false",
               "MEMORYGUARD_WATCH_TIMEOUT_SECONDS": "60", **shared, **(extra_env or {})}
        log = open(self.workdir / f"operator-{len(self.operators)}.log", "wb")  # noqa: SIM115
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "memoryguard-kuberay"), "operator", "--standalone", "-n", "default",
            *([f"--shards={shards}", "--lease-namespace", "default"] if shards else []), stdout=log, stderr=log,
            env=env)
        self.wake_files[proc.pid] = wake
        self.operators.append(proc)
        return proc

    async def stop_operator(self, proc: asyncio.subprocess.Process, *, kill: bool = False) -> None:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    def operator_log(self) -> str:
        return "\n".join((self.workdir / f"operator-{i}.log").read_text(errors="replace")
                         for i in range(len(self.operators)))

    def events(self, reason: str | None = None, *, kind: str = "MemoryGuard") -> list[dict[str, Any]]:
        """Events of ``reason`` posted on objects of ``kind`` (by default the
        guard's own record; rotation Events also go on the pod)."""
        return [e for e in self.api.objects("events") if (reason is None or e.get("reason") == reason)
                and e["involvedObject"].get("kind") == kind]

    def guard_status(self, name: str = "leak-guard") -> dict[str, Any]:
        """The guard's status as the API holds it ({} before the first write)."""
        return (self.api.get("memoryguards", "default", name) or {}).get("status") or {}

    def pods(self, group: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self.api.objects("pods", "default")
                if group is None or p["metadata"]["labels"].get(C.LABEL_GROUP) == group]

    async def wait_for(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}\n--- operator log ---\n"
                             f"{self.operator_log()[-6000:]}")


def write_kubeconfig(path: Path, server_url: str) -> Path:
    """A kubeconfig for the emulated API at ``server_url`` (any token passes),
    for an operator run as a process: the worlds', the benchmarks'."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server_url}}],
        "users": [{"name": "emulator", "user": {"token": "emulated"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator",
                                                      "namespace": "default"}}]}))
    return path


@contextlib.asynccontextmanager
async def world(workdir: Path, trace_for: Callable[[dict[str, Any]], Any], *, speed: float = 600.0,
                replace_delay_s: float | None = 0.3, proxied: bool = False,
                kuberay_crd: Path | None = None, lockstep: bool = False) -> AsyncIterator[World]:
    api = EmulatedApi()
    load_crds(api, kuberay_crd)
    api.put("namespaces", {"metadata": {"name": "default"}})
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}"
        kubeconfig = write_kubeconfig(workdir / "kubeconfig", url)
        # Lockstep: the story starts on the hour, so that every run's cycles
        # fall at the same times of it.
        epoch = time.time() // 3600 * 3600 if lockstep else time.time()
        w = World(api=api, server_url=url, kubeconfig=kubeconfig, kuberay=None, speed=speed,  # type: ignore[arg-type]
                  epoch=epoch, workdir=workdir, trace_for=trace_for, proxied=proxied)
        if lockstep:
            w.time_file = workdir / "time"
            w.move_time(epoch)
        w.kuberay = KubeRayStandIn(api, w.start_pod, replace_delay_s=replace_delay_s)
        api.observers.append(w.show_pressure)
        api.observers.append(w.note_event)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.kuberay.run(stop))]
        if lockstep:
            tasks.append(asyncio.create_task(w.keep_time(stop)))
        try:
            yield w
        finally:
            for op in w.operators:
                await w.stop_operator(op)
            stop.set()
            await asyncio.gather(*tasks)
            for proxy in w.proxies.values():
                await proxy.close()
            for sc in w.sidecars.values():
                sc.stop()
            for sc in w.sidecars.values():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sc.proc.wait(), 10)
                if sc.proc.returncode is None:
                    sc.proc.kill()
                    await sc.proc.wait()
