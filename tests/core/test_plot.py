"""The pictures read on their own (issue 26, 8): every panel has units on
both axes and its own legend, the limit named as where the kernel kills,
each kind of mark (rotate, remediate, the kernel's OOM kill) in that
legend, and each decision's reason on a ground that keeps it readable."""

from __future__ import annotations

from pathlib import Path

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.plot import LIMIT_LABEL, replay_figure, save_grid
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay
from memoryguard_kuberay.core.traces import read_trace


def test_every_panel_reads_on_its_own(tmp_path: Path) -> None:
    traces = [read_trace(commands.examples_dir() / f"{n}.csv") for n in ("leak_steady", "fragmentation_flattens")]
    # The whole leak, OOM kill included: the replay stops at the rotation, the trace does not.
    pairs = [(t, replay(t.name, t.samples, PolicySettings())) for t in traces]
    fig, axes = replay_figure(pairs)
    out = tmp_path / "plot.png"
    save_grid(fig, axes, out, xlabel="hours since pod start", dpi=40)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    panels = list(axes[:, 0])
    for ax in panels:
        assert ax.get_xlabel() == "hours since pod start" and ax.get_ylabel() == "GiB"
        twin = next(o for o in fig.axes if o is not ax and o.bbox.bounds == ax.bbox.bounds)
        assert twin.get_ylabel() == "hours to OOM"
        assert ax.get_legend() is not None, ax.get_title()
    leak, plateau = ({t.get_text() for t in ax.get_legend().get_texts()} for ax in panels)
    assert {LIMIT_LABEL, "working set", "rotate", "OOM kill"} <= leak
    assert any(x.startswith("projected OOM in (h") for x in leak)
    assert {LIMIT_LABEL, "remediate"} <= plateau and "rotate" not in plateau
    reasons = [a for a in panels[0].texts if a.get_text() == "ProjectedOOM"]
    assert reasons and all(a.get_bbox_patch() is not None for a in reasons)
    assert any(a.get_text() == "kernel OOM kill" for a in panels[0].texts)


def test_the_heat_map_colours_each_cell_by_the_nearest_projection_in_it(tmp_path: Path) -> None:
    from memoryguard_kuberay.core import heatmap

    assert [heatmap.band(s) for s in (0, 1800, 3600, 5 * 3600, 23 * 3600, 30 * 3600, None)] == [0, 0, 1, 1, 2, 3, 4]
    rows = {"serve": [(0.0, None), (100.0, 7200.0), (150.0, 600.0), (250.0, None)],
            "train": [(0.0, 90000.0)]}
    # Two columns of 200 s: serve's first holds 2 h and 10 m (the nearest wins); train has no sample in its second.
    assert heatmap.cells(rows, start_s=0.0, column_s=200.0, columns=2) == [[0, 4], [3, None]]
    out = tmp_path / "heat.png"
    heatmap.draw(rows, out, title="t")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_the_heat_map_paints_the_warm_up_apart_from_none_in_sight() -> None:
    from memoryguard_kuberay.core import heatmap

    warming = len(heatmap.BANDS) + 1
    # No projection at 0 and 100 s (inside a 150 s warm-up: not judged yet) and at 250 s (after it: not growing).
    rows = {"serve": [(0.0, None), (100.0, None), (250.0, None)], "late": [(200.0, None)]}
    assert heatmap.cells(rows, start_s=0.0, column_s=100.0, columns=3, warmup_s=150.0) == [
        [warming, warming, len(heatmap.BANDS)], [None, None, warming]]
    # A projection inside the warm-up (the rapid rule's) is shown as it is.
    assert heatmap.cells({"r": [(0.0, 600.0)]}, start_s=0.0, column_s=100.0, columns=1, warmup_s=150.0) == [[0]]
