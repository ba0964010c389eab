"""A climb that falls back is not a leak (issue 59, 2; issue 58, 5): on
the real-pod tier a worker whose leak had stopped read 29% of its limit and
was rotated 20 s later, "projected OOM in 20 s", because the trend's
buckets still held the climb. The newest reading far below the
projection's level, further than the series' own swing, stops it."""

from __future__ import annotations

import pytest

from memoryguard_kuberay.core.commands import load_guard_settings
from memoryguard_kuberay.core.policy.projection import Projection, fallen_back
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.simulate import replay

from ..devworld import ROOT

MIB = 1 << 20
LIMIT = 1024 * MIB
TEST_PROFILE = load_guard_settings(str(ROOT / "examples" / "guards" / "test-profile.yaml"))
LEAK_AT = 1800.0


def _pod(leak_s: float, *, rate_mib_s: float = 2.0, until_s: float = 3600.0) -> list[Sample]:
    """A 1 GiB worker at 300 MiB, leaking ``rate_mib_s`` from LEAK_AT for
    ``leak_s`` (then back at 300 MiB: the leaking actor gone), sampled every
    5 s as the sidecar does under the test profile."""
    out = []
    for i in range(int(until_s // 5)):
        t = i * 5.0
        used = 300 * MIB + (int((t - LEAK_AT) * rate_mib_s * MIB) if LEAK_AT <= t < LEAK_AT + leak_s else 0)
        used = min(used, LIMIT)
        out.append(Sample(t, memory_current_bytes=used + 5 * MIB, memory_max_bytes=LIMIT, anon_bytes=used,
                          file_bytes=5 * MIB, inactive_file_bytes=3 * MIB, shmem_bytes=0, oom_kill_count=0))
    return out


@pytest.mark.parametrize("leak_s", [60, 120, 180, 200])
def test_a_leak_that_stopped_is_not_rotated_once_memory_fell_back(leak_s: float) -> None:
    # At 200 s the rule before this one rotated the pod 35 s after the fall:
    # "in use 300 MiB of 1.0 GiB (29%) ... projected OOM in 2 m".
    result = replay("stopped", _pod(leak_s), TEST_PROFILE)
    late = [(td.t_s - LEAK_AT - leak_s, td.decision.message) for td in result.decisions
            if td.decision.action.value == "rotate" and td.t_s >= LEAK_AT + leak_s]
    assert late == []


def test_a_leak_that_goes_on_is_rotated_before_its_oom() -> None:
    samples = _pod(10_000)
    oom = next(s.time_s for s in samples if s.anon_bytes and s.anon_bytes >= 0.99 * LIMIT)
    result = replay("goes-on", samples, TEST_PROFILE)
    assert result.first_rotation_s is not None and result.first_rotation_s < oom - 30


def _p(level: float, swing: float = 0.0) -> Projection:
    return Projection(slope_per_s=1.0, level=level, eta_s=60.0, sustained=True, why_not="", swing=swing)


@pytest.mark.parametrize("p, newest, sustained", [
    (_p(0.70 * LIMIT), 0.65 * LIMIT, True),  # a little below: noise, a collection
    (_p(0.70 * LIMIT), 0.29 * LIMIT, False),  # fell back to where it began
    (_p(0.70 * LIMIT, swing=0.15 * LIMIT), 0.40 * LIMIT, True),  # a sawtooth's trough: twice its swing below
    (_p(0.70 * LIMIT, swing=0.05 * LIMIT), 0.40 * LIMIT, False),  # far below a small swing
    (_p(0.70 * LIMIT), None, True),  # the newest reading unknown: nothing to say
])
def test_fallen_back(p: Projection, newest: float | None, sustained: bool) -> None:
    got = fallen_back(p, newest, LIMIT)
    assert got is not None and got.sustained is sustained
    assert sustained or "fell back" in got.why_not
