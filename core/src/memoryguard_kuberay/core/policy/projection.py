"""A series' trend projected to a ceiling (the limit, the node, a full
store): the level and pace now, the time left, and whether the growth is
sustained enough to act on, or why not. Purely computational."""

from __future__ import annotations

import dataclasses

from memoryguard_kuberay.core.policy.trend import Line, deepest_fall, theil_sen
from memoryguard_kuberay.core.policy.window import Series, TrendFit
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_duration, fmt_oom_in

# Memory in use (anon + shmem) meets the OOM killer a little below the limit:
# the kernel's own memory and the last pages of cache are charged there too.
OOM_AT = 0.99


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A detector's reading: whether it fired, and what it saw."""

    fired: bool
    note: str = ""


NO = Verdict(False)


@dataclasses.dataclass(frozen=True)
class Projection:
    """A trend projected to a ceiling."""

    slope_per_s: float
    level: float  # trend level now, plus how far peaks ride above it
    eta_s: float | None  # None: not growing towards the ceiling
    sustained: bool  # enough history, fast enough, not slowing down
    why_not: str  # when not sustained: why
    swing: float = 0.0  # how far the series' peaks ride above its trend (its sawtooth's half, or so)
    # A new climb held one tail before it is acted on (onset_projection): not
    # sustained, but its time left is real and shown to users.
    watching: bool = False


# The onset of growth after a flat stretch (issue 39): the recent half of
# the window (or the climb within it) rising this steadily over its whole
# span (Kendall tau), at least this many times the whole window's pace. At
# twice, a sudden leak lost the onset reading once its climb filled a third
# of the window, and the whole window's line, part of it flat, read the pace
# at half of what it was (four drawn sudden leaks were caught 4-7 minutes
# later than at one and a half).
ONSET_MIN_TAU = 0.8
ONSET_RATIO = 1.5
ONSET_TAIL = 3  # buckets (a quarter of an hour at the default five minutes) still climbing at the end


def project(series: Series, *, now_s: float, ceiling: float, min_slope_per_s: float,
            settings: PolicySettings, min_span_s: float | None = None, min_tau: float | None = None,
            highest_peaks: bool = False, onset_horizon_s: float | None = None,
            find_onset: bool = False) -> Projection | None:
    """Project a series' trend to ``ceiling``. None before any fit exists.
    The span and consistency needed default to the trend settings'; peaks
    ride above the trend by their median offset, or by their highest.
    ``onset_horizon_s`` (the horizon of the rule that reads it): growth that
    began within the window is projected from the recent half's own line,
    or with ``find_onset`` from the climb's own within it (``onset_climb``)."""
    fit = series.fit
    if fit is None:
        return None
    if onset_horizon_s is not None and (p := onset_projection(
            series, fit, now_s=now_s, ceiling=ceiling, min_slope_per_s=min_slope_per_s, settings=settings,
            min_span_s=min_span_s, horizon_s=onset_horizon_s, find_onset=find_onset)) is not None:
        return p
    slope = fit.line.slope
    level = fit.level_at(now_s) + (fit.peak_max_offset if highest_peaks else fit.peak_offset)
    # The time left at the recent pace when that is slower: growth that
    # eases off towards a daily peak is not projected at its morning pace.
    recent = None if fit.recent is None else fit.recent.slope
    pace = min(slope, recent) if recent is not None and recent > 0 else slope
    eta = (ceiling - level) / pace if slope > 0 else None
    if eta is not None and eta < 0:
        eta = 0.0
    why_not = ""
    if fit.span_s < (settings.trend_min_span_s if min_span_s is None else min_span_s):
        why_not = f"only {fmt_duration(fit.span_s)} of history"
    elif slope < min_slope_per_s:
        why_not = "no sustained growth"
    elif fit.line.tau < (settings.trend_min_consistency if min_tau is None else min_tau):
        why_not = f"growth is not consistent (Kendall tau {fit.line.tau:.2f})"
    elif recent is None or recent < settings.deceleration_ratio * max(
            slope, fit.early_slope if fit.early_slope is not None else slope):
        why_not = "growth is slowing down (warm-up or a cache filling to its bound)"
    elif fit.top is not None and fit.top[0] > now_s and fit.top[1] + fit.peak_offset < ceiling:
        why_not = f"growth is levelling off below the limit, topping out in {fmt_duration(fit.top[0] - now_s)}"
    return Projection(slope_per_s=slope, level=level, eta_s=eta, sustained=not why_not, why_not=why_not,
                      swing=fit.peak_max_offset if highest_peaks else fit.peak_offset)


