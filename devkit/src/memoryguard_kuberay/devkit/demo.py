"""``memoryguard-kuberay demo`` / ``make demo``: the whole system saving a leaking
cluster, on a laptop, in about a minute and a half.

Real: the operator process, one sidecar process per pod (replaying recorded
behaviour at its own loopback address), the policy. Emulated: the Kubernetes
API server and KubeRay (the devkit's ``emulator`` package), which the screen says. The clock
runs ``--speed`` times faster for everyone.

The ``ladder`` group shows the graded response (issue 41): three workers
replay the same leak, told apart by what answering the ladder frees (the
replay frees it as ``simulate --step-effects`` says, read from the pod's
pressure file as the kubelet shows it): garbage Ray's global GC frees whole
on a reclaim, a cache the workload drops on a reclaim (most of it), and a
true leak nothing frees, which climbs every rung and is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from memoryguard_kuberay.core import answer, commands, heatmap, helptext, specfields
from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import NO_EFFECTS, StepEffects
from memoryguard_kuberay.core.traces import read_labels
from memoryguard_kuberay.operator.cli import topview
from memoryguard_kuberay.operator.rayclusters import patches

from . import demoreport
from .emulator.world import SIDECAR_PORT, World, world

# Each worker group runs one workload; worker n of a group replays its
# cast[n % len(cast)]. What a replacement replays is the workload's answer to
# its template: in "serve" the growth is the allocator's fragmentation, which
# jemalloc ends; in "train" it is a reference leak in the code, which jemalloc
# does not touch (so its review finds no effect, and the guard reverts it);
# "batch" fills its object store, whose remedy is spilling.
CAST = {
    "serve": ["fragmentation_flattens", "leak_steady", "leak_steady"],
    "train": ["fragmentation_flattens", "leak_steady", "leak_steady"],
    "batch": ["plasma_never_released", "healthy_gc_sawtooth", "healthy_batch_spikes"],
    "ladder": ["leak_steady", "leak_steady", "leak_steady"],
}
# The ladder group's cases, worker n the n-th (mod 3), and what a step frees
# of what the worker gained since its start.
LADDER_CASES = {
    "garbage": StepEffects(reclaim=1.0),  # cycles holding ObjectRefs: Ray's global GC frees them
    "cache": StepEffects(reclaim=0.7),  # a cache the actor drops when told (the rest is its working data)
    "true leak": NO_EFFECTS,  # references kept alive: nothing short of a restart frees them
}
SAVED_BY_THE_LADDER = ("garbage", "cache")
HEALTHY = "healthy_gc_sawtooth"
MAX_STORY_S = 30 * 3600.0  # however the reviews go, the story ends here
STOP_EVERY_S = 1800.0  # past the story's length the demo looks at the reviews this often (simulated)


def replacement(group: str, pod: dict[str, Any]) -> str:
    """What a replacement pod of ``group`` replays, given its template."""
    ray = pod["spec"]["containers"][0]
    env = {e.get("name"): e.get("value") for e in ray.get("env") or []}
    # jemalloc in its env, or in a remediation ConfigMap its envFrom names
    # (what a container gets from it: its name says the remediation's kind).
    sources = [str((e.get("configMapRef") or {}).get("name", "")) for e in ray.get("envFrom") or []]
    jemalloc = "jemalloc" in str(env.get("LD_PRELOAD", "")) or any(
        s.startswith(f"{patches.REMEDY_CONFIGMAP}-jemalloc-") for s in sources)
    if group == "serve":
        return HEALTHY if jemalloc else "leak_steady"
    return "leak_steady" if group == "train" else HEALTHY


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay demo", description=helptext.summary(__doc__))
    p.add_argument("--speed", type=float, default=900.0, help="how much faster than real time (default 900)")
    p.add_argument("--workers", type=int, default=3, help="worker pods in each of the RayCluster's four groups "
                                                          "(default 3)")
    p.add_argument("--json", action="store_true", help="no live view; print the summary as one JSON document")
    p.add_argument("--plot", default="demo.png", metavar="OUT.png", help="timeline of every worker ('' for none)")
    p.add_argument("--heatmap", default="demo-heatmap.png", metavar="OUT.png",
                   help="the worker groups over time by projected time to OOM, as `top --heatmap` draws it "
                        "('' for none)")
    a = p.parse_args(argv)
    if not 1 <= a.workers <= 12 or not 60 <= a.speed <= 5000:
        p.error("--workers must be 1-12 and --speed 60-5000")
    return a


class DemoFailed(RuntimeError):
    """The demo could not show what it is for; the message says why."""


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.labels = read_labels(commands.examples_dir() / "labels.json")
        self.assigned: dict[str, str] = {}  # pod name -> trace name
        self.groups: dict[str, str] = {}  # worker pod name -> its group
        self.judged_at: float | None = None
        self.risk: dict[str, list[tuple[float, float | None]]] = {}  # heat-map rows, as top records them
        self.log: list[str] = []
        self.seen_events: set[str] = set()
        self.evidence = ""  # the latest forensics artifact, printed readably
        self.cases: dict[str, str] = {}  # a ladder worker's pod name -> its case
        self.served: dict[str, dict[float, Sample]] = {}  # a ladder worker -> the samples its sidecar served

    def trace_for(self, pod: dict[str, Any]) -> Path:
        name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
        if labels.get(C.LABEL_NODE_TYPE) == "head":
            trace = HEALTHY
        else:
            group = labels.get(C.LABEL_GROUP, "")
            n = sum(1 for p in self.groups.values() if p == group)
            self.groups[name] = group
            cast = CAST[group]
            trace = cast[n % len(cast)] if n < self.args.workers else replacement(group, pod)
            if group == "ladder" and n < self.args.workers:
                self.cases[name] = list(LADDER_CASES)[n % len(LADDER_CASES)]
        self.assigned[name] = trace
        return commands.examples_dir() / f"{trace}.csv"

    def effects_for(self, pod: dict[str, Any]) -> StepEffects:
        """What answering the ladder frees in this pod (``trace_for`` has
        cast it already)."""
        case = self.cases.get(pod["metadata"]["name"])
        return LADDER_CASES[case] if case else NO_EFFECTS

    def story_length(self) -> float:
        """Trace seconds after which the initial workers' fates are known."""
        deadlines = []
        for cast in CAST.values():
            for trace in cast[: self.args.workers]:
                lab = self.labels[trace]
                d = lab.get("oom_at_s") or lab.get("plasma_full_at_s")
                if d:
                    deadlines.append(float(d))
        return (max(deadlines) if deadlines else 6 * 3600.0) + 1800.0

    def next_stop(self, w: World, t: float) -> float | None:
        """The world's clock waits at each of the demo's stops (its ceiling)
        until the demo has looked: at the story's length, then every half
        hour until every remediation applied is judged, and one stop more
        to show what followed. The next stop; None: the story is over. At
        stops, not whenever the demo's loop came round: every run ends at
        the same time of its story."""
        if t - w.epoch >= MAX_STORY_S:
            return None
        reviews = ((w.api.get("memoryguards", "default", "demo-guard") or {}).get("status") or {}).get(
            "remediations") or {}
        if not any(r.get("verdict") in (None, "Pending") for r in reviews.values()):
            if self.judged_at is not None:
                return None
            self.judged_at = t
        return t + STOP_EVERY_S

    # -- what the user sees ---------------------------------------------------------
    @staticmethod
    def posted_h(w: World, e: dict[str, Any]) -> float:
        """When the Event was posted, in hours of the story."""
        at = w.event_times.get(e["metadata"]["name"])
        return ((w.clock(_wall(e["firstTimestamp"])) if at is None else at) - w.epoch) / 3600

    def collect_events(self, w: World) -> None:
        for e in sorted(w.events(), key=lambda e: int(e["metadata"]["resourceVersion"])):
            uid = e["metadata"]["name"]
            if uid in self.seen_events:
                continue
            self.seen_events.add(uid)
            t = self.posted_h(w, e)
            line = f"[{t:5.1f} h] {e['reason']}: {e['message']}"
            self.log.append(line)
            if not self.args.json and not sys.stdout.isatty():
                print(line[:200], flush=True)

    def screen(self, w: World, least: float) -> RenderableType:
        """``memoryguard-kuberay top``'s view of the demo's guard (the same
        code), under a banner saying what is real, then the latest actions."""
        g = w.api.get("memoryguards", "default", "demo-guard") or {}
        t = w.clock() - w.epoch
        banner = ("MemoryGuard demo: the operator, the sidecars and the policy are real; the Kubernetes API server "
                  "and KubeRay are emulated (the devkit's emulator). Clock: "
                  f"up to {self.args.speed:.0f}x, waiting whenever the operator is behind; {t / 3600:.1f} h "
                  f"simulated (the story: {least / 3600:.0f} h and the "
                  "remediations' reviews).")
        log = "\n".join(f"  {line[:150]}" for line in self.log[-10:])
        return Group(Text(banner), topview.screen([g] if g else [], title="guarded workers, nearest harm first"),
                     Text("\nEvents:\n" + (log or "  none yet")))

    # -- the run ---------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        a = self.args
        started = time.monotonic()
        least = self.story_length()
        with tempfile.TemporaryDirectory(prefix="memoryguard-demo-") as tmp:
            async with world(Path(tmp), self.trace_for, speed=a.speed, lockstep=True) as w:
                w.effects_for = self.effects_for
                w.api.put("rayclusters", cluster(a.workers))
                w.api.put("memoryguards", guard())
                await w.start_operator()
                tty = sys.stdout.isatty() and not a.json
                with Live(console=Console(), auto_refresh=False, screen=True) if tty else contextlib.nullcontext() \
                        as live:
                    w.ceiling = w.epoch + least
                    while True:
                        if w.clock() >= w.ceiling:
                            stop = self.next_stop(w, w.ceiling)
                            if stop is None:
                                break
                            w.ceiling = stop
                        self.refuse_pods_that_cannot_serve(w)
                        self.collect_events(w)
                        self.record_risk(w)
                        await self.record_served(w)
                        if live is not None:
                            live.update(self.screen(w, least), refresh=True)
                        await asyncio.sleep(0.5)
                self.collect_events(w)
                summary = self.summarize(w, time.monotonic() - started)
                self.evidence = demoreport.latest_evidence(w)
                if a.plot:
                    demoreport.plot(self, w, a.plot)
                if a.heatmap and self.risk:
                    # Every group's pods start with the demo: its first hours are the trend's warm-up.
                    warmup_s = PolicySettings.from_spec(specfields.policy_part(guard()["spec"])).trend_min_span_s
                    heatmap.draw(self.risk, a.heatmap, title="the demo's worker groups by projected time to OOM "
                                                             "(rows: groups; a column every few minutes)",
                                 time_label="hours (simulated)", warmup_s=warmup_s)
            return summary

    def record_risk(self, w: World) -> None:
        g = w.api.get("memoryguards", "default", "demo-guard")
        t = w.clock() - w.epoch
        for row, eta in topview.group_risk([g] if g else []).items():
            self.risk.setdefault(row.split(" ", 1)[-1], []).append((t, eta))

    async def record_served(self, w: World) -> None:
        """What the ladder workers' sidecars serve (less what the steps
        freed), for the plot: the trace alone would show the leak they no
        longer have."""
        for name in self.cases:
            sc = w.sidecars.get(name)
            if sc is None or sc.exited():
                continue
            seen = self.served.setdefault(name, {})
            since = max(seen) if seen else 0.0
            try:
                body = await asyncio.to_thread(_get, f"{sc.url}{C.PATH_SAMPLES}?since={since}")
            except OSError:
                continue  # evicted meanwhile, or busy: the next loop asks again
            for s in answer.read(body, max_body=64 << 20, max_samples=None).samples:
                seen[s.time_s] = s

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

    def summarize(self, w: World, duration: float) -> dict[str, Any]:
        """Every worker whose leak reached its end within the story counts:
        caught when rotated at least 10 minutes before (its OOM, or its
        store full); a rotation of a healthy worker is false."""
        now = w.ceiling  # the story's end: the clock waits there
        evicted = {pod: w.clock(wall) - w.sidecars[pod].start_clock for _, pod, wall in w.api.evictions
                   if pod in w.sidecars}
        leaks, caught, false_rotations, leads, missed = 0, 0, 0, [], []
        for pod, trace in self.assigned.items():
            lab, sc = self.labels[trace], w.sidecars.get(pod)
            if sc is None or "-head-" in pod or self.cases.get(pod) in SAVED_BY_THE_LADDER:
                continue
            end = lab.get("oom_at_s") if lab["kind"] == "leak" else lab.get("plasma_full_at_s")
            at = evicted.get(pod)
            if lab["kind"] == "healthy":
                false_rotations += at is not None
                continue
            if end is None or (sc.start_clock + end > now and at is None):
                continue  # its end lies past the story, and nothing was done yet
            leaks += 1
            margin = 600 if lab["kind"] == "leak" else 0
            if at is not None and at <= end - margin:
                caught += 1
                leads.append(end - at)
            else:  # said by name: a count alone hides which and why
                harm = "OOM" if lab["kind"] == "leak" else "object store full"
                missed.append(f"{pod} ({trace}): " + (f"never rotated, its {harm} at {end / 3600:.1f} h of its life"
                              if at is None else f"rotated {(end - at) / 60:.0f} min before its {harm}"))
        status = (w.api.get("memoryguards", "default", "demo-guard") or {}).get("status") or {}
        reviews = {k: {"verdict": r.get("verdict"), "reverted": r.get("reverted", ""), "message": r.get("message")}
                   for k, r in (status.get("remediations") or {}).items()}
        return {"workers": self.args.workers * len(CAST), "pods": len([p for p in self.assigned if "-head-" not in p]),
                "leaks": leaks, "caught": caught, "missed": missed,
                "rotations": len(w.api.evictions), "false_rotations": false_rotations,
                "remediations": len(w.events("RemediationApplied")), "duration_s": round(duration, 1),
                "replaced": len(w.events("WorkerRotated")), "min_lead_h": round(min(leads) / 3600, 2) if leads
                else None, "plain_deletes": len([d for d in w.api.deletes if d[0] == "pods"]),
                "simulated_h": round((now - w.epoch) / 3600, 1), "speed": round(w.reached_speed()),
                "clock_forced": w.forced, "reviews": reviews,
                "ladder": demoreport.ladder(self, w, evicted)}


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as r:
        return bytes(r.read())


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
        "workerGroupSpecs": [{"groupName": group, "replicas": workers, "minReplicas": 1, "maxReplicas": 12,
                              "rayStartParams": {}, "template": {"spec": {"containers": [c("ray-worker", "64Gi")]}}}
                             for group in CAST]}}


