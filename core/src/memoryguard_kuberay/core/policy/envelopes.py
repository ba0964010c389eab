"""The envelopes of a pod that swings, from the floor series' two-hour
buckets (each keeps its low and its peak, over a day and a bit): the floor
it returns to between epochs, batches or days, and the peaks it reaches.
A leak under a swing may show in either one alone: memory no epoch frees
lifts the floor; a batch whose peaks grow while its troughs stay put is
killed at a peak, with the means reading flat (issue 59, 4). Purely
computational."""

from __future__ import annotations

from memoryguard_kuberay.core.policy.projection import NO, OOM_AT, Projection, Verdict, jumps, project
from memoryguard_kuberay.core.policy.trend import theil_sen
from memoryguard_kuberay.core.policy.window import PodWindow
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_oom_in, fmt_rate

DAY_S = 86400.0
FLOOR_MIN_SPAN_S = 24 * 3600.0  # a whole day of floors: a daily swing is not a trend
FLOOR_MIN_TAU = 0.6
FLOOR_DAY_RISE = 0.6  # of the trend's rise over a day, seen day over day


def floor_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """The floor rising: a workload that climbs and drops back every epoch
    or batch, but never quite as low as before (memory no epoch frees), or a
    leak too slow and noisy for hours to show. Fitted over a day of two-hour
    lows; projected with the swing above the floor to the limit."""
    limit = window.limit_bytes
    if not limit:
        return NO, None
    p = project(window.floor, now_s=now_s, ceiling=OOM_AT * limit,
                min_slope_per_s=settings.min_growth_fraction_per_h * limit / 3600.0, settings=settings,
                min_span_s=FLOOR_MIN_SPAN_S, min_tau=FLOOR_MIN_TAU, highest_peaks=True)
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    # Above yesterday's floor at the same hour, by most of what the trend says:
    # a daily swing fitted over one day can slope, but it comes back.
    day = int(DAY_S // window.floor.bucket_s)
    lows = [b.low for b in window.floor.buckets]
    rises = [lows[i + day] - lows[i] for i in range(len(lows) - day)]
    if not rises or min(rises) < FLOOR_DAY_RISE * p.slope_per_s * DAY_S:
        return NO, p
    return Verdict(True, f"the floor it returns to rises {fmt_rate(p.slope_per_s * 3600)} over a day, "
                         f"{fmt_oom_in(p.eta_s)}"), p


PEAKS_SPAN_S = 12 * 3600.0  # the peaks fitted: the newest six two-hour buckets
# And all six of them: a few batches are no trend, and over six a step (a
# serving pod's morning surge, up in under an hour and held) is told from a
# climb by how much of the rise it took (projection.jumps).
PEAKS_MIN_SPAN_S = 12 * 3600.0
PEAKS_MIN_TAU = 0.6
# The troughs rise at most this share of the peaks' pace: the swing itself
# grows. Growth of the whole (the means, the floor) is the creep's and the
# floor's to read, with their own checks.
TROUGHS_FLAT = 0.25
NEW_HIGH = 0.005


def peaks_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """The peaks rising while the troughs hold: a batch or a request burst
    that needs a little more each time (a buffer that grows with what it
    has seen, a cache filled only at the peak) while what is kept between
    them does not grow. The two-hour buckets' peaks, fitted over the last
    twelve hours, projected from the highest of the newest to the limit."""
    limit = window.limit_bytes
    series = window.floor
    if not limit or series.buckets.size < 2:
        return NO, None
    starts, lows, peaks = (series.buckets.column(i) for i in range(3))
    # Still making new highs: the newest peak above every earlier one of the
    # day and a bit by NEW_HIGH of the limit. Bursts to the same height
    # every hour, their heights jittering, read as a slope now and then
    # (a healthy pod bursting to 98% was rotated so).
    open_peak = series.open.peak if series.open is not None and series.open.n else 0.0
    newest = max(peaks[-1], open_peak)
    if len(peaks) < 2 or newest - max(peaks[:-1]) < NEW_HIGH * limit:
        return NO, None
    first = next(i for i, t in enumerate(starts) if t >= starts[-1] + series.bucket_s - PEAKS_SPAN_S)
    # At their buckets' middles: a bucket's peak comes anywhere in its two hours.
    ts, lows, peaks = [t + series.bucket_s / 2 for t in starts[first:]], lows[first:], peaks[first:]
    if ts[-1] - ts[0] + series.bucket_s < PEAKS_MIN_SPAN_S:
        return NO, None
    if jumps(ts, peaks, series.bucket_s):
        return NO, None  # most of the rise in one step: a surge that holds (morning_surge_01 of field-39), no leak
    line, floor = theil_sen(ts, peaks), theil_sen(ts, lows)
    min_slope = settings.min_growth_fraction_per_h * limit / 3600.0
    if line is None or floor is None or line.slope < min_slope or line.tau < PEAKS_MIN_TAU:
        return NO, None
    # Now: the newest peak (the open bucket's among them), or the line's, whichever is higher.
    level = max(newest, line.at(now_s))
    eta = max(0.0, (OOM_AT * limit - level) / line.slope)
    p = Projection(slope_per_s=line.slope, level=level, eta_s=eta, sustained=True, why_not="")
    if floor.slope > TROUGHS_FLAT * line.slope or eta > settings.horizon_s:
        return NO, p
    return Verdict(True, f"its peaks rise {fmt_rate(line.slope * 3600)} while the troughs between them hold, "
                         f"{fmt_oom_in(eta)}"), p
