"""Detectors: small functions of one ``Observation`` (a pod's window, the
settings, now, and the two trend projections made once), each answering one
question with a verdict and a short note; all have that one signature.
Rules in ``decide`` combine them (AND within a group, OR across groups, as
oomd does). Purely computational."""

from __future__ import annotations

import bisect
import dataclasses

from memoryguard_kuberay.core.policy.envelopes import floor_projection, peaks_projection
from memoryguard_kuberay.core.policy.projection import (
    NO,
    OOM_AT,
    Projection,
    Verdict,
    envelope_projection,
    fallen_back,
    jumps,
    project,
    still_climbing,
)
from memoryguard_kuberay.core.policy.window import HoldTimer, PodWindow, Series
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration, fmt_oom_in, fmt_rate

PLATEAU_HORIZON_S = 86400.0


RESIZE_SETTLE_WINDOWS = 2  # trend windows the trend waits after an in-place resize


def creep_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """A sustained upward trend of memory in use whose projection reaches
    the limit within the horizon."""
    limit = window.limit_bytes
    if not limit:
        return NO, None
    p = project(window.used, now_s=now_s, ceiling=OOM_AT * limit,
                min_slope_per_s=settings.min_growth_fraction_per_h * limit / 3600.0, settings=settings,
                onset_horizon_s=settings.horizon_s)
    p = fallen_back(p, _newest_used(window), limit)
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    if window.resized and window.age_s < RESIZE_SETTLE_WINDOWS * settings.trend_window_s:
        # After an in-place resize the workload may grow into its new room
        # for hours: the trend waits until growth has had time to stop.
        return NO, p
    if not trend_on_new_ground(window, settings, now_s, limit):
        return NO, p
    return Verdict(True, f"growing {fmt_rate(p.slope_per_s * 3600)}, {fmt_oom_in(p.eta_s)}"), p


def _newest_used(window: PodWindow) -> float | None:
    last = window.last
    used = last.unreclaimable_bytes if last is not None else None
    return None if used is None else float(used)


def trend_on_new_ground(window: PodWindow, settings: PolicySettings, now_s: float, limit: int) -> bool:
    """The newest bucket of memory in use on new ground against everything
    before the trend window: what the trend rules, and the ladder's own
    replacement, want of a climb."""
    return bool(window.used.buckets) and new_ground(window, since_s=now_s - settings.trend_window_s,
                                                    level=window.used.buckets[-1].mean, limit=limit)


def new_ground(window: PodWindow, *, since_s: float, level: float, limit: int) -> bool:
    """The level is above every peak the pod reached before ``since_s`` (a
    day back, in the floor series' two-hour buckets) by RAPID_NEW_GROUND of
    the limit. A serving pod's morning surge climbs as steeply every morning
    to where it climbed the day before, and a trend window of hours has
    forgotten that day (issue 39); a leak climbs above it."""
    older = [b.peak for b in window.floor.buckets if b.start_s + window.floor.bucket_s <= since_s]
    return not older or level >= max(older) + RAPID_NEW_GROUND * limit


# Rapid growth must rise this steadily (Kendall tau of one-minute means) and
# this fast: slower growth has time to show in the trend.
RAPID_MIN_TAU = 0.8
RAPID_MIN_GROWTH_PER_H = 0.1  # of the limit
RAPID_NEW_GROUND = 0.03  # of the limit above the highest peak before the climb


