"""Robust trend fitting: Theil-Sen slope and intercept over bucketed points.

Theil-Sen (the median of pairwise slopes) ignores up to ~29% of outliers, so
short spikes and the odd missed bucket do not bend the line the way a least
squares fit would. Purely computational; O(n^2) in the number of buckets,
called once per closed bucket.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
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
    m = len(slopes)
    b = slopes[m // 2] if m % 2 else (slopes[m // 2 - 1] + slopes[m // 2]) / 2.0
    a = median([y - b * t for t, y in zip(ts, ys)])
    # Sorted once: positives and negatives are counted by bisection.
    concordant = (m - bisect.bisect_right(slopes, 0.0)) - bisect.bisect_left(slopes, 0.0)
    return Line(slope=b, intercept=a, tau=concordant / m)
