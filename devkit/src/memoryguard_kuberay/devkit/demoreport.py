"""What the demo shows when its story is over: its text report and its
timeline (demo.png). The story itself is demo.py's."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from typing import TYPE_CHECKING, Any

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.plot import LADDER_MARKS, LIMIT_LABEL, ladder_ticks, mark, save_grid
from memoryguard_kuberay.core.traces import read_trace
from memoryguard_kuberay.core.units import GIB
from memoryguard_kuberay.operator.forensics import cli as forensics_cli
from memoryguard_kuberay.operator.forensics import collect as forensics

from .emulator.world import HOLD_LIMIT_S, World

if TYPE_CHECKING:
    from .demo import Demo



def print_text(d: Demo, summary: dict[str, Any], args: argparse.Namespace) -> None:
    """The summary as the demo prints it without ``--json``."""
    print("\n".join(d.log))
    print(f"\nsummary: {summary['workers']} workers ({summary['pods']} worker pods with their replacements) in "
          f"{summary['simulated_h']} h, {summary['leaks']} leaking: "
          f"{summary['caught']} caught before "
          f"their OOM (min lead {'-' if summary['min_lead_h'] is None else str(summary['min_lead_h']) + ' h'}), "
          f"{summary['rotations']} rotation(s), "
          f"{summary['false_rotations']} false, {summary['replaced']} replaced, {summary['remediations']} "
          f"remediation(s) applied, {summary['duration_s']:.0f} s ({summary['speed']}x of {args.speed:.0f}x)")
    if summary["clock_forced"]:
        print(f"the clock moved on {summary['clock_forced']} time(s) past a process that held it "
              f"longer than {HOLD_LIMIT_S:.0f} s: this run's story may differ from others'")
    if args.plot:
        print(f"timeline: {args.plot}")
    if args.heatmap:
        print(f"heat map: {args.heatmap}")
    for key, r in summary["reviews"].items():
        print(f"review of {key}: {r['verdict']}: {r['message']}{'; ' + r['reverted'] if r['reverted'] else ''}")
    for pod, r in summary["ladder"].items():
        peak = "-" if r["peak_in_use_percent"] is None else f"{r['peak_in_use_percent']}%"
        print(f"ladder, {r['case']} ({pod}): {r['asked']} step(s) asked, {r['effective']} of {r['judged']} judged "
              f"effective, peak in use {peak} of the limit, {'rotated' if r['rotated'] else 'not rotated'}")
    if d.evidence:
        print("\nthe evidence kept before the latest rotation (memoryguard-kuberay forensics POD):")
        print(d.evidence, end="")


def plot(d: Demo, w: World, out: str) -> None:
    """demo.png: each worker's memory over the story, its rotation, and its
    group's remediations and reverts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in d.assigned if "-head-" not in n]
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 1.9 * len(names)), squeeze=False, sharex=True)
    evicted = {pod: wall for _, pod, wall in w.api.evictions}
    # Remediations change the group's template: marked on every panel, at
    # the operator's clock time of their Event.
    remedied = [(d.posted_h(w, e), e["message"].split(":", 1)[0][:40])
                for e in w.events("RemediationApplied")]
    reverted = [(d.posted_h(w, e), e["message"].split(" (", 1)[0][:40])
                for e in w.events("RemediationReverted")]
    for ax, name in zip(axes[:, 0], names):
        sc = w.sidecars.get(name)
        if sc is None:
            continue
        offset = sc.start_clock - w.epoch
        end = (w.clock(evicted[name]) if name in evicted else w.ceiling) - sc.start_clock
        if name in d.served:  # a ladder worker: what it served, the steps' freeing included
            rows = [dataclasses.replace(s, time_s=s.time_s - sc.start_clock)
                    for _, s in sorted(d.served[name].items())]
            asked: dict[str, list[float]] = {}
            for e in w.events(kind="Pod"):
                if e["involvedObject"].get("name") == name and e["reason"] == "PressureStepAsked":
                    rung = next((r for r in LADDER_MARKS if f" to {r.lower()}:" in e["message"]), None)
                    if rung:
                        asked.setdefault(rung, []).append(d.posted_h(w, e))
            ladder_ticks(ax, asked)
        else:
            trace = read_trace(commands.examples_dir() / f"{d.assigned[name]}.csv")
            rows = [s for s in trace.samples if s.time_s <= end]
        ts = [(offset + s.time_s) / 3600 for s in rows]
        ax.plot(ts, [(s.working_set_bytes or 0) / GIB for s in rows], lw=0.8, label="working set")
        ax.plot(ts, [(s.memory_max_bytes or 0) / GIB for s in rows], "k--", lw=0.8, label=LIMIT_LABEL)
        ax.plot(ts, [(s.plasma_used_bytes or 0) / GIB for s in rows], lw=0.8, color="tab:green",
                label="object store")
        if name in evicted:
            mark(ax, (w.clock(evicted[name]) - w.epoch) / 3600, "rotate", "rotated")
        group = d.groups.get(name, "")
        for t, what in remedied:
            if f"group {group} " in what + " ":
                mark(ax, t, "remediate", what)
        for t, what in reverted:
            if f"group {group} " in what + " ":
                mark(ax, t, "revert", what)
        case = f" ({d.cases[name]}: the ladder's case)" if name in d.cases else ""
        ax.set_title(f"{name}: {d.assigned[name]}{case}", fontsize=8, loc="left")
        ax.set_ylabel("GiB", fontsize=7)
        ax.tick_params(labelsize=7)
    save_grid(fig, axes, out, xlabel="hours (simulated)", dpi=80)


def latest_evidence(w: World) -> str:
    """The evidence the operator kept before its latest rotation, as
    ``memoryguard-kuberay forensics`` prints it."""
    kept = forensics_cli.newest_first(w.api.objects("configmaps", "default"))
    if not kept:
        return ""
    out = io.StringIO()
    forensics_cli.render(json.loads(kept[0]["data"][forensics.DATA_KEY]), configmap=kept[0]["metadata"]["name"],
                         out=out)
    return out.getvalue()


def ladder(d: Demo, w: World, evicted: dict[str, float]) -> dict[str, Any]:
    """Each ladder worker: its case, the steps asked of it and judged
    effective, and whether it was rotated (the garbage and the cache
    must not be; the true leak must be, before its OOM)."""
    out = {}
    for pod, case in d.cases.items():
        events = [e for e in w.events(kind="Pod") if e["involvedObject"].get("name") == pod]
        asked = [e["message"] for e in events if e["reason"] == "PressureStepAsked"]
        judged = [e["message"] for e in events if e["reason"] == "PressureStepJudged"]
        served = d.served.get(pod, {})
        out[pod] = {"case": case, "asked": len(asked), "judged": len(judged),
                    "effective": sum(": effective" in m for m in judged), "rotated": pod in evicted,
                    "peak_in_use_percent": max((round(100 * s.unreclaimable_bytes / s.memory_max_bytes)
                                                for s in served.values()
                                                if s.unreclaimable_bytes and s.memory_max_bytes), default=None)}
    return out