def rapid_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """A leak that reaches the limit within the hour (the trend, fitted over
    hours, sees it too late): steady growth of one-minute means for at least
    ``rapid_min_span_s``, projected to the limit within ``rapid_horizon_s``.
    A burst rises in a minute and holds: not steady growth."""
    limit = window.limit_bytes
    if not limit:
        return NO, None
    min_slope = RAPID_MIN_GROWTH_PER_H * limit / 3600.0
    p = project(window.rapid, now_s=now_s, ceiling=OOM_AT * limit, min_slope_per_s=min_slope, settings=settings,
                min_span_s=settings.rapid_min_span_s, min_tau=RAPID_MIN_TAU,
                onset_horizon_s=settings.rapid_horizon_s if left_its_band(window.rapid) else None,
                # Where the climb began, on the one-minute means only: on the trend's
                # five-minute buckets an epoch's climb is such a tail (23 of 24 healthy
                # epochs pods drawn were rotated).
                find_onset=True)
    p = fallen_back(p, _newest_used(window), limit)
    under_sawtooth = False
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.rapid_horizon_s:
        # The means too unsteady for the bar, or too slow: the peaks' envelope
        # may show a climb a sawtooth hides.
        env = envelope_projection(window.rapid, now_s=now_s, ceiling=OOM_AT * limit, min_slope_per_s=min_slope,
                                  min_tau=RAPID_MIN_TAU, settings=settings)
        if env is None or env.eta_s is None or env.eta_s > settings.rapid_horizon_s:
            return NO, p
        p, under_sawtooth = env, True
    if window.resized and window.age_s < settings.trend_window_s:
        return NO, p  # growing into the room a resize just gave (the critical rule still watches)
    if not under_sawtooth:
        if not still_climbing(window.rapid, p.slope_per_s, settings):
            # A climb that has just fallen back (a burst over, on top of a
            # sawtooth's rise) still fits a steep line through the minutes before.
            return NO, p
        # And a burst as it comes up: on a sawtooth's rise, its first minute
        # is most of the recent half's climb (a drawn healthy pod, 74% to 97%
        # in a minute, read "+19.8 GiB/h, projected OOM in 32 m").
        starts, means = window.rapid.buckets.column(0), window.rapid.buckets.column(1)
        recent = bisect.bisect_left(starts, now_s - window.rapid.window_s / 2)
        if len(means) - recent >= 2 and jumps(starts[recent:], means[recent:], window.rapid.bucket_s):
            return NO, p
    # New ground only: a climb the pod has made before and come back from (an
    # epoch, a batch, a sawtooth) stops where it stopped then.
    # The pod's first climbs are its warm-up: history before the climb (two
    # rapid windows, an hour by default) tells what it has done before.
    before = window.rapid.buckets[0].start_s if window.rapid.buckets else now_s
    seen = [b for b in window.used.buckets if b.start_s + window.used.bucket_s <= before]
    if not seen or before - seen[0].start_s < 2 * settings.rapid_window_s:
        return NO, p
    # And a day back: a serving pod's morning surge climbs as steeply every
    # morning to where it climbed the day before (the trend window alone,
    # four hours, has forgotten it; issue 39). The floor series keeps 28 h
    # of two-hour buckets, their peaks with them.
    # (Under a sawtooth, its peaks: a trough's mean is below where it was.)
    level = p.level if under_sawtooth else window.rapid.buckets[-1].mean
    if level < max(b.peak for b in seen) + RAPID_NEW_GROUND * limit or not new_ground(
            window, since_s=before, level=level, limit=limit):
        return NO, p
    how = "its peaks growing fast and steadily under a sawtooth" if under_sawtooth else "growing fast and steadily"
    return Verdict(True, f"{how}, {fmt_rate(p.slope_per_s * 3600)}, {fmt_oom_in(p.eta_s)}"), p


