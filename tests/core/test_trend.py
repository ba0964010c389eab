"""The trend fit's shared-pairs form against three plain Theil-Sen fits:
the same doubles, for any points (hypothesis), so a decision made on one is
the decision made on the other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryguard_kuberay.core.policy.trend import Line, theil_sen, theil_sen_with_halves

values = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def series(draw: st.DrawFn) -> tuple[list[float], list[float], int, int]:
    n = draw(st.integers(min_value=0, max_value=40))
    gaps = draw(st.lists(st.floats(min_value=1.0, max_value=3600.0), min_size=n, max_size=n))
    ts, t = [], draw(st.floats(min_value=0, max_value=2e9))
    for g in gaps:
        t += g
        ts.append(t)
    ys = draw(st.lists(values, min_size=n, max_size=n))
    return ts, ys, n // 2, draw(st.sampled_from([0, 1]))


def _slope(line: Line | None) -> float | None:
    return None if line is None else line.slope


@settings(max_examples=300, deadline=None)
@given(series())
def test_the_whole_and_both_halves_are_the_three_plain_fits(s: tuple[list[float], list[float], int, int]) -> None:
    ts, ys, k, s0 = s
    line, recent, early = theil_sen_with_halves(ts, ys, k=k, s0=s0)
    assert line == theil_sen(ts, ys)
    assert recent == (theil_sen(ts[k:], ys[k:]) if len(ts) - k >= 3 else None)
    assert early == (_slope(theil_sen(ts[s0:k], ys[s0:k])) if k - s0 >= 3 else None)


def test_a_steady_climb_with_a_flat_start() -> None:
    # Ten buckets: flat for five, then 10 a bucket. The recent half climbs
    # at 10/60 a second, the early half (less its first) is flat.
    ts = [60.0 * i for i in range(10)]
    ys = [100.0] * 5 + [100.0 + 10 * i for i in range(1, 6)]
    line, recent, early = theil_sen_with_halves(ts, ys, k=5, s0=1)
    assert line is not None and line.slope > 0 and 0 < line.tau <= 1
    assert recent is not None and recent.slope == 10 / 60 and recent.tau == 1.0 and early == 0.0
