"""Issue 59, 5: a limit lowered in place (a resize, VPA) is a reason to
look harder, not away. Started over as a raised limit is, a leak read
"WarmingUp" at 90% of the new limit for 3 hours, then the trend rule waited
two trend windows; only the 95%-for-15-minutes rule caught it, 2.3 h ahead.
Its history now stands and is judged against the new limit at once."""

from __future__ import annotations

import random

from memoryguard_kuberay.core.policy import Action, Reason
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

from .helpers import cgroup_sample

GIB = 1 << 30
STEP_S = 60


def pod(*, leak_gib_per_h: float, base_gib: float = 5.0, lowered_at_h: float = 6.0, end_h: float = 30.0,
        seed: int = 5) -> list[Sample]:
    """At ``base_gib`` of a 16 GiB limit, plus ``leak_gib_per_h``; the limit
    lowered to 10 GiB at ``lowered_at_h``; until the OOM point or ``end_h``."""
    rnd = random.Random(seed)
    out = []
    for t in range(0, int(end_h * 3600), STEP_S):
        limit = 16 * GIB if t < lowered_at_h * 3600 else 10 * GIB
        used = int(base_gib * GIB + leak_gib_per_h * GIB * t / 3600 + rnd.gauss(0, 0.02 * GIB))
        if used >= 0.99 * limit:
            break
        out.append(cgroup_sample(t, used, limit, cache=GIB // 4))
    return out


def test_a_leak_under_a_lowered_limit_is_projected_to_it_at_once() -> None:
    samples = pod(leak_gib_per_h=0.5)  # 8 GiB when lowered (80% of the new limit), its OOM point 3.8 h away
    oom_at = samples[-1].time_s
    result = replay("lowered", samples, PolicySettings())
    assert result.first_rotation_s is not None, "never rotated"
    first = next(td for td in result.decisions if td.decision.action is Action.ROTATE)
    lead_h = (oom_at - result.first_rotation_s) / 3600
    after_h = (result.first_rotation_s - 6 * 3600) / 3600
    print(f"lowered at 6 h: rotated {after_h:.1f} h after, {lead_h:.1f} h before the OOM point "
          f"({first.decision.reason.value}: {first.decision.message})")
    assert first.decision.reason is Reason.PROJECTED_OOM, first.decision.message
    # About the default horizon (1.5 h): not the critical rule's last half hour
    # (before, the new limit's warm-up and settling left the leak to it: 0.5 h).
    assert lead_h >= 1.0


def test_a_flat_pod_under_a_lowered_limit_is_left_alone() -> None:
    samples = pod(leak_gib_per_h=0.0, base_gib=8.0)  # 8 GiB of the new 10: 80%, flat
    result = replay("lowered-flat", samples, PolicySettings())
    assert result.first_rotation_s is None, [td.decision.message for td in result.decisions][:3]