def onset_projection(series: Series, fit: TrendFit, *, now_s: float, ceiling: float, min_slope_per_s: float,
                     settings: PolicySettings, min_span_s: float | None, horizon_s: float,
                     find_onset: bool = False) -> Projection | None:
    """A leak that begins after hours of flat memory: the whole window's
    line is a blend of the flat part and the climb, so it lags both the
    level and the pace by as much as the flat part weighs (a real 1 GiB pod
    leaking 10 MiB/s read "+2.0 GiB/h" at 97% of its limit, and the kernel
    killed it). When the recent half rises steadily over its whole span, at
    least ``ONSET_RATIO`` times the window's pace, its own line says where
    memory is and how fast it goes. None when it does not."""
    recent = fit.recent
    if find_onset and (climb := onset_climb(series, fall=ENVELOPE_MIN_FALL * ceiling)) is not None:
        recent = climb
    if recent is None or recent.tau < ONSET_MIN_TAU:
        return None
    if recent.slope < max(min_slope_per_s, ONSET_RATIO * max(fit.line.slope, 0.0)):
        return None
    # Still climbing at the end (a ramp that has levelled off fits a steep
    # line through its S-shape, and that line overshoots the level it holds).
    if not still_climbing(series, recent.slope, settings):
        return None
    # Where memory is: the half's line, never above the newest bucket's own
    # level carried on at the half's pace.
    last_start, last_mean = series.buckets.column(0)[-1], series.buckets.column(1)[-1]
    newest = last_mean + recent.slope * max(0.0, now_s - (last_start + series.bucket_s / 2))
    level = min(recent.at(now_s), newest)
    eta = max(0.0, (ceiling - level) / recent.slope)
    why_not = ""
    if fit.span_s < (settings.trend_min_span_s if min_span_s is None else min_span_s):
        why_not = f"only {fmt_duration(fit.span_s)} of history"
    elif fit.top is not None and fit.top[0] > now_s and fit.top[1] < ceiling:
        why_not = f"growth is levelling off below the limit, topping out in {fmt_duration(fit.top[0] - now_s)}"
    elif eta > horizon_s - ONSET_TAIL * series.bucket_s:
        # A new climb is acted on one tail later than a settled trend: a
        # ramp that levels off there (a cache filled, a model loaded) shows
        # it by then, and a leak still leaves most of the horizon.
        why_not = (f"a new climb, {fmt_oom_in(eta)} at its pace: watched another "
                   f"{fmt_duration(ONSET_TAIL * series.bucket_s)}")
        return Projection(slope_per_s=recent.slope, level=level, eta_s=eta, sustained=False, why_not=why_not,
                          swing=fit.peak_offset, watching=True)
    return Projection(slope_per_s=recent.slope, level=level, eta_s=eta, sustained=not why_not, why_not=why_not,
                      swing=fit.peak_offset)


# A climb that falls back is not a leak (issue 59, 2; issue 58, 5): the
# newest reading this far below the projection's level, and further than
# FALLBACK_SWINGS times how far the series' peaks ride above its trend (a
# sawtooth's trough is about twice that below its peaks), says the growth
# has stopped, whatever the buckets, which still hold the climb, say. A
# real pod whose leak had stopped read 29% of its limit and "projected OOM
# in 20 s", and was rotated; a drawn one fell from 89% to 48% and was
# rotated one sample later.
FALLBACK = 0.10  # of the limit
FALLBACK_SWINGS = 3.0


def fallen_back(p: Projection | None, newest: float | None, limit: float) -> Projection | None:
    """``p`` as neither sustained nor watched when the newest reading has
    fallen back below it (FALLBACK), else ``p`` as it is."""
    if p is None or not (p.sustained or p.watching) or newest is None or not limit:
        return p
    drop = p.level - newest
    if drop <= max(FALLBACK * limit, FALLBACK_SWINGS * p.swing):
        return p
    return dataclasses.replace(p, sustained=False, watching=False, why_not=(
        f"memory fell back to {newest / limit:.0%} of the limit, {drop / limit:.0%} below the trend: "
        "the climb has stopped"))


def onset_climb(series: Series, *, fall: float) -> Line | None:
    """The climb since it began, within the window's recent half: of the
    half's tails (``Series.tails``) that rise steadily (``ONSET_MIN_TAU``)
    with no fall of ``fall`` in them (a collection: a fast sawtooth's teeth
    are the envelope's to read), the steepest. The half taken whole mixes
    the flat minutes before a sudden leak's onset, and a slow sawtooth's
    last fall, into its line: it read a drawn leak's pace at 0.62 of the
    limit an hour where the leak alone added 0.75, and one under a 22-minute
    tooth lost its steadiness to the tooth's fall (caught 28 minutes ahead
    of its OOM). Each tail begins later than the one before, so the
    steepest starts where the climb did; a tail that began before it is
    flattened by the minutes before. None when no tail rises steadily."""
    steady = [t.line for t in series.tails if t.fall < fall and t.line.tau >= ONSET_MIN_TAU]
    return max(steady, key=lambda line: line.slope, default=None)


