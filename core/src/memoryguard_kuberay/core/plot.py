"""``--plot``: one panel per trace showing working set, limit, object store,
the trend's projection and the decisions, so a person sees why it acted.
matplotlib is imported here only, and only when a plot is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memoryguard_kuberay.core.simulate import Replay
from memoryguard_kuberay.core.traces import Trace

GIB = 1024**3


def plot_replays(pairs: Sequence[tuple[Trace, Replay]], out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(pairs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.6 * n), squeeze=False)
    for ax, (trace, rep) in zip(axes[:, 0], pairs):
        ts = [s.time_s / 3600 for s in trace.samples]
        ws = [(s.working_set_bytes or float("nan")) / GIB for s in trace.samples]
        lim = [(s.memory_max_bytes or float("nan")) / GIB for s in trace.samples]
        store = [(s.plasma_used_bytes or 0) / GIB for s in trace.samples]
        ax.plot(ts, ws, lw=0.7, label="working set")
        ax.plot(ts, lim, color="black", lw=1.0, ls="--", label="limit")
        ax.plot(ts, store, lw=0.7, color="tab:green", label="object store")
        ax2 = ax.twinx()
        pts = [(t / 3600, eta / 3600) for t, eta in rep.projections if eta is not None]
        if pts:
            ax2.plot([p[0] for p in pts], [min(p[1], 24) for p in pts], lw=0.6, color="tab:orange",
                     label="projected OOM in (h)")
        ax2.set_ylim(0, 24)
        ax2.set_ylabel("h to OOM", fontsize=7)
        for td in rep.decisions:
            color = "red" if td.decision.action.value == "rotate" else "tab:purple"
            ax.axvline(td.t_s / 3600, color=color, lw=1.2)
            ax.annotate(td.decision.reason.value, (td.t_s / 3600, ax.get_ylim()[1] * 0.92), color=color,
                        fontsize=7, rotation=90, va="top", ha="right")
        ax.set_title(trace.name, fontsize=9, loc="left")
        ax.set_ylabel("GiB", fontsize=7)
        ax.tick_params(labelsize=7)
    save_grid(fig, axes, out, xlabel="hours since pod start", dpi=90)


def save_grid(fig: Any, axes: Any, out: str | Path, *, xlabel: str, dpi: int) -> None:
    """Finish a column of timelines (legend on the first, x label on the
    last) and write it; shared with the demo's timeline."""
    import matplotlib.pyplot as plt

    axes[0, 0].legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
