"""Detectors: small functions of a pod's window, each answering one question
with a verdict and a short note. Rules in ``decide`` combine them (AND within
a group, OR across groups, as oomd does). Purely computational."""

from __future__ import annotations

import dataclasses

from memoryguard_kuberay.core.policy.window import PodWindow, Series
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


def creep(window: PodWindow, settings: PolicySettings, now_s: float) -> tuple[Verdict, Projection | None]:
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


def store_filling(window: PodWindow, settings: PolicySettings, now_s: float) -> tuple[Verdict, Projection | None]:
    """Object-store occupancy trending to full within the horizon (objects
    that are never released: a Plasma reference leak)."""
    p = project(window.store, now_s=now_s, ceiling=settings.store_full_fraction,
                min_slope_per_s=settings.min_growth_fraction_per_h / 3600.0, settings=settings)
    if p is None or not p.sustained or p.eta_s is None or p.eta_s > settings.horizon_s:
        return NO, p
    return Verdict(True, f"object store {p.level:.0%} full, filling {p.slope_per_s * 360000:.1f} points/h, "
                         f"{settings.store_full_fraction:.0%} in {fmt_duration(p.eta_s)}"), p


def critical_usage(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    held = window.critical.held_for(now_s)
    if window.critical.since is None or held < settings.critical_for_s:
        return NO
    return Verdict(True, f"at or above {settings.critical_fraction:.0%} of the limit for {fmt_duration(held)}")


def high_usage(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    frac = window.last.working_set_fraction if window.last else None
    if frac is None or frac < settings.pressure_min_usage_fraction:
        return NO
    return Verdict(True, f"{frac:.0%} of the limit")


def pressure(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    held = window.pressure.held_for(now_s)
    if window.pressure.since is None or held < settings.pressure_for_s:
        return NO
    psi = window.last.psi_full_avg10_pct if window.last else None
    return Verdict(True, f"memory pressure (PSI full {psi}%) for {fmt_duration(held)}")


def store_full(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    held = window.store_full.held_for(now_s)
    if window.store_full.since is None or held < settings.store_full_for_s:
        return NO
    return Verdict(True, f"object store at or above {settings.store_full_fraction:.0%} for {fmt_duration(held)}")


def oom_kills(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    if window.oom_kills_seen <= 0:
        return NO
    return Verdict(True, f"the kernel OOM-killed {window.oom_kills_seen} process(es) in the container")


def plateau(window: PodWindow, settings: PolicySettings, now_s: float) -> Verdict:
    """Memory that grew for hours after warm-up and then flattened high: the
    shape of allocator fragmentation (or a cache at its bound). Worth
    jemalloc, never a rotation."""
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
