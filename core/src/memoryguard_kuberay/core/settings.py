"""The guard's policy settings: every threshold and budget the policy reads,
with its unit, default and bounds, in one table.

``POLICY_FIELDS`` is the single source, made of the spec's one kind of
field description (``schema.Field``): ``PolicySettings`` takes its defaults
from it, ``PolicySettings.from_spec`` reads a MemoryGuard spec
(``spec.policy``, ``spec.rotation``, ``spec.includeHead``, ``spec.dryRun``)
with it, and the CRD's schema and the docs' table are generated from it, as
from the operator's table (``specfields.FIELDS``), so the CRD, the docs and
the code cannot disagree. Purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from memoryguard_kuberay.core.schema import Field, Kind, check, said

POLICY_FIELDS: tuple[Field, ...] = (
    # Hysteresis on absolute usage: a backstop for growth too fast to trend.
    Field("policy.criticalPercent", Kind.NUMBER, 95,
          "Memory in use (anon + shmem + the kernel's unreclaimable part: what the kernel cannot reclaim; page cache "
          "is not counted) at or above "
          "this share of the limit is critical (in the spec: percent, 50-100).",
          unit="percent", minimum=50, maximum=100, attr="critical_fraction", percent=True),
    Field("policy.criticalForSeconds", Kind.INT, 900,
          "How long memory in use must stay critical before a rotation: bursts of large batches hold 96-99% for"
          " up to about 8 minutes and come back down (growth too fast to wait this long is the rapid-growth "
          "rule's).",
          unit="s", minimum=0, maximum=86400, attr="critical_for_s"),
    Field("policy.hysteresisPercent", Kind.NUMBER, 3,
          "A held condition only resets when usage drops this far below its threshold (percent in the spec).",
          unit="percent", minimum=0, maximum=20, attr="hysteresis_fraction", percent=True),
    # Creep: a sustained trend projected to the limit.
    Field("policy.trendBucketSeconds", Kind.INT, 300,
          "Samples are averaged into buckets of this length before the trend is fitted.",
          unit="s", minimum=15, maximum=3600, attr="trend_bucket_s"),
    Field("policy.trendWindowSeconds", Kind.INT, 14400,
          "The trend is fitted over this much recent history (longer sees through slower sawtooth).",
          unit="s", minimum=300, maximum=172800, attr="trend_window_s"),
    Field("policy.trendMinSpanSeconds", Kind.INT, 10800,
          "No trend verdict before this much history: warm-up after a start is never a leak.",
          unit="s", minimum=90, maximum=172800, attr="trend_min_span_s"),
    Field("policy.horizonSeconds", Kind.INT, 5400,
          "Rotate when the projected OOM is this close; include the time a drain takes.",
          unit="s", minimum=60, maximum=172800, attr="horizon_s"),
    Field("policy.minGrowthPercentPerHour", Kind.NUMBER, 0.1,
          "Slower growth than this is not a trend (percent per hour in the spec).",
          unit="percent", minimum=0.01, maximum=100, attr="min_growth_fraction_per_h", percent=True),
    Field("policy.decelerationRatio", Kind.NUMBER, 0.8,
          "The recent half of the window must grow at least this fraction as fast as the whole window and its "
          "earlier half: growth that slows down (warm-up, caches filling to a bound) is not a leak.",
          unit="ratio", minimum=0.0, maximum=1.0, attr="deceleration_ratio"),
    Field("policy.trendMinConsistency", Kind.NUMBER, 0.5,
          "How consistently the window must rise (Kendall's tau of its buckets, -1..1): a sawtooth or a daily "
          "swing can have a steep slope but rises inconsistently.",
          unit="Kendall tau", minimum=0.0, maximum=1.0, attr="trend_min_consistency"),
    # Rapid growth: a leak that reaches the limit within the hour.
    Field("policy.rapidWindowSeconds", Kind.INT, 1800,
          "Rapid growth is judged on one-minute means over this much recent history; the pod must have twice "
          "this much history before the climb (its first climbs are its warm-up).",
          unit="s", minimum=300, maximum=7200, attr="rapid_window_s"),
    Field("policy.rapidMinSpanSeconds", Kind.INT, 900,
          "The rapid window must hold this much history, rising steadily over it, before growth counts as "
          "rapid; a climb that left the pod's band within the window is read from its own steady minutes, "
          "eight or more (docs/how-it-works.md, RapidGrowth).",
          unit="s", minimum=120, maximum=7200, attr="rapid_min_span_s"),
    # Half an hour's warning and ten minutes to act: the climb watched three
    # more minutes, a drain, Ray's 30 s grace period, the replacement's start.
    Field("policy.rapidHorizonSeconds", Kind.INT, 2400,
          "Rotate on rapid growth when the projected OOM is this close (include the time a drain takes).",
          unit="s", minimum=60, maximum=7200, attr="rapid_horizon_s"),
    # Memory pressure (PSI) together with high usage.
    Field("policy.pressureFullPercent", Kind.NUMBER, 10.0,
          "memory.pressure full avg10 at or above this counts as pressure.",
          unit="% (PSI full avg10)", minimum=0.1, maximum=100.0, attr="pressure_full_pct"),
    Field("policy.pressureForSeconds", Kind.INT, 900,
          "How long pressure must hold (bursts bring minutes of pressure and pass).",
          unit="s", minimum=0, maximum=86400, attr="pressure_for_s"),
    Field("policy.pressureMinUsagePercent", Kind.NUMBER, 85,
          "Pressure only counts with the working set at or above this share.",
          unit="percent", minimum=0, maximum=100, attr="pressure_min_usage_fraction", percent=True),
    Field("policy.memoryHighHolds", Kind.BOOL, True,
          "A pod held at its memory.high (cgroup v2, set below memory.max: Kubernetes' MemoryQoS, or by hand) "
          "is the kernel's doing, not a risk: its stalls there, and its usage up to halfway from memory.high to "
          "memory.max, are no reason to rotate; its growth toward memory.max is judged by the trend. false: "
          "judged as any pod.",
          attr="memory_high_holds"),
    # Object store (Plasma).
    Field("policy.objectStoreFullPercent", Kind.NUMBER, 95,
          "The object store is full at this occupancy; its trend is projected to this point.",
          unit="percent", minimum=50, maximum=100, attr="store_full_fraction", percent=True),
    Field("policy.objectStoreFullForSeconds", Kind.INT, 600,
          "How long the store must stay full, with nothing spilled to disk, before a rotation (a store held "
          "full while Ray spills is a pipeline working as designed).",
          unit="s", minimum=0, maximum=86400, attr="store_full_for_s"),
    # Plateau after growth: a remediation hint, never a rotation.
    Field("policy.plateauMinUsagePercent", Kind.NUMBER, 60,
          "A plateau is only worth remediating at or above this share of the limit.",
          unit="percent", minimum=10, maximum=100, attr="plateau_min_fraction", percent=True),
    Field("policy.plateauGrowthPercent", Kind.NUMBER, 10,
          "...and after growing at least this much since the pod started.",
          unit="percent", minimum=5, maximum=100, attr="plateau_growth_fraction", percent=True),
    Field("policy.staleAfterSeconds", Kind.INT, 120,
          "A pod whose newest sample is older than this is never acted on.",
          unit="s", minimum=5, maximum=3600, attr="stale_after_s"),
    # Rotation budgets.
    Field("rotation.enabled", Kind.BOOL, True,
          "Rotate pods at all (false: decide and report only).",
          attr="rotation_enabled"),
    Field("rotation.maxUnavailable", Kind.INT, 1,
          "At most this many pods of one worker group rotating at once.",
          unit="pods per group", minimum=1, maximum=100, attr="max_unavailable"),
    Field("rotation.cooldownSeconds", Kind.INT, 600,
          "After a rotation in a group, wait this long before the next one there.",
          unit="s", minimum=0, maximum=86400, attr="cooldown_s"),
    Field("rotation.maxPerHour", Kind.INT, 4,
          "Rate cap over the whole guard.",
          unit="rotations per guard per hour", minimum=0, maximum=1000, attr="max_rotations_per_hour"),
    Field("rotation.drainTimeoutSeconds", Kind.INT, 600,
          "Deadline given to Ray's DrainNode before the pod is evicted.",
          unit="s", minimum=0, maximum=86400, attr="drain_timeout_s"),
    # The graded response before a rotation (issue 41: policy/ladder.py).
    Field("ladder.enabled", Kind.BOOL, True,
          "Answer pressure by a ladder before a rotation: reclaim, then shed, each judged by its effect (false: "
          "rotation alone). The pod's level and the step asked are its memoryguard.io/pressure annotation, a "
          "file in its containers.",
          attr="ladder_enabled"),
    Field("ladder.reclaimPercent", Kind.NUMBER, 80,
          "Memory in use at or above this share of the limit is Elevated: the workload is asked to reclaim "
          "(Ray's garbage collection, its own caches).",
          unit="percent", minimum=10, maximum=100, attr="reclaim_fraction", percent=True),
    Field("ladder.reclaimHorizonSeconds", Kind.INT, 21600,
          "...or the projected OOM this close.",
          unit="s", minimum=60, maximum=172800, attr="reclaim_horizon_s"),
    Field("ladder.shedPercent", Kind.NUMBER, 90,
          "At or above this share the level is High: once a reclaim did not move the pod, it is asked to shed "
          "(take no new low-priority work).",
          unit="percent", minimum=10, maximum=100, attr="shed_fraction", percent=True),
    Field("ladder.shedHorizonSeconds", Kind.INT, 10800,
          "...or the projected OOM this close. A shed that did not move a pod projected to its limit this close "
          "asks for the rotation.",
          unit="s", minimum=60, maximum=172800, attr="shed_horizon_s"),
    Field("ladder.settleSeconds", Kind.INT, 600,
          "A step is judged this long after it was asked: memory in use freed, and the creep after it against "
          "the creep before.",
          unit="s", minimum=30, maximum=86400, attr="ladder_settle_s"),
    Field("ladder.minFreedPercent", Kind.NUMBER, 2,
          "A step that freed this share of the limit, and more than the pod swung on its own before it, was "
          "effective (as was one that halved the creep, or one asked for the object store that emptied this "
          "share of it).",
          unit="percent", minimum=0.1, maximum=100, attr="ladder_min_freed_fraction", percent=True),
    # The guard's scope and mode (spec's top level).
    Field("includeHead", Kind.BOOL, False,
          "Allow rotating the head pod (it restarts the whole cluster's control plane).",
          attr="include_head"),
    Field("dryRun", Kind.BOOL, False,
          "Decide and report everything, change no workload: no rotation, remediation or budget (the sidecar is"
          " still injected where sidecar.inject asks: the observer, for new pods).",
          attr="dry_run"),

)
_BY_ATTR = {f.attr: f for f in POLICY_FIELDS}


def _default(attr: str) -> Any:
    return _BY_ATTR[attr].held_default


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """All policy inputs a guard sets. Units are in ``POLICY_FIELDS``."""

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
    memory_high_holds: bool = _default("memory_high_holds")
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
    ladder_enabled: bool = _default("ladder_enabled")
    reclaim_fraction: float = _default("reclaim_fraction")
    reclaim_horizon_s: int = _default("reclaim_horizon_s")
    shed_fraction: float = _default("shed_fraction")
    shed_horizon_s: int = _default("shed_horizon_s")
    ladder_settle_s: int = _default("ladder_settle_s")
    ladder_min_freed_fraction: float = _default("ladder_min_freed_fraction")
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
        for f in POLICY_FIELDS:
            known.setdefault(f.section, set()).add(f.name)
            section = spec if not f.section else spec.get(f.section) or {}
            if not isinstance(section, Mapping):
                if f.section not in bad_sections:  # said once, not once per setting
                    bad_sections.add(f.section)
                    errors.append(f"spec.{f.section} must be an object, got {type(section).__name__}")
                continue
            if f.name not in section:
                continue
            value, problem = check(f, section[f.name])
            if problem is not None:
                errors.append(said(f, problem))
                continue
            values[f.attr] = f.held(value)
        for section_name in ("policy", "rotation", "ladder"):
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
        return [f"{r.section}.{r.message}" for r in CROSS_RULES if not r.holds(self)]


@dataclasses.dataclass(frozen=True)
class CrossRule:
    """A rule across ``spec.policy`` fields: CEL on the spec (the CRD), and
    the same rule on the settings read (the reader)."""

    cel: str
    message: str
    holds: Callable[[PolicySettings], bool]
    section: str = "policy"  # the spec's object the CEL rule sits on


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
    CrossRule("!has(self.reclaimPercent) || !has(self.shedPercent) || "
              "double(self.reclaimPercent) <= double(self.shedPercent)",
              "reclaimPercent must not exceed shedPercent", lambda s: s.reclaim_fraction <= s.shed_fraction,
              section="ladder"),
    CrossRule("!has(self.reclaimHorizonSeconds) || !has(self.shedHorizonSeconds) || "
              "double(self.shedHorizonSeconds) <= double(self.reclaimHorizonSeconds)",
              "shedHorizonSeconds must not exceed reclaimHorizonSeconds",
              lambda s: s.shed_horizon_s <= s.reclaim_horizon_s, section="ladder"),
)


class SettingsError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
