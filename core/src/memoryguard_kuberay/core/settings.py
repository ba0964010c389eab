"""The guard's policy settings: every threshold and budget the policy reads,
with its unit, default and bounds, in one table.

``SETTINGS_TABLE`` is the single source: ``PolicySettings`` takes its
defaults from it, ``PolicySettings.from_spec`` reads a MemoryGuard spec
(``spec.policy``, ``spec.rotation``, ``spec.dryRun``) with it, and the CRD's
OpenAPI schema for those fields is generated from it (``crd_properties``), so
the CRD, the docs and the code cannot disagree. Purely computational.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class SettingSpec:
    attr: str  # PolicySettings attribute
    section: str  # MemoryGuard spec section: policy | rotation | "" (top level)
    name: str  # camelCase name in the spec
    kind: type  # int | float | bool
    default: int | float | bool
    minimum: float | None
    maximum: float | None
    unit: str
    doc: str


SETTINGS_TABLE: tuple[SettingSpec, ...] = (
    # Hysteresis on absolute usage: a backstop for growth too fast to trend.
    SettingSpec("critical_fraction", "policy", "criticalPercent", float, 0.95, 0.5, 1.0, "fraction of memory.max",
                "Memory in use (anon + shmem: what the kernel cannot reclaim; page cache is not counted) at or "
                "above this share of the limit is critical (in the spec: percent, 50-100)."),
    SettingSpec("critical_for_s", "policy", "criticalForSeconds", int, 900, 0, 86400, "s",
                "How long memory in use must stay critical before a rotation: bursts of large batches hold "
                "96-99% for up to about 8 minutes and come back down (growth too fast to wait this long is "
                "the rapid-growth rule's)."),
    SettingSpec("hysteresis_fraction", "policy", "hysteresisPercent", float, 0.03, 0.0, 0.2, "fraction of memory.max",
                "A held condition only resets when usage drops this far below its threshold (percent in the spec)."),
    # Creep: a sustained trend projected to the limit.
    SettingSpec("trend_bucket_s", "policy", "trendBucketSeconds", int, 300, 15, 3600, "s",
                "Samples are averaged into buckets of this length before the trend is fitted."),
    SettingSpec("trend_window_s", "policy", "trendWindowSeconds", int, 14400, 300, 172800, "s",
                "The trend is fitted over this much recent history (longer sees through slower sawtooth)."),
    SettingSpec("trend_min_span_s", "policy", "trendMinSpanSeconds", int, 10800, 90, 172800, "s",
                "No trend verdict before this much history: warm-up after a start is never a leak."),
    SettingSpec("horizon_s", "policy", "horizonSeconds", int, 5400, 60, 172800, "s",
                "Rotate when the projected OOM is this close; include the time a drain takes."),
    SettingSpec("min_growth_fraction_per_h", "policy", "minGrowthPercentPerHour", float, 0.001, 0.0001, 1.0,
                "fraction of memory.max per hour",
                "Slower growth than this is not a trend (percent per hour in the spec)."),
    SettingSpec("deceleration_ratio", "policy", "decelerationRatio", float, 0.8, 0.0, 1.0, "ratio",
                "The recent half of the window must grow at least this fraction as fast as the whole window and its "
                "earlier half: "
                "growth that slows down (warm-up, caches filling to a bound) is not a leak."),
    SettingSpec("trend_min_consistency", "policy", "trendMinConsistency", float, 0.5, 0.0, 1.0, "Kendall tau",
                "How consistently the window must rise (Kendall's tau of its buckets, -1..1): a sawtooth or a "
                "daily swing can have a steep slope but rises inconsistently."),
    # Rapid growth: a leak that reaches the limit within the hour.
    SettingSpec("rapid_window_s", "policy", "rapidWindowSeconds", int, 1800, 300, 7200, "s",
                "Rapid growth is judged on one-minute means over this much recent history; the pod must have "
                "twice this much history before the climb (its first climbs are its warm-up)."),
    SettingSpec("rapid_min_span_s", "policy", "rapidMinSpanSeconds", int, 900, 120, 7200, "s",
                "Growth must have been seen, steady, for this long before it counts as rapid growth."),
    SettingSpec("rapid_horizon_s", "policy", "rapidHorizonSeconds", int, 1800, 60, 7200, "s",
                "Rotate on rapid growth when the projected OOM is this close (include the time a drain takes)."),
    # Memory pressure (PSI) together with high usage.
    SettingSpec("pressure_full_pct", "policy", "pressureFullPercent", float, 10.0, 0.1, 100.0, "% (PSI full avg10)",
                "memory.pressure full avg10 at or above this counts as pressure."),
    SettingSpec("pressure_for_s", "policy", "pressureForSeconds", int, 900, 0, 86400, "s",
                "How long pressure must hold (bursts bring minutes of pressure and pass)."),
    SettingSpec("pressure_min_usage_fraction", "policy", "pressureMinUsagePercent", float, 0.85, 0.0, 1.0,
                "fraction of memory.max", "Pressure only counts with the working set at or above this share."),
    # Object store (Plasma).
    SettingSpec("store_full_fraction", "policy", "objectStoreFullPercent", float, 0.95, 0.5, 1.0,
                "fraction of store capacity",
                "The object store is full at this occupancy; its trend is projected to this point."),
    SettingSpec("store_full_for_s", "policy", "objectStoreFullForSeconds", int, 600, 0, 86400, "s",
                "How long the store must stay full, with nothing spilled to disk, before a rotation (a store "
                "held full while Ray spills is a pipeline working as designed)."),
    # Plateau after growth: a remediation hint, never a rotation.
    SettingSpec("plateau_min_fraction", "policy", "plateauMinUsagePercent", float, 0.6, 0.1, 1.0,
                "fraction of memory.max", "A plateau is only worth remediating at or above this share of the limit."),
    SettingSpec("plateau_growth_fraction", "policy", "plateauGrowthPercent", float, 0.10, 0.05, 1.0,
                "fraction of memory.max", "...and after growing at least this much since the pod started."),
    SettingSpec("stale_after_s", "policy", "staleAfterSeconds", int, 120, 5, 3600, "s",
                "A pod whose newest sample is older than this is never acted on."),
    # Rotation budgets.
    SettingSpec("rotation_enabled", "rotation", "enabled", bool, True, None, None, "",
                "Rotate pods at all (false: decide and report only)."),
    SettingSpec("max_unavailable", "rotation", "maxUnavailable", int, 1, 1, 100, "pods per group",
                "At most this many pods of one worker group rotating at once."),
    SettingSpec("cooldown_s", "rotation", "cooldownSeconds", int, 600, 0, 86400, "s",
                "After a rotation in a group, wait this long before the next one there."),
    SettingSpec("max_rotations_per_hour", "rotation", "maxPerHour", int, 4, 0, 1000, "rotations per guard per hour",
                "Rate cap over the whole guard."),
    SettingSpec("drain_timeout_s", "rotation", "drainTimeoutSeconds", int, 600, 0, 86400, "s",
                "Deadline given to Ray's DrainNode before the pod is evicted."),
    SettingSpec("include_head", "", "includeHead", bool, False, None, None, "",
                "Allow rotating the head pod (it restarts the whole cluster's control plane)."),
    SettingSpec("dry_run", "", "dryRun", bool, False, None, None, "",
                "Decide and report everything, change no workload: no rotation, remediation or budget (the sidecar is "
                "still injected where sidecar.inject asks: the observer, for new pods)."),
)

# Settings given in the spec as percent but held as fractions.
# Fields a guard writes in percent that the policy holds as fractions. PSI
# (``*_pct``) is a percent in both: a guard's pressureFullPercent: 10 is 10%
# (it was read as 0.1%, with a CRD default of 1000, until issue 40 found it).
_PERCENT_ATTRS = frozenset(
    s.attr for s in SETTINGS_TABLE
    if (s.name.endswith("Percent") or s.name.endswith("PercentPerHour")) and not s.attr.endswith("_pct")
)


def _default(attr: str) -> Any:
    return next(s.default for s in SETTINGS_TABLE if s.attr == attr)


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """All policy inputs a guard sets. Units are in ``SETTINGS_TABLE``."""

    critical_fraction: float = _default("critical_fraction")
    critical_for_s: int = _default("critical_for_s")
    hysteresis_fraction: float = _default("hysteresis_fraction")
    trend_bucket_s: int = _default("trend_bucket_s")
    trend_window_s: int = _default("trend_window_s")
    trend_min_span_s: int = _default("trend_min_span_s")
    horizon_s: int = _default("horizon_s")
    min_growth_fraction_per_h: float = _default("min_growth_fraction_per_h")
    deceleration_ratio: float = _default("deceleration_ratio")
    trend_min_consistency: float = _default("trend_min_consistency")
    rapid_window_s: int = _default("rapid_window_s")
    rapid_min_span_s: int = _default("rapid_min_span_s")
    rapid_horizon_s: int = _default("rapid_horizon_s")
    pressure_full_pct: float = _default("pressure_full_pct")
    pressure_for_s: int = _default("pressure_for_s")
    pressure_min_usage_fraction: float = _default("pressure_min_usage_fraction")
    store_full_fraction: float = _default("store_full_fraction")
    store_full_for_s: int = _default("store_full_for_s")
    plateau_min_fraction: float = _default("plateau_min_fraction")
    plateau_growth_fraction: float = _default("plateau_growth_fraction")
    stale_after_s: int = _default("stale_after_s")
    rotation_enabled: bool = _default("rotation_enabled")
    max_unavailable: int = _default("max_unavailable")
    cooldown_s: int = _default("cooldown_s")
    max_rotations_per_hour: int = _default("max_rotations_per_hour")
    drain_timeout_s: int = _default("drain_timeout_s")
    include_head: bool = _default("include_head")
    dry_run: bool = _default("dry_run")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> PolicySettings:
        """Read a MemoryGuard ``spec``. Raises ``SettingsError`` listing every
        problem at once (unknown fields, wrong types, out of bounds)."""
        spec = spec or {}
        errors: list[str] = []
        values: dict[str, Any] = {}
        known: dict[str, set[str]] = {}
        bad_sections: set[str] = set()
        for s in SETTINGS_TABLE:
            known.setdefault(s.section, set()).add(s.name)
            section = spec if not s.section else spec.get(s.section) or {}
            if not isinstance(section, Mapping):
                if s.section not in bad_sections:  # said once, not once per setting
                    bad_sections.add(s.section)
                    errors.append(f"spec.{s.section} must be an object, got {type(section).__name__}")
                continue
            if s.name not in section:
                continue
            where = f"spec.{s.section + '.' if s.section else ''}{s.name}"
            raw = section[s.name]
            value = _check(s, raw, where, errors)
            if value is None:
                continue
            if s.attr in _PERCENT_ATTRS:
                value = value / 100.0
            values[s.attr] = value
        for section_name in ("policy", "rotation"):
            section = spec.get(section_name)
            if isinstance(section, Mapping):
                for key in section:
                    if key not in known[section_name]:
                        errors.append(f"spec.{section_name}.{key}: unknown setting")
        settings = cls(**values)
        errors.extend(settings.contradictions())
        if errors:
            raise SettingsError(errors)
        return settings

    def contradictions(self) -> list[str]:
        """Rules that span fields (CROSS_RULES; the CRD has each as CEL)."""
        return [f"policy.{r.message}" for r in CROSS_RULES if not r.holds(self)]


@dataclasses.dataclass(frozen=True)
class CrossRule:
    """A rule across ``spec.policy`` fields: CEL on the spec (the CRD), and
    the same rule on the settings read (the reader)."""

    cel: str
    message: str
    holds: Callable[[PolicySettings], bool]


# A real API server hands CEL an int for 1800 and a double for 1800.0, and
# refuses a comparison of the two ("expected int, got float64"): every
# number is compared as a double.
CROSS_RULES: tuple[CrossRule, ...] = (
    CrossRule("!has(self.trendMinSpanSeconds) || !has(self.trendWindowSeconds) || "
              "double(self.trendMinSpanSeconds) <= double(self.trendWindowSeconds)",
              "trendMinSpanSeconds must not exceed trendWindowSeconds",
              lambda s: s.trend_min_span_s <= s.trend_window_s),
    CrossRule("!has(self.trendBucketSeconds) || !has(self.trendMinSpanSeconds) || "
              "double(self.trendBucketSeconds) * 6.0 <= double(self.trendMinSpanSeconds)",
              "trendMinSpanSeconds must hold at least 6 trend buckets (trendBucketSeconds)",
              lambda s: s.trend_bucket_s * 6 <= s.trend_min_span_s),
    CrossRule("!has(self.rapidMinSpanSeconds) || !has(self.rapidWindowSeconds) || "
              "double(self.rapidMinSpanSeconds) <= double(self.rapidWindowSeconds)",
              "rapidMinSpanSeconds must not exceed rapidWindowSeconds",
              lambda s: s.rapid_min_span_s <= s.rapid_window_s),
    CrossRule("!has(self.hysteresisPercent) || !has(self.criticalPercent) || "
              "double(self.hysteresisPercent) < double(self.criticalPercent)",
              "hysteresisPercent must be below criticalPercent",
              lambda s: s.hysteresis_fraction < s.critical_fraction),
)


class SettingsError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _check(s: SettingSpec, raw: object, where: str, errors: list[str]) -> int | float | bool | None:
    if s.kind is bool:
        if not isinstance(raw, bool):
            errors.append(f"{where}: must be true or false, got {raw!r}")
            return None
        return raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        errors.append(f"{where}: must be a number ({s.unit}), got {str(raw)[:40]!r}")
        return None
    if (isinstance(raw, int) and abs(raw) > 2**53) or (isinstance(raw, float) and not math.isfinite(raw)):
        errors.append(f"{where}: must be a finite number of sensible size, got {str(raw)[:40]}")
        return None
    if s.kind is int and not float(raw).is_integer():
        errors.append(f"{where}: must be a whole number ({s.unit}), got {raw!r}")
        return None
    scale = 100.0 if s.attr in _PERCENT_ATTRS else 1.0
    lo = None if s.minimum is None else s.minimum * scale
    hi = None if s.maximum is None else s.maximum * scale
    if (lo is not None and raw < lo) or (hi is not None and raw > hi):
        errors.append(f"{where}: {raw} is outside [{_num(lo)}, {_num(hi)}]")
        return None
    return int(raw) if s.kind is int else float(raw)


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def crd_properties(section: str) -> dict[str, Any]:
    """OpenAPI properties for one spec section, for the CRD generator."""
    props: dict[str, Any] = {}
    for s in SETTINGS_TABLE:
        if s.section != section:
            continue
        scale = 100.0 if s.attr in _PERCENT_ATTRS else 1.0
        prop: dict[str, Any] = {"description": f"{s.doc} Unit: {'percent' if scale != 1 else s.unit or 'n/a'}."}
        if s.kind is bool:
            prop.update(type="boolean", default=s.default)
        else:
            prop["type"] = "integer" if s.kind is int else "number"
            prop["default"] = _round(s.default * scale) if s.kind is float else s.default
            if s.minimum is not None:
                prop["minimum"] = _round(s.minimum * scale)
            if s.maximum is not None:
                prop["maximum"] = _round(s.maximum * scale)
        props[s.name] = fractional_minimum(prop)
    return props


def fractional_minimum(prop: dict[str, Any]) -> dict[str, Any]:
    """A real API server checks an integer value against a fractional
    ``minimum`` truncated to an integer (0 passes ``minimum: 0.1``), so such
    a bound is also stated as a CEL rule, which sees the value as a double."""
    lo = prop.get("minimum")
    if prop.get("type") == "number" and isinstance(lo, float) and not lo.is_integer():
        prop["x-kubernetes-validations"] = [{"rule": f"self >= {lo!r}", "message": f"must be at least {lo:g}"}]
    return prop


def _round(x: float) -> float | int:
    r = round(x, 6)
    return int(r) if float(r).is_integer() else r
