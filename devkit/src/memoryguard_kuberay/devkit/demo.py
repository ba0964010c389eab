"""``memoryguard-kuberay demo`` / ``make demo``: the whole system saving a leaking
cluster, on a laptop, in about a minute and a half.

Real: the operator process, one sidecar process per pod (replaying recorded
behaviour at its own loopback address), the policy. Emulated: the Kubernetes
API server and KubeRay (the devkit's ``emulator`` package), which the screen says. The clock
runs ``--speed`` times faster for everyone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from memoryguard_kuberay.core import commands, helptext
from memoryguard_kuberay.core.plot import LIMIT_LABEL, mark, save_grid
from memoryguard_kuberay.core.traces import read_labels, read_trace
from memoryguard_kuberay.operator import forensics, forensics_cli, topview

from .emulator.world import SIDECAR_PORT, World, world

# Worker n of the cluster replays CAST[n % len(CAST)]; replacements are healthy.
CAST = ["leak_steady", "plasma_never_released", "healthy_gc_sawtooth", "healthy_batch_spikes",
        "fragmentation_flattens", "leak_after_hours", "healthy_model_warmup", "healthy_cache_fill"]
REPLACEMENT = "healthy_gc_sawtooth"
GIB = 1024**3


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay demo", description=helptext.summary(__doc__))
    p.add_argument("--speed", type=float, default=900.0, help="how much faster than real time (default 900)")
    p.add_argument("--workers", type=int, default=5, help="worker pods in the RayCluster (default 5)")
    p.add_argument("--json", action="store_true", help="no live view; print the summary as one JSON document")
    p.add_argument("--plot", default="demo.png", metavar="OUT.png", help="timeline of every worker ('' for none)")
    a = p.parse_args(argv)
    if not 1 <= a.workers <= 40 or not 60 <= a.speed <= 5000:
        p.error("--workers must be 1-40 and --speed 60-5000")
    return a


class DemoFailed(RuntimeError):
    """The demo could not show what it is for; the message says why."""


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.labels = read_labels(commands.examples_dir() / "labels.json")
        self.assigned: dict[str, str] = {}  # pod name -> trace name
        self.log: list[str] = []
        self.seen_events: set[str] = set()
        self.evidence = ""  # the latest forensics artifact, printed readably

    def trace_for(self, pod: dict[str, Any]) -> Path:
        name = pod["metadata"]["name"]
        if pod["metadata"]["labels"].get("ray.io/node-type") == "head":
            trace = "healthy_gc_sawtooth"
        else:
            n = sum(1 for p in self.assigned if "-head-" not in p)
            trace = CAST[n % len(CAST)] if n < self.args.workers else REPLACEMENT
        self.assigned[name] = trace
        return commands.examples_dir() / f"{trace}.csv"

    def end_of_story(self) -> float:
        """Trace seconds after which every leak's fate is known."""
        deadlines = []
        for i in range(self.args.workers):
            lab = self.labels[CAST[i % len(CAST)]]
            d = lab.get("oom_at_s") or lab.get("plasma_full_at_s")
            if d:
                deadlines.append(float(d))
        return (max(deadlines) if deadlines else 6 * 3600.0) + 1800.0

    # -- what the user sees ---------------------------------------------------------
    def collect_events(self, w: World) -> None:
        for e in sorted(w.events(), key=lambda e: int(e["metadata"]["resourceVersion"])):
            uid = e["metadata"]["name"]
            if uid in self.seen_events:
                continue
            self.seen_events.add(uid)
            t = w.clock() - w.epoch
            line = f"[{t / 3600:5.1f} h] {e['reason']}: {e['message']}"
            self.log.append(line)
            if not self.args.json and not sys.stdout.isatty():
                print(line[:200], flush=True)

    def screen(self, w: World, story_end: float) -> RenderableType:
        """``memoryguard-kuberay top``'s view of the demo's guard (the same
        code), under a banner saying what is real, then the latest actions."""
        g = w.api.get("memoryguards", "default", "demo-guard") or {}
        t = w.clock() - w.epoch
        banner = ("MemoryGuard demo: the operator, the sidecars and the policy are real; the Kubernetes API server "
                  "and KubeRay are emulated (the devkit's emulator). Clock: "
                  f"{self.args.speed:.0f}x, {t / 3600:.1f} h of {story_end / 3600:.1f} h simulated.")
        log = "\n".join(f"  {line[:150]}" for line in self.log[-10:])
        return Group(Text(banner), topview.screen([g] if g else [], title="guarded workers, nearest harm first"),
                     Text("\nEvents:\n" + (log or "  none yet")))

    # -- the run ---------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        a = self.args
        started = time.monotonic()
        story_end = self.end_of_story()
        with tempfile.TemporaryDirectory(prefix="memoryguard-demo-") as tmp:
            async with world(Path(tmp), self.trace_for, speed=a.speed) as w:
                w.api.put("rayclusters", cluster(a.workers))
                w.api.put("memoryguards", guard())
                await w.start_operator()
                tty = sys.stdout.isatty() and not a.json
                with Live(console=Console(), auto_refresh=False, screen=True) if tty else contextlib.nullcontext() \
                        as live:
                    while w.clock() - w.epoch < story_end:
                        self.refuse_pods_that_cannot_serve(w)
                        self.collect_events(w)
                        if live is not None:
                            live.update(self.screen(w, story_end), refresh=True)
                        await asyncio.sleep(0.5)
                self.collect_events(w)
                summary = self.summarize(w, time.monotonic() - started)
                self.evidence = self.latest_evidence(w)
                if a.plot:
                    self.plot(w, a.plot)
            return summary

    @staticmethod
    def refuse_pods_that_cannot_serve(w: World) -> None:
        """A pod whose sidecar never answered (its address taken, say) would
        make a demo that catches nothing and looks fine: stop it, saying why."""
        failed = [p["metadata"]["name"] for p in w.pods() if (p.get("status") or {}).get("phase") == "Failed"]
        if failed:
            name = failed[0]
            log = (w.workdir / f"sidecar-{name}.log")
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise DemoFailed(f"{len(failed)} pod(s) could not serve their samples ({', '.join(failed[:3])}); "
                             f"{name}'s sidecar said: {' / '.join(tail) or 'nothing'}")

    def latest_evidence(self, w: World) -> str:
        """The evidence the operator kept before its latest rotation, as
        ``memoryguard-kuberay forensics`` prints it."""
        kept = forensics_cli.newest_first(w.api.objects("configmaps", "default"))
        if not kept:
            return ""
        out = io.StringIO()
        forensics_cli.render(json.loads(kept[0]["data"][forensics.DATA_KEY]), configmap=kept[0]["metadata"]["name"],
                             out=out)
        return out.getvalue()

    def summarize(self, w: World, duration: float) -> dict[str, Any]:
        initial = [n for n in self.assigned if "-head-" not in n][: self.args.workers]
        leaking = {n for n in initial if self.labels[self.assigned[n]]["kind"] != "healthy"}
        caught, false_rotations, leads = 0, 0, []
        for _, pod, wall in w.api.evictions:
            trace = self.assigned.get(pod)
            if trace is None:
                continue
            lab = self.labels[trace]
            at = w.clock(wall) - w.sidecars[pod].start_clock
            if lab["kind"] == "healthy":
                false_rotations += 1
            elif lab["kind"] == "leak" and at <= lab["oom_at_s"] - 600:
                caught += 1
                leads.append(lab["oom_at_s"] - at)
            elif lab["kind"] == "plasma_leak" and at <= lab["plasma_full_at_s"]:
                caught += 1
                leads.append(lab["plasma_full_at_s"] - at)
        rotated = len(w.events("WorkerRotated"))
        return {"workers": self.args.workers, "leaks": len(leaking), "caught": caught,
                "rotations": len(w.api.evictions), "false_rotations": false_rotations,
                "remediations": len(w.events("RemediationApplied")), "duration_s": round(duration, 1),
                "replaced": rotated, "min_lead_h": round(min(leads) / 3600, 2) if leads else None,
                "plain_deletes": len([d for d in w.api.deletes if d[0] == "pods"])}

    def plot(self, w: World, out: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [n for n in self.assigned if "-head-" not in n]
        fig, axes = plt.subplots(len(names), 1, figsize=(10, 1.9 * len(names)), squeeze=False, sharex=True)
        evicted = {pod: wall for _, pod, wall in w.api.evictions}
        # Remediations change the group's template: marked on every panel, at
        # the operator's clock time of their Event.
        remedied = [((w.clock(_wall(e["firstTimestamp"])) - w.epoch) / 3600, e["message"].split(":", 1)[0][:40])
                    for e in w.events("RemediationApplied")]
        for ax, name in zip(axes[:, 0], names):
            sc = w.sidecars.get(name)
            if sc is None:
                continue
            trace = read_trace(commands.examples_dir() / f"{self.assigned[name]}.csv")
            offset = sc.start_clock - w.epoch
            end = (w.clock(evicted[name]) if name in evicted else w.clock()) - sc.start_clock
            rows = [s for s in trace.samples if s.time_s <= end]
            ts = [(offset + s.time_s) / 3600 for s in rows]
            ax.plot(ts, [(s.working_set_bytes or 0) / GIB for s in rows], lw=0.8, label="working set")
            ax.plot(ts, [(s.memory_max_bytes or 0) / GIB for s in rows], "k--", lw=0.8, label=LIMIT_LABEL)
            ax.plot(ts, [(s.plasma_used_bytes or 0) / GIB for s in rows], lw=0.8, color="tab:green",
                    label="object store")
            if name in evicted:
                mark(ax, (w.clock(evicted[name]) - w.epoch) / 3600, "rotate", "rotated")
            for t, what in remedied:
                mark(ax, t, "remediate", what)
            ax.set_title(f"{name}: {self.assigned[name]}", fontsize=8, loc="left")
            ax.set_ylabel("GiB", fontsize=7)
            ax.tick_params(labelsize=7)
        save_grid(fig, axes, out, xlabel="hours (simulated)", dpi=80)


def _wall(iso: str) -> float:
    """An Event's timestamp (whole seconds, UTC) as unix seconds."""
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


def cluster(workers: int) -> dict[str, Any]:
    def c(name: str, mem: str) -> dict[str, Any]:
        return {"name": name, "image": "rayproject/ray:2.52.0",
                "resources": {"limits": {"cpu": "4", "memory": mem}, "requests": {"cpu": "4", "memory": mem}}}

    return {"metadata": {"name": "demo-cluster", "namespace": "default"}, "spec": {
        "rayVersion": "2.52.0",
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [c("ray-head", "32Gi")]}}},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": workers, "minReplicas": 1, "maxReplicas": 40,
                              "rayStartParams": {}, "template": {"spec": {"containers": [c("ray-worker", "64Gi")]}}}]}}


