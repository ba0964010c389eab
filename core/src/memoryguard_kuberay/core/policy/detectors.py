"""Detectors: small functions of one ``Observation`` (a pod's window, the
settings, now, and the two trend projections made once), each answering one
question with a verdict and a short note; all have that one signature.
Rules in ``decide`` combine them (AND within a group, OR across groups, as
oomd does). Purely computational."""

from __future__ import annotations

import dataclasses

from memoryguard_kuberay.core.policy.window import HoldTimer, PodWindow, Series
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration, fmt_rate


@dataclasses.dataclass(frozen=True)
class Verdict:
    fired: bool
    note: str = ""


NO = Verdict(False)
PLATEAU_HORIZON_S = 86400.0


@dataclasses.dataclass(frozen=True)
class Projection:
    """A trend projected to a ceiling."""

    slope_per_s: float
    level: float  # trend level now, plus how far peaks ride above it
    eta_s: float | None  # None: not growing towards the ceiling
    sustained: bool  # enough history, fast enough, not slowing down
    why_not: str  # when not sustained: why


def project(series: Series, *, now_s: float, ceiling: float, min_slope_per_s: float,
            settings: PolicySettings) -> Projection | None:
    """Project a series' trend to ``ceiling``. None before any fit exists."""
    fit = series.fit
    if fit is None:
        return None
    slope = fit.line.slope
    level = fit.level_at(now_s) + fit.peak_offset
    eta = (ceiling - level) / slope if slope > 0 else None
    if eta is not None and eta < 0:
        eta = 0.0
    why_not = ""
    if fit.span_s < settings.trend_min_span_s:
        why_not = f"only {fmt_duration(fit.span_s)} of history"
    elif slope < min_slope_per_s:
        why_not = "no sustained growth"
    elif fit.line.tau < settings.trend_min_consistency:
        why_not = f"growth is not consistent (Kendall tau {fit.line.tau:.2f})"
    elif fit.recent is None or fit.recent.slope < settings.deceleration_ratio * slope:
        why_not = "growth is slowing down (warm-up or a cache filling to its bound)"
    return Projection(slope_per_s=slope, level=level, eta_s=eta, sustained=not why_not, why_not=why_not)


def creep_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """A sustained upward trend of the working set whose projection reaches
    the limit within the horizon."""
    limit = window.last.memory_max_bytes if window.last else None
    if not limit:
        return NO, None
    p = project(window.working_set, now_s=now_s, ceiling=float(limit),
                min_slope_per_s=settings.min_growth_fraction_per_h * limit / 3600.0, settings=settings)
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    return Verdict(True, f"growing {fmt_rate(p.slope_per_s * 3600)}, projected OOM in {fmt_duration(p.eta_s)}"), p


def store_projection(window: PodWindow, settings: PolicySettings,
                     now_s: float) -> tuple[Verdict, Projection | None]:
    """Object-store occupancy trending to full within the horizon (objects
    that are never released: a Plasma reference leak)."""
    p = project(window.store, now_s=now_s, ceiling=settings.store_full_fraction,
                min_slope_per_s=settings.min_growth_fraction_per_h / 3600.0, settings=settings)
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

    @classmethod
    def at(cls, window: PodWindow, settings: PolicySettings, now_s: float) -> Observation:
        return cls(window, settings, now_s, creep_projection(window, settings, now_s),
                   store_projection(window, settings, now_s))


# -- the detectors: Observation -> Verdict ---------------------------------------------
def creep(obs: Observation) -> Verdict:
    return obs.creep[0]


def store_filling(obs: Observation) -> Verdict:
    return obs.filling[0]


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
    s = obs.settings
    held = _held(obs.window.store_full, s.store_full_for_s, obs.now_s)
    if held is None:
        return NO
    return Verdict(True, f"object store at or above {s.store_full_fraction:.0%} for {fmt_duration(held)}")


def high_usage(obs: Observation) -> Verdict:
    last = obs.window.last
    frac = last.working_set_fraction if last else None
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
    limit = window.last.memory_max_bytes if window.last else None
    fit = window.working_set.fit
    base = window.baseline_ws_bytes
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
