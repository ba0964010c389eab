"""Issue 59, 4: peaks judged by their average. A worker whose batch peaks
grew 1.2% of its limit an hour while the troughs stayed flat was killed at
a peak: the trend of the means read flat. The envelope of the peaks is what
meets the limit; it is read now, with the troughs' own line beside it."""

from __future__ import annotations

import random

from memoryguard_kuberay.core.policy import Action, Reason
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

from .helpers import cgroup_sample

GIB = 1 << 30
LIMIT = 32 * GIB
STEP_S = 30


def batches(*, peak_growth_per_h: float, troughs_per_h: float = 0.0, base: float = 0.45, peak: float = 0.25,
            every_s: int = 2700, lasting_s: int = 240, end_h: float = 40.0, seed: int = 4) -> list[Sample]:
    """Troughs at ``base`` of the limit (rising ``troughs_per_h``), a batch of
    ``lasting_s`` every ``every_s`` standing ``peak`` above them and growing
    ``peak_growth_per_h`` an hour; until the OOM point or ``end_h``."""
    rnd = random.Random(seed)
    out = []
    for t in range(0, int(end_h * 3600), STEP_S):
        frac = base + troughs_per_h * t / 3600 + rnd.gauss(0, 0.004)
        if t % every_s < lasting_s:
            frac += peak + peak_growth_per_h * t / 3600
        used = int(frac * LIMIT)
        if used >= 0.99 * LIMIT:
            break
        out.append(cgroup_sample(t, used, LIMIT, cache=GIB // 2))
    return out


def test_peaks_growing_over_flat_troughs_are_projected_to_the_limit() -> None:
    samples = batches(peak_growth_per_h=0.012)  # the 1.2% an hour: the OOM point at about 24 h
    oom_at = samples[-1].time_s
    result = replay("peaks", samples, PolicySettings())
    assert result.first_rotation_s is not None, "never rotated: killed at a peak"
    first = next(td for td in result.decisions if td.decision.action is Action.ROTATE)
    lead_h = (oom_at - result.first_rotation_s) / 3600
    print(f"OOM point at {oom_at / 3600:.1f} h; rotated {lead_h:.1f} h before it ({first.decision.message})")
    assert first.decision.reason is Reason.PROJECTED_OOM
    assert "its peaks rise" in first.decision.message and "while the troughs between them hold" in \
        first.decision.message
    assert lead_h >= 0.5


def test_steady_peaks_near_the_limit_are_left_alone() -> None:
    # The twin a static threshold confuses with it: batches to 88% of the limit, every one alike.
    result = replay("steady", batches(peak_growth_per_h=0.0, peak=0.43), PolicySettings())
    assert result.first_rotation_s is None, [td.decision.message for td in result.decisions
                                             if td.decision.action is Action.ROTATE][:2]


def test_peaks_that_rise_with_their_troughs_are_not_this_rules() -> None:
    # The whole pod growing (troughs and peaks alike) is the creep's to read,
    # with its own checks: the peaks' rule says nothing of it.
    from memoryguard_kuberay.core.policy.envelopes import peaks_projection
    from memoryguard_kuberay.core.policy.window import PodWindow

    settings = PolicySettings()
    window = PodWindow(settings)
    for s in batches(peak_growth_per_h=0.0, troughs_per_h=0.012, base=0.3, end_h=30.0):
        window.add(s)
    verdict, projection = peaks_projection(window, settings, window.last.time_s)  # type: ignore[union-attr]
    assert projection is not None and projection.slope_per_s > 0  # the peaks do rise
    assert not verdict.fired