def guard() -> dict[str, Any]:
    return {"metadata": {"name": "demo-guard", "namespace": "default"}, "spec": {
        "clusterSelector": {"names": ["demo-cluster"]},
        "sampling": {"intervalSeconds": 300, "sidecarPort": SIDECAR_PORT, "timeoutSeconds": 2},
        "policy": {"staleAfterSeconds": 1800},
        "rotation": {"maxUnavailable": 1, "cooldownSeconds": 600, "replacementTimeoutSeconds": 3600},
        "remediation": {"jemalloc": {"mode": "auto"}, "spilling": {"mode": "auto"}}}}


def main(argv: list[str]) -> int:
    args = parse(argv)
    demo = Demo(args)
    try:
        summary = asyncio.run(demo.run())
    except KeyboardInterrupt:
        print("\ndemo interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    except DemoFailed as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 1
    missed = summary["leaks"] - summary["caught"]
    if args.json:
        print(json.dumps(summary))
        return 1 if missed else 0
    print("\n".join(demo.log))
    print(f"\nsummary: {summary['workers']} workers, {summary['leaks']} leaking: {summary['caught']} caught before "
          f"their OOM (min lead {'-' if summary['min_lead_h'] is None else str(summary['min_lead_h']) + ' h'}), "
          f"{summary['rotations']} rotation(s), "
          f"{summary['false_rotations']} false, {summary['replaced']} replaced, {summary['remediations']} "
          f"remediation(s) applied, {summary['duration_s']:.0f} s")
    if args.plot:
        print(f"timeline: {args.plot}")
    if demo.evidence:
        print("\nthe evidence kept before the latest rotation (memoryguard-kuberay forensics POD):")
        print(demo.evidence, end="")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    if missed:
        print(f"demo failed: {missed} of {summary['leaks']} leaking worker(s) were not caught before their OOM",
              file=sys.stderr)
        return 1
    return 0
