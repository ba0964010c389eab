"""``--plot``: one panel per trace showing working set, limit, object store,
the trend's projection and the decisions, so a person sees why it acted.
Every panel reads on its own: units on both axes, its own legend (the
limit, where the kernel kills, and each kind of mark among its entries),
the reason of each decision on a background that keeps it readable over the
lines. matplotlib is imported here only, and only when a plot is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memoryguard_kuberay.core.simulate import Replay
from memoryguard_kuberay.core.traces import Trace

GIB = 1024**3
ETA_CAP_H = 24.0  # the projection's axis stops here: beyond a day it says nothing a panel can show
LIMIT_LABEL = "limit (the kernel OOM-kills here)"
# Mark colours by what happened: the legend names each once.
MARKS = {"rotate": "red", "remediate": "tab:purple", "revert": "tab:brown", "OOM kill": "black"}
LADDER_MARKS = {"Reclaim": "tab:cyan", "Shed": "tab:olive", "Replace": "tab:red"}  # the ladder's steps asked


def plot_replays(pairs: Sequence[tuple[Trace, Replay]], out: str | Path) -> None:
    fig, axes = replay_figure(pairs)
    save_grid(fig, axes, out, xlabel="hours since pod start", dpi=90)


def replay_figure(pairs: Sequence[tuple[Trace, Replay]]) -> tuple[Any, Any]:
    """The figure, unsaved (the tests read its panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(pairs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.9 * n), squeeze=False)
    for ax, (trace, rep) in zip(axes[:, 0], pairs):
        ts = [s.time_s / 3600 for s in trace.samples]
        ax.plot(ts, [(s.working_set_bytes or float("nan")) / GIB for s in trace.samples], lw=0.7,
                label="working set")
        ax.plot(ts, [(s.memory_max_bytes or float("nan")) / GIB for s in trace.samples], color="black", lw=1.0,
                ls="--", label=LIMIT_LABEL)
        ax.plot(ts, [(s.plasma_used_bytes or 0) / GIB for s in trace.samples], lw=0.7, color="tab:green",
                label="object store")
        ax2 = ax.twinx()
        pts = [(t / 3600, eta / 3600) for t, eta in rep.projections if eta is not None]
        if pts:
            ax2.plot([p[0] for p in pts], [min(p[1], ETA_CAP_H) for p in pts], lw=0.6, color="tab:orange",
                     label=f"projected OOM in (h, at most {ETA_CAP_H:g})")
        ax2.set_ylim(0, ETA_CAP_H)
        ax2.set_ylabel("hours to OOM", fontsize=7)
        ax2.tick_params(labelsize=7)
        for td in rep.decisions:
            mark(ax, td.t_s / 3600, td.decision.action.value, td.decision.reason.value)
        ladder_ticks(ax, {rung: [m.t_s / 3600 for m in rep.ladder if m.move.started and m.move.rung.value == rung]
                          for rung in LADDER_MARKS})
        for t in oom_kills(trace):
            mark(ax, t / 3600, "OOM kill", "kernel OOM kill")
        ax.set_title(trace.name, fontsize=9, loc="left")
        ax.set_ylabel("GiB", fontsize=7)
        ax.tick_params(labelsize=7)
    return fig, axes


def oom_kills(trace: Trace) -> list[float]:
    """When the trace's OOM-kill count went up: the kernel's kills."""
    out, last = [], None
    for s in trace.samples:
        if s.oom_kill_count is not None:
            if last is not None and s.oom_kill_count > last:
                out.append(s.time_s)
            last = s.oom_kill_count
    return out


def ladder_ticks(ax: Any, asked: dict[str, list[float]]) -> None:
    """The ladder's steps asked (rung -> times), as ticks along the foot of
    the panel in each rung's colour: a pod may be asked a hundred times in a
    day, where lines would hide the curve."""
    for rung, color in LADDER_MARKS.items():
        ts = asked.get(rung) or []
        if ts:
            ax.scatter(ts, [0.02] * len(ts), transform=ax.get_xaxis_transform(), marker="^", s=14,
                       color=color, label=f"{rung.lower()} asked", zorder=3)


def mark(ax: Any, t: float, kind: str, text: str) -> None:
    """A vertical line at ``t`` in the colour of its kind (named once in the
    legend), its text on a white ground so the lines do not hide it."""
    color = MARKS.get(kind, "tab:purple")
    seen = {h.get_label() for h in ax.get_lines()}
    ax.axvline(t, color=color, lw=1.2, label=kind if kind not in seen else "_nolegend_")
    ax.annotate(text, (t, 0.97), xycoords=("data", "axes fraction"), color=color, fontsize=7, rotation=90,
                va="top", ha="right", bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})


def legend(ax: Any) -> None:
    """One legend per panel, with the entries of its twin axes (the
    projection) beside its own."""
    handles, labels = ax.get_legend_handles_labels()
    for other in ax.figure.axes:
        if other is not ax and other.get_shared_x_axes().joined(ax, other) and other.bbox.bounds == ax.bbox.bounds:
            h, lab = other.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
    if handles:
        # Beside the panel, past its right axis: inside, "best" still covered
        # the working set and the marks' labels (issue 42, 9).
        ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.05, 1.0), frameon=False)


def save_grid(fig: Any, axes: Any, out: str | Path, *, xlabel: str, dpi: int) -> None:
    """Finish a column of timelines (a legend and the time axis's unit on
    every panel) and write it; shared with the demo's timeline."""
    import matplotlib.pyplot as plt

    for ax in axes[:, 0]:
        legend(ax)
        ax.set_xlabel(xlabel, fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
