"""Robust trend fitting: Theil-Sen slope and intercept over bucketed points.

Theil-Sen (the median of pairwise slopes) ignores up to ~29% of outliers, so
short spikes and the odd missed bucket do not bend the line the way a least
squares fit would. Purely computational; O(n^2) in the number of buckets,
called once per closed bucket (the policy fits a window and its two halves
from one set of pairwise slopes: ``theil_sen_with_halves``).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    slope: float  # units per second
    intercept: float  # value at t = 0
    # Kendall's tau of the points: +1 every later point is higher, 0 no
    # order. A sawtooth or daily swing has a steep-looking slope but a low tau.
    tau: float = 0.0

    def at(self, t: float) -> float:
        return self.intercept + self.slope * t


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of nothing")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def deepest_fall(values: Sequence[float]) -> float:
    """How far ``values`` (not empty) fell at most below the highest before:
    a collection's drop, which a climb has none of."""
    return max(high - v for high, v in zip(itertools.accumulate(values, max), values))


def theil_sen(ts: Sequence[float], ys: Sequence[float]) -> Line | None:
    """Fit ``y = a + b t``; None with fewer than two distinct times."""
    n = len(ts)
    slopes = [
        (ys[j] - ys[i]) / (ts[j] - ts[i])
        for i in range(n)
        for j in range(i + 1, n)
        if ts[j] != ts[i]
    ]
    if not slopes:
        return None
    slopes.sort()
    return _line(slopes, ts, ys)


def _line(slopes: list[float], ts: Sequence[float], ys: Sequence[float]) -> Line:
    """The line of pairwise ``slopes`` (sorted, not empty) through the points."""
    m = len(slopes)
    b = slopes[m // 2] if m % 2 else (slopes[m // 2 - 1] + slopes[m // 2]) / 2.0
    a = median([y - b * t for t, y in zip(ts, ys)])
    # Sorted once: positives and negatives are counted by bisection.
    concordant = (m - bisect.bisect_right(slopes, 0.0)) - bisect.bisect_left(slopes, 0.0)
    return Line(slope=b, intercept=a, tau=concordant / m)


def theil_sen_with_halves(ts: Sequence[float], ys: Sequence[float], *, k: int,
                          s0: int = 0) -> tuple[Line | None, Line | None, float | None]:
    """``theil_sen(ts, ys)``, with ``theil_sen(ts[k:], ys[k:])`` (the recent
    half's line: the onset of growth reads its slope, level and consistency)
    and the slope of ``theil_sen(ts[s0:k], ys[s0:k])`` (None under three points), from one
    set of pairwise slopes: a half's pairs are among the whole's, so each
    division is made once (the halves were a third of the policy's time,
    issue 25). The same doubles as three separate fits. ``ts`` strictly
    ascending (bucket times are)."""
    n = len(ts)
    # rows[i]: the slopes from point i to each later point, in order.
    rows = [[(ys[j] - yi) / (ts[j] - ti) for j in range(i + 1, n)] for i, (ti, yi) in enumerate(zip(ts, ys))]
    slopes = [x for row in rows for x in row]
    if not slopes:
        return None, None, None
    slopes.sort()
    line = _line(slopes, ts, ys)
    # Pairs within [k, n): every later point of rows k..n-1. Within [s0, k):
    # row i's first k-1-i slopes.
    recent = _line(sorted(x for row in rows[k:] for x in row), ts[k:], ys[k:]) if n - k >= 3 else None
    early = median([x for i in range(s0, k) for x in rows[i][:k - 1 - i]]) if k - s0 >= 3 else None
    return line, recent, early


def concave_top(ts: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Fit ``y = a + b t + c t^2`` by least squares; when it bends down
    (``c < 0``), the time and height of its top, else None. Growth that is
    levelling off (a daily load nearing its peak) tops out there."""
    n = len(ts)
    if n < 5:
        return None
    t0 = sum(ts) / n
    scale = (max(ts) - min(ts)) or 1.0
    xs = [(t - t0) / scale for t in ts]  # centred and scaled: a well-conditioned system
    s1 = sum(xs)
    s2 = sum(x * x for x in xs)
    s3 = sum(x**3 for x in xs)
    s4 = sum(x**4 for x in xs)
    y0 = sum(ys)
    y1 = sum(x * y for x, y in zip(xs, ys))
    y2 = sum(x * x * y for x, y in zip(xs, ys))
    # Normal equations [[n s1 s2] [s1 s2 s3] [s2 s3 s4]] (a b c) = (y0 y1 y2), by Cramer's rule.
    det = n * (s2 * s4 - s3 * s3) - s1 * (s1 * s4 - s3 * s2) + s2 * (s1 * s3 - s2 * s2)
    if abs(det) < 1e-12:
        return None
    a = (y0 * (s2 * s4 - s3 * s3) - s1 * (y1 * s4 - s3 * y2) + s2 * (y1 * s3 - s2 * y2)) / det
    b = (n * (y1 * s4 - s3 * y2) - y0 * (s1 * s4 - s3 * s2) + s2 * (s1 * y2 - y1 * s2)) / det
    c = (n * (s2 * y2 - y1 * s3) - s1 * (s1 * y2 - y1 * s2) + y0 * (s1 * s3 - s2 * s2)) / det
    if c >= 0:
        return None
    x_top = -b / (2 * c)
    return t0 + x_top * scale, a + b * x_top + c * x_top * x_top
