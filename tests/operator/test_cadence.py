"""cadence.py: a guard's cycles every interval, each guard at its own place
in it, so guards started together do not poll together for ever."""

from __future__ import annotations

import collections
import itertools
import os
import subprocess
import sys

import pytest

from memoryguard_kuberay.operator.cycle import cadence

INTERVAL = 15.0


@pytest.mark.parametrize(("started", "now", "phase", "pause", "why"), [
    (30.0, 32.0, 0.0, 13.0, "on its slot: the interval less the cycle's 2 s, as before"),
    (30.0, 30.0, 0.2, 18.0, "slots at 33 and 48: 48 is nearer to 45, the cycle after waits longer"),
    (30.0, 31.0, 0.2, 17.0, "the same slot, one second of cycle later"),
    (30.0, 30.0, 0.8, 12.0, "slots at 42 and 57: 42 is nearer, it comes sooner"),
    (30.0, 30.0, 0.5, 7.5, "half an interval either way: the sooner"),
    (30.0, 50.0, 0.0, 0.5, "a cycle that overran its slot: the next at once, after the least pause"),
])
def test_the_next_cycle_is_at_the_guards_slot_nearest_one_interval_on(started: float, now: float, phase: float,
                                                                       pause: float, why: str) -> None:
    assert cadence.pause(started=started, now=now, interval_s=INTERVAL, phase=phase, min_pause_s=0.5) == \
        pytest.approx(pause), why


def _starts(phase: float, first: float, took: float, cycles: int) -> list[float]:
    out = [first]
    for _ in range(cycles):
        out.append(out[-1] + took + cadence.pause(started=out[-1], now=out[-1] + took, interval_s=INTERVAL, phase=phase,
                                                  min_pause_s=0.5))
    return out


def test_guards_started_together_spread_over_the_interval_and_no_pod_waits_two_intervals() -> None:
    phases = [cadence.phase_of("default", f"bench-{g}") for g in range(80)]
    runs = [_starts(p, first=1000.0, took=2.0, cycles=6) for p in phases]
    for starts in runs:
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(INTERVAL / 2 <= g <= 1.5 * INTERVAL for g in gaps), gaps
        assert gaps[1:] == pytest.approx([INTERVAL] * (len(gaps) - 1))  # on its slot after the first move
    # All 80 began at once; from the second cycle on, no tenth of the interval holds more than a fifth of them.
    tenths = collections.Counter(int((s[2] % INTERVAL) / (INTERVAL / 10)) for s in runs)
    assert max(tenths.values()) <= 16, tenths
    assert len(tenths) >= 8


def test_a_guards_place_is_the_same_in_every_process() -> None:
    """A takeover keeps the guard's place: the replicas compute the same
    phase, whatever each process's string hash seed."""
    code = "from memoryguard_kuberay.operator.cycle import cadence; print(cadence.phase_of('team-a', 'serve'))"
    seen = {subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert seen == {f"{cadence.phase_of('team-a', 'serve')}\n"}
    assert 0 <= cadence.phase_of("team-a", "serve") < 1
    assert cadence.phase_of("team-a", "serve") != cadence.phase_of("team-b", "serve")
