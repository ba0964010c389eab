"""Was a remediation worth it? The creep of a worker group's pods on the
remediated template against the pods before it, with the policy's own
estimator: the trend of memory in use (the Theil-Sen fit over the trend
window that projects the OOM), per pod, once it spans ``trendMinSpanSeconds``.

A group runs one workload, so its pods creep alike: the medians of the two
sides are compared. Effective: the creep at least halved, by more than the
policy's own floor of growth (``minGrowthPercentPerHour`` of the limit);
worse: it grew by half again and by more than that floor; else no effect.
Until enough pods on the new template have a trend, and the review's time
has passed, it is pending, saying what it waits for. Purely computational:
no clock, no I/O; the operator and ``simulate`` call the same ``judge``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from memoryguard_kuberay.core.policy.trend import median
from memoryguard_kuberay.core.policy.window import PodWindow
from memoryguard_kuberay.core.units import fmt_duration

MIB = 1024**2
EFFECTIVE_RATIO = 0.5  # the creep at most this fraction of before's
WORSE_RATIO = 1.5  # at least this multiple of before's


class Verdict(str, enum.Enum):
    PENDING = "Pending"
    EFFECTIVE = "Effective"
    NO_EFFECT = "NoEffect"
    WORSE = "Worse"

    @property
    def ineffective(self) -> bool:
        return self in (Verdict.NO_EFFECT, Verdict.WORSE)


@dataclasses.dataclass(frozen=True)
class Review:
    verdict: Verdict
    message: str  # a person's sentence: the numbers and the verdict
    before_bytes_per_h: float | None = None  # median creep of the pods before
    after_bytes_per_h: float | None = None  # median creep of the pods on the remediated template
    before_pods: int = 0
    after_pods: int = 0


def creep_bytes_per_h(window: PodWindow) -> float | None:
    """A pod's creep, once its trend spans the policy's minimum: None before."""
    fit = window.used.fit
    if fit is None or fit.span_s < window.settings.trend_min_span_s:
        return None
    return fit.line.slope * 3600.0


def mib_per_h(bph: float) -> str:
    return f"{bph / MIB:.0f} MiB/h"


def judge(before: Sequence[float], after: Sequence[float], *, noise_bytes_per_h: float, min_pods: int,
          watched_s: float, review_after_s: float) -> Review:
    """``before``/``after``: each pod's creep (bytes an hour) on either side
    of the remediation; ``watched_s``: time since it was applied;
    ``noise_bytes_per_h``: less than this is not a change."""
    n_before, n_after = len(before), len(after)
    if not before:
        return Review(Verdict.PENDING, "no pod before the remediation had a trend to compare with", None, None, 0,
                      n_after)
    b = median(before)
    if n_after < min_pods or watched_s < review_after_s:
        # No elapsed time in it: the status that holds it is written only when it changes.
        return Review(Verdict.PENDING, f"waiting: {n_after} of {min_pods} pod(s) on the new template with a "
                                       f"trend, and {fmt_duration(review_after_s)} since it was applied",
                      b, median(after) if after else None, n_before, n_after)
    a = median(after)
    if a <= EFFECTIVE_RATIO * b and b - a > noise_bytes_per_h:
        verdict, word = Verdict.EFFECTIVE, "effective"
    elif a >= WORSE_RATIO * max(b, 0.0) and a - b > noise_bytes_per_h:
        verdict, word = Verdict.WORSE, "worse"
    else:
        verdict, word = Verdict.NO_EFFECT, "no effect"
    return Review(verdict, f"creep {mib_per_h(b)} -> {mib_per_h(a)} over {n_after} pod(s) on the new template "
                           f"({n_before} before), {fmt_duration(watched_s)}: {word}", b, a, n_before, n_after)
