"""Where is the risk? Rows (worker groups, or traces) over time (columns),
each cell coloured by the projected time to OOM: the nearest any pod of
the row had in that column. ``simulate --heatmap`` and ``top --heatmap``
draw it; the chart's dashboard has the same view as a Grafana panel.

``cells`` and ``band`` are pure; matplotlib is imported only to draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

# Bands of hours to OOM, nearest first: (upper bound in hours, label, colour).
# "none in sight": not growing toward the limit (no projection).
BANDS: tuple[tuple[float, str, str], ...] = (
    (1.0, "under 1 h", "#b2182b"),
    (6.0, "1-6 h", "#ef8a62"),
    (24.0, "6-24 h", "#fddbc7"),
    (math.inf, "over a day", "#d1e5f0"),
)
NONE_IN_SIGHT = ("none in sight", "#67a9cf")
# Before the policy can fit a trend (trendMinSpanSeconds after a row's
# start) there is no projection either; painted as "none in sight" it read
# as safe when it means "not judged yet" (issue 42, 9).
WARMING_UP = ("warming up: no trend yet", "#bdbdbd")
NO_DATA = ("no samples", "#f0f0f0")

Points = Sequence[tuple[float, float | None]]  # (time s, projected OOM s or None: not growing)


def band(eta_s: float | None) -> int:
    """The band's index for one projection: 0 nearest; len(BANDS) none in sight."""
    if eta_s is None:
        return len(BANDS)
    hours = max(0.0, eta_s) / 3600
    return next(i for i, (upper, _, _) in enumerate(BANDS) if hours < upper)


def cells(rows: Mapping[str, Points], *, start_s: float, column_s: float, columns: int,
          warmup_s: float | None = None) -> list[list[int | None]]:
    """Per row, per column, the nearest band seen in it (None: no sample).
    With ``warmup_s``, a point without a projection that is less than that
    after its row's first point is band ``len(BANDS) + 1``, warming up."""
    out: list[list[int | None]] = []
    for points in rows.values():
        row: list[int | None] = [None] * columns
        first = min((t for t, _ in points), default=0.0)
        for t, eta in points:
            c = int((t - start_s) // column_s)
            if 0 <= c < columns:
                b = band(eta)
                if eta is None and warmup_s is not None and t - first < warmup_s:
                    b = len(BANDS) + 1
                row[c] = b if row[c] is None else min(row[c], b)  # type: ignore[type-var]
        out.append(row)
    return out


def draw(rows: Mapping[str, Points], out: str | Path, *, title: str, time_unit_s: float = 3600.0,
         time_label: str = "hours", columns: int = 96, warmup_s: float | None = None) -> None:
    """Write the heat map as a PNG (or any format matplotlib knows by
    suffix). ``warmup_s``: where each row starts with its pod (simulate),
    the policy's trend warm-up, painted apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    times = [t for pts in rows.values() for t, _ in pts]
    start, end = (min(times), max(times)) if times else (0.0, 1.0)
    column_s = max((end - start) / columns, 1e-9)
    grid = cells(rows, start_s=start, column_s=column_s, columns=columns, warmup_s=warmup_s)
    colours = [c for _, _, c in BANDS] + [NONE_IN_SIGHT[1], WARMING_UP[1], NO_DATA[1]]
    values = [[len(colours) - 1 if v is None else v for v in row] for row in grid]
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.32 * max(1, len(rows))))
    extent = (0.0, (end - start) / time_unit_s, len(rows), 0)
    ax.imshow(values or [[len(colours) - 1]], aspect="auto", interpolation="nearest",
              cmap=ListedColormap(colours), vmin=0, vmax=len(colours) - 1, extent=extent)
    ax.set_yticks([i + 0.5 for i in range(len(rows))], list(rows), fontsize=7)
    ax.set_xlabel(time_label, fontsize=8)
    ax.set_title(title, fontsize=9, loc="left")
    ax.tick_params(labelsize=7)
    names = [label for _, label, _ in BANDS] + [NONE_IN_SIGHT[0], WARMING_UP[0], NO_DATA[0]]
    ax.legend([Patch(color=c) for c in colours], names, title="projected OOM in", fontsize=6, title_fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