def left_its_band(series: Series) -> bool:
    """The newest bucket stands above every bucket of the window's earlier
    half by at least as much as that half varied: growth that has left the
    band the pod moved in, not the rising half of a sawtooth (which a fit of
    the recent half alone would read as a sudden climb, and project the OOM
    hours early)."""
    means = series.buckets.column(1)
    early = means[: len(means) // 2]
    return bool(early) and means[-1] - max(early) >= max(early) - min(early)


def node_projection(window: PodWindow, settings: PolicySettings,
                    now_s: float) -> tuple[Verdict, Projection | None]:
    """A pod with no memory limit is judged against what it could reach now:
    memory in use plus the node's available memory (the sidecar serves the
    node's MemAvailable for such a container), less the kubelet's eviction
    threshold. Past it the kubelet evicts the pod or the node's OOM killer
    takes it (issue 39). The trend's rules as the creep's, new ground too."""
    ceiling = window.node_ceiling_bytes
    if window.limit_bytes or not ceiling or not window.used.buckets:
        return NO, None
    p = project(window.used, now_s=now_s, ceiling=ceiling,
                min_slope_per_s=settings.min_growth_fraction_per_h * ceiling / 3600.0, settings=settings,
                onset_horizon_s=settings.horizon_s)
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    if not trend_on_new_ground(window, settings, now_s, int(ceiling)):
        return NO, p
    return Verdict(True, f"no memory limit: growing {fmt_rate(p.slope_per_s * 3600)}, judged against the node "
                         f"({fmt_bytes(ceiling)} reachable now), {fmt_oom_in(p.eta_s)}"), p


def store_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """Object-store occupancy trending to full within the horizon (objects
    that are never released: a Plasma reference leak)."""
    p = project(window.store, now_s=now_s, ceiling=settings.store_full_fraction,
                min_slope_per_s=settings.min_growth_fraction_per_h / 3600.0, settings=settings)
    if (stalled := window.spill_stalled(now_s)) is not None and window.last is not None:
        # Not a trend to wait for: the store climbs where Ray would spill, and
        # nothing more goes to disk (issue 59, 3).
        quiet, rise = stalled
        return Verdict(True, f"object store {window.last.store_fraction:.0%} full and filling: up {rise * 100:.0f} "
                             f"points since Ray last spilled, {fmt_duration(quiet)} ago (spilling stopped, "
                             f"{fmt_bytes(window.last.plasma_spilled_bytes or 0)} on disk)"), p
    if p is not None and window.spilling(now_s):
        # Objects a leak pins are never released; a store Ray spills from is
        # being consumed and refilled by a pipeline.
        return NO, p
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    return Verdict(True, f"object store {p.level:.0%} full, filling {p.slope_per_s * 360000:.1f} points/h, "
                         f"{settings.store_full_fraction:.0%} in {fmt_duration(p.eta_s)}"), p


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one decision looks at: the window, the settings, now, and the
    two trend projections, made once and shared by the detectors and the
    evidence."""

    window: PodWindow
    settings: PolicySettings
    now_s: float
    creep: tuple[Verdict, Projection | None]
    filling: tuple[Verdict, Projection | None]
    rapid: tuple[Verdict, Projection | None]
    floor: tuple[Verdict, Projection | None]
    node: tuple[Verdict, Projection | None]
    peaks: tuple[Verdict, Projection | None]

    @classmethod
    def at(cls, window: PodWindow, settings: PolicySettings, now_s: float) -> Observation:
        return cls(window, settings, now_s, creep_projection(window, settings, now_s),
                   store_projection(window, settings, now_s), rapid_projection(window, settings, now_s),
                   floor_projection(window, settings, now_s), node_projection(window, settings, now_s),
                   peaks_projection(window, settings, now_s))


# -- the detectors: Observation -> Verdict ---------------------------------------------
def creep(obs: Observation) -> Verdict:
    return obs.creep[0]


def store_filling(obs: Observation) -> Verdict:
    return obs.filling[0]


def rapid_growth(obs: Observation) -> Verdict:
    return obs.rapid[0]


def floor_rising(obs: Observation) -> Verdict:
    return obs.floor[0]


def peaks_rising(obs: Observation) -> Verdict:
    return obs.peaks[0]


def node_running_out(obs: Observation) -> Verdict:
    return obs.node[0]


def _held(timer: HoldTimer, needed_s: float, now_s: float) -> float | None:
    """How long a condition has held, if at least ``needed_s``."""
    held = timer.held_for(now_s)
    return held if timer.since is not None and held >= needed_s else None


def critical_usage(obs: Observation) -> Verdict:
    s = obs.settings
    held = _held(obs.window.critical, s.critical_for_s, obs.now_s)
    if held is None:
        return NO
    return Verdict(True, f"at or above {s.critical_fraction:.0%} of the limit for {fmt_duration(held)}")


def pressure(obs: Observation) -> Verdict:
    held = _held(obs.window.pressure, obs.settings.pressure_for_s, obs.now_s)
    if held is None:
        return NO
    psi = obs.window.last.psi_full_avg10_pct if obs.window.last else None
    return Verdict(True, f"memory pressure (PSI full {psi}%) for {fmt_duration(held)}")


def store_full(obs: Observation) -> Verdict:
    """A store held full that Ray does not spill from: its objects are
    pinned. Where Ray does not say what it spilled, a full store alone is
    no leak (it may be spilling as designed): only with memory in use
    growing as well."""
    s = obs.settings
    held = _held(obs.window.store_full, s.store_full_for_s, obs.now_s)
    if held is None or obs.window.spilling(obs.now_s):
        return NO
    full = f"object store at or above {s.store_full_fraction:.0%} for {fmt_duration(held)}"
    if obs.window.spill_known(obs.now_s):
        spilled = obs.window.last.plasma_spilled_bytes if obs.window.last else None
        if spilled:
            return Verdict(True, f"{full}, spilling stopped ({fmt_bytes(spilled)} on disk, unchanged)")
        return Verdict(True, f"{full}, nothing spilled to disk")
    # The processes' own memory growing, as an established trend: memory in
    # use counts the store's pages (shmem), which a filling store makes rise
    # on a healthy pod, and a slope read before the trend is established is
    # noise (30 minutes in it read +47 GiB/h on one; issue 39).
    limit = obs.window.limit_bytes or 0
    if not limit:
        return NO
    # Without memory.stat (no anon) memory in use is all there is to read.
    last = obs.window.last
    anon = last is not None and last.anon_bytes is not None
    series = obs.window.anon if anon else obs.window.used
    if series is None:
        return NO
    # Projected to where it meets the OOM beside the store's pages, within
    # the policy's horizon as any growth: a full store that may be spilling
    # is no harm of its own, and a process growing for days is the trend's
    # to time (issue 39's drawn pods: rotated 6-15 h before their OOM).
    beside = (last.shmem_bytes or 0) if anon and last is not None else 0
    growth = project(series, now_s=obs.now_s, ceiling=OOM_AT * limit - beside,
                     min_slope_per_s=s.min_growth_fraction_per_h * limit / 3600.0, settings=s)
    if growth is None or not growth.sustained or growth.eta_s is None or growth.eta_s > s.horizon_s:
        return NO
    what = "the processes' own memory (anon)" if anon else "memory in use"
    return Verdict(True, f"{full}, spilling unknown (the raylet's metrics say nothing of it) and {what} growing "
                         f"{fmt_rate(growth.slope_per_s * 3600.0)}, {fmt_oom_in(growth.eta_s)}")


def high_usage(obs: Observation) -> Verdict:
    last = obs.window.last
    frac = last.used_fraction if last else None
    if frac is None or frac < obs.settings.pressure_min_usage_fraction:
        return NO
    return Verdict(True, f"{frac:.0%} of the limit")


def oom_kills(obs: Observation) -> Verdict:
    seen = obs.window.oom_kills_seen
    if seen <= 0:
        return NO
    return Verdict(True, f"the kernel OOM-killed {seen} process(es) in the container")


def plateau(obs: Observation) -> Verdict:
    """Memory that grew for hours after warm-up and then flattened high: the
    shape of allocator fragmentation (or a cache at its bound). Worth
    jemalloc, never a rotation."""
    window, settings, now_s = obs.window, obs.settings, obs.now_s
    limit = window.limit_bytes
    fit = window.used.fit
    base = window.baseline_used_bytes
    if not limit or fit is None or base is None or fit.span_s < settings.trend_min_span_s:
        return NO
    level = fit.level_at(now_s)
    # Flattened: at the present pace it would take more than a day to reach
    # the limit (fragmentation keeps creeping a little for many hours).
    slope = fit.line.slope
    flat = slope <= 0 or (limit - level) / slope >= PLATEAU_HORIZON_S
    grew = level - base >= settings.plateau_growth_fraction * limit
    if not (flat and grew and level >= settings.plateau_min_fraction * limit):
        return NO
    return Verdict(True, f"grew from {fmt_bytes(base)} to {fmt_bytes(level)} after warm-up and holds there")
