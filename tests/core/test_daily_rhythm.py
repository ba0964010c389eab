"""A day's rhythm (issue 39 item 2): a serving pod's morning surge, a steep
climb to 90% of its limit released at night, is the same every day; a
trend window of hours forgets the day before and read it as a fast leak.
What the pod reached a day back (the floor series' two-hour peaks) now
counts: a climb to where it climbed yesterday is no new ground. A leak
that grows only while traffic flows climbs higher each day, and is still
caught before its OOM."""

from __future__ import annotations

from collections.abc import Callable

from memoryguard_kuberay.core.units import fmt_oom_in

from .helpers import first_rotation, run, series

H = 3600.0
START = 7.5 * H  # the pod starts at 07:30


def rhythm(plateau: Callable[[int], float]) -> Callable[[float], float]:
    """Night at 50%, 08:00-08:45 a steady climb to the day's plateau, held
    until 20:00; ``plateau(day)`` for day 0, 1, ..."""
    def frac(t: float) -> float:
        day, tod = divmod(START + t, 24 * H)
        top = plateau(int(day))
        if tod < 8 * H or tod >= 20 * H:
            return 0.5
        if tod < 8.75 * H:
            return 0.5 + (top - 0.5) * (tod - 8 * H) / (0.75 * H)
        return top
    return frac


def test_the_same_morning_surge_every_day_is_never_rotated() -> None:
    decisions = run(series(rhythm(lambda day: 0.9), 3 * 24, step_s=60.0, store=None))
    assert first_rotation(decisions) is None, decisions[:1]


def test_a_leak_that_grows_only_with_traffic_is_caught_before_its_oom() -> None:
    plateau = lambda day: min(1.0, 0.8 + 0.07 * day)  # noqa: E731 (higher each day: 0.80, 0.87, 0.94, 1.0)
    samples = [s for s in series(rhythm(plateau), 4 * 24, step_s=60.0, store=None)
               if s.working_set_bytes is not None]
    oom_at = next(s.time_s for s in samples if rhythm(plateau)(s.time_s) >= 0.99)
    rotated = first_rotation(run(samples))
    assert rotated is not None and rotated < oom_at, (rotated, oom_at)


def test_an_oom_already_reached_on_the_trend_is_said_in_words() -> None:
    # A leak growing only with traffic was rotated with "projected OOM in 0 s"
    # at 83% in use (issue 39): an ETA of 0 is the trend's peaks at the OOM
    # point already, and the message says that.
    assert fmt_oom_in(0.0) == "its peaks on this trend already reach the OOM point"
    assert fmt_oom_in(5400.0) == "projected OOM in 1 h 30 m"