def guard() -> dict[str, Any]:
    return {"metadata": {"name": "demo-guard", "namespace": "default"}, "spec": {
        "clusterSelector": {"names": ["demo-cluster"]},
        "sampling": {"intervalSeconds": 300, "sidecarPort": SIDECAR_PORT, "timeoutSeconds": 2},
        "policy": {"staleAfterSeconds": 1800},
        # Five workers of four groups reach their limit within the same hour:
        # the default cap (4 an hour) held the fifth until after its OOM.
        "rotation": {"maxUnavailable": 1, "cooldownSeconds": 600, "replacementTimeoutSeconds": 3600,
                     "maxPerHour": 6},
        # Judged two hours after it is applied, on two pods of its template;
        # undone if it changed nothing.
        "remediation": {"jemalloc": {"mode": "auto"}, "spilling": {"mode": "auto"},
                        "review": {"afterSeconds": 7200, "minPods": 2, "revert": "ineffective"}}}}


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
    # A worker the ladder should have saved and rotated all the same.
    unsaved = [pod for pod, r in summary["ladder"].items() if r["case"] in SAVED_BY_THE_LADDER and r["rotated"]]
    if args.json:
        print(json.dumps(summary))
        return 1 if missed or unsaved else 0
    demoreport.print_text(demo, summary, args)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    if missed:
        print(f"demo failed: {missed} of {summary['leaks']} leaking worker(s) were not caught before their OOM: "
              + "; ".join(summary["missed"]), file=sys.stderr)
    if unsaved:
        print(f"demo failed: the ladder's steps freed what {', '.join(unsaved)} gained, and it was rotated all the "
              "same", file=sys.stderr)
    return 1 if missed or unsaved else 0