MAX_JUMP = 0.5  # of a climb's rise, within JUMP_BUCKETS: a burst jumps, a climb climbs
JUMP_BUCKETS = 2  # a burst comes up within a minute or two (the generator's ramps a minute: two buckets' means)


def jumps(starts: list[float], values: list[float], bucket_s: float) -> bool:
    """Most of the climb in ``values`` is a step of ``JUMP_BUCKETS``
    adjacent buckets (a sidecar's gap is no step): more than ``MAX_JUMP`` of
    the rise from the lowest to the newest. A burst comes up in a minute or
    two and holds; a leak climbs minute by minute."""
    rise = values[-1] - min(values)
    k = JUMP_BUCKETS
    steps = [values[i + k] - values[i] for i in range(len(values) - k)
             if starts[i + k] - starts[i] <= (k + 0.5) * bucket_s]
    return rise > 0 and bool(steps) and max(steps) > MAX_JUMP * rise


def still_climbing(series: Series, pace_per_s: float, settings: PolicySettings) -> bool:
    """The series' last ONSET_TAIL buckets still climb, at least
    ``decelerationRatio`` of ``pace_per_s``: growth that has levelled off or
    fallen back (a burst ended, a ramp held) is no longer climbing, however
    steep the line through what came before."""
    return climbing(series.buckets.column(0), series.buckets.column(1), pace_per_s, settings)


def climbing(starts: list[float], values: list[float], pace_per_s: float, settings: PolicySettings) -> bool:
    """The last ONSET_TAIL of ``values`` (at ``starts``) climb at least
    ``decelerationRatio`` of ``pace_per_s``."""
    if len(values) < ONSET_TAIL:
        return False
    line = theil_sen(starts[-ONSET_TAIL:], values[-ONSET_TAIL:])
    return line is not None and line.slope >= settings.deceleration_ratio * pace_per_s


# A climb under a sawtooth (issue 39): the highest peak of the last half
# window, bucket by bucket (the upper envelope), flattens a sawtooth whose
# period is up to half the window and follows a climb beneath it.
ENVELOPE_REACH = 0.5  # of the series' window
# A sawtooth the means cannot see through: somewhere in the window they fell
# this much of the ceiling below their highest before (a collection). Under
# smaller swings the means' own line is read as it is (sudden leaks under a
# sawtooth of up to 7% were caught by it half an hour ahead), and a noisy
# warm-up's tail on a slow sawtooth's rise made a steady envelope (a drawn
# healthy pod rotated at 71%).
ENVELOPE_MIN_FALL = 0.05


def envelope_projection(series: Series, *, now_s: float, ceiling: float, min_slope_per_s: float,
                        min_tau: float, settings: PolicySettings) -> Projection | None:
    """Growth under a sawtooth: a garbage collector's rise and fall every few
    minutes, by up to a tenth of the limit, keeps the one-minute means'
    Kendall tau under any bar for a steady climb while a leak beneath it
    runs to the OOM (seen: a sudden leak under a 10% sawtooth of 6 minutes,
    never caught). Where the means fell by ``ENVELOPE_MIN_FALL`` somewhere
    in the window, the upper envelope of the buckets' peaks (each the
    highest of the last ``ENVELOPE_REACH`` of the window) is flat for a
    healthy sawtooth and climbs steadily with a leak; it is also what meets
    the limit first. Projected from the envelope's line, when it rises
    steadily (``min_tau``) and fast enough, and still makes new highs now;
    else None."""
    reach = max(2, int(ENVELOPE_REACH * series.window_s / series.bucket_s))
    if series.buckets.size < 2 * reach - 1:
        return None
    # First the cheap test most pods end at (the rule runs for every pod a cycle).
    means = series.buckets.column(1)
    if deepest_fall(means) < ENVELOPE_MIN_FALL * ceiling:
        return None  # no sawtooth here: the means' own line is the reading
    starts, peaks = series.buckets.column(0), series.buckets.column(2)
    envelope = [max(peaks[i - reach + 1: i + 1]) for i in range(reach - 1, len(peaks))]
    ts = starts[reach - 1:]
    line = theil_sen(ts, envelope)
    if line is None or line.tau < min_tau or line.slope < min_slope_per_s:
        return None
    # A burst's first minutes (up within a minute or two, on a slower
    # sawtooth's rise) also make a steady-looking envelope: most of its rise is the jump.
    if envelope[-1] <= envelope[0] or jumps(ts, envelope, series.bucket_s):
        return None
    # Making new highs now: the newest minute's peak is the envelope's high,
    # and its last minutes still climb. Between new highs (a tooth's fall)
    # the next one says.
    if peaks[-1] < envelope[-2] or not climbing(ts, envelope, line.slope, settings):
        return None
    level = envelope[-1] + line.slope * max(0.0, now_s - (ts[-1] + series.bucket_s))
    eta = max(0.0, (ceiling - level) / line.slope)
    return Projection(slope_per_s=line.slope, level=level, eta_s=eta, sustained=True, why_not="")
