"""The graded response (issue 41): reclaim, then shed, then replace.

A rotation costs a Ray node's start-up and its warm caches; much pressure
needs less. So a pod climbs a ladder of answers, each cheaper than the next
and each judged by its effect before the next is tried:

- **Reclaim** (``Elevated``: memory in use at ``ladder.reclaimPercent`` of
  the limit, or the projected OOM within ``ladder.reclaimHorizonSeconds``;
  or the object store full, ``policy.objectStoreFullPercent``, or projected
  full within that horizon): the workload is told to free what it can
  without disturbing work (Ray's global GC, its own caches and the
  ObjectRefs they hold);
- **Shed** (``High``: ``ladder.shedPercent``, ``ladder.shedHorizonSeconds``;
  or the store projected full within the shed horizon), tried only once a
  reclaim did not move the pod: the workload is told to take no new
  low-priority work;
- **Replace**: the rotation. The policy's own rules ask for it as before
  (the ladder never delays one), and the ladder asks for it when a shed did
  not move a pod whose growth the policy projects to the limit within the
  shed horizon.

A step is judged ``ladder.settleSeconds`` after it was asked, with the policy's
own estimators: memory in use freed since the step, and the creep (Theil-Sen
over the one-minute means the rapid-growth rule reads) in the settle time after
the step against the same time before it. Effective: at least
``ladder.minFreedPercent`` of the limit freed, or the creep at most halved by
more than the policy's floor of growth. An effective step steps the pod back
down; an ineffective one escalates where the level warrants it, else the step
stays in effect, judged once. A step asked while the store was pressed is also
effective when it emptied the store by that share (freed objects leave the
store's pages in the pod's shared memory, so memory in use alone would not show
it). A store Ray spills from is no pressure: a pipeline filling it is working
as designed (the policy's own store rules read it so). The store's last rung is
the policy's: ``ObjectStoreFull`` and ``ObjectStoreFilling`` rotate as before.

Purely computational: no clock, no I/O. The operator and ``simulate`` call the
same ``climb``; what a pod was asked is kept on the pod (its annotation, read
back by the operator) as a ``Step``.
"""

from __future__ import annotations

import dataclasses
import enum

from memoryguard_kuberay.core.policy.detectors import trend_on_new_ground
from memoryguard_kuberay.core.policy.trend import median, theil_sen
from memoryguard_kuberay.core.policy.types import Action, Decision, Reason
from memoryguard_kuberay.core.policy.window import PodWindow
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration, fmt_oom_in, fmt_rate

EFFECTIVE_CREEP_RATIO = 0.5  # the creep after a step at most this fraction of before's
HORIZON_HYSTERESIS = 1.25  # a level held is left once the projection is this much further than its horizon
MIN_CREEP_POINTS = 5  # one-minute means needed on each side of a step to read a creep
LEVEL_SPAN_S = 180.0  # memory in use at a step and at its judgement: the median of this many seconds' means
SETTLE_SHARE = 3  # ... or of a third of the settle time, if shorter: a step is judged on what came after it


class Level(str, enum.Enum):
    """How close a pod is to harm, from the policy's own figures."""

    NORMAL = "Normal"
    ELEVATED = "Elevated"
    HIGH = "High"
    CRITICAL = "Critical"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Level.NORMAL: 0, Level.ELEVATED: 1, Level.HIGH: 2, Level.CRITICAL: 3}


class Rung(str, enum.Enum):
    """What the pod is asked to do."""

    NONE = "None"
    RECLAIM = "Reclaim"
    SHED = "Shed"
    REPLACE = "Replace"


class Effect(str, enum.Enum):
    EFFECTIVE = "Effective"
    NO_EFFECT = "NoEffect"


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """A step asked of a pod, with the figures it was asked at: the
    baseline its effect is judged against. Kept on the pod."""

    rung: Rung
    level: Level
    since_s: float
    used_bytes: int
    creep_bytes_per_h: float | None = None  # in the settle time before the step
    effect: Effect | None = None  # once judged: a step is judged once
    store_fraction: float | None = None  # the store's occupancy, where it was pressed when the step was asked


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """A step's measured effect, and in ``message`` why (issue 61, 7)."""

    rung: Rung
    effect: Effect
    freed_bytes: int
    creep_before_bytes_per_h: float | None
    creep_after_bytes_per_h: float | None
    after_s: float
    message: str
    store_after: float | None = None  # the store's occupancy now, for a step asked while it was pressed


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """What the ladder decided for a pod now. ``step`` is what to keep
    (None: nothing asked); ``started`` a new step was asked now (say so);
    ``judged`` the effect measured now, if a step's settle time ended."""

    level: Level
    rung: Rung
    step: Step | None
    message: str
    started: bool = False
    judged: Judgement | None = None
    ended: bool = False  # the pod was asked something and is asked nothing now

    @property
    def wants_replace(self) -> bool:
        return self.rung is Rung.REPLACE


def _ceiling(decision: Decision) -> int | None:
    ev = decision.evidence
    return ev.limit_bytes or ev.node_ceiling_bytes


def level_of(decision: Decision, settings: PolicySettings, held: Level = Level.NORMAL,
             used_bytes: int | None = None, store_spilling: bool = False) -> Level:
    """The pressure level of a pod, from the decision's evidence (memory in
    use: ``used_bytes`` where the caller has a steadier figure than the last
    sample's): the higher of memory's level and the object store's. A level
    once held is left only below its threshold less the hysteresis, and with
    the projection beyond its horizon by a quarter (``held``)."""
    if decision.action is Action.ROTATE or decision.reason in (Reason.ROTATION_DEFERRED, Reason.OOM_KILLED):
        return Level.CRITICAL
    memory = _memory_level(decision, settings, held, used_bytes)
    store = store_level(decision, settings, held, store_spilling)
    return memory if memory.rank >= store.rank else store


def _holding(held: Level, level: Level, settings: PolicySettings) -> tuple[float, float]:
    """The slack on a threshold and the stretch of a horizon for ``level``:
    none unless the pod holds it already."""
    if held.rank >= level.rank:
        return settings.hysteresis_fraction, HORIZON_HYSTERESIS
    return 0.0, 1.0


def _memory_level(decision: Decision, settings: PolicySettings, held: Level, used_bytes: int | None) -> Level:
    ev = decision.evidence
    ceiling = _ceiling(decision)
    used = used_bytes if used_bytes is not None else ev.used_bytes
    frac = used / ceiling if used is not None and ceiling else None
    eta = ev.projected_oom_s

    def at(level: Level, fraction: float, horizon_s: float) -> bool:
        slack, stretch = _holding(held, level, settings)
        return ((frac is not None and frac >= fraction - slack)
                or (eta is not None and eta <= horizon_s * stretch))

    if at(Level.HIGH, settings.shed_fraction, settings.shed_horizon_s):
        return Level.HIGH
    if at(Level.ELEVATED, settings.reclaim_fraction, settings.reclaim_horizon_s):
        return Level.ELEVATED
    return Level.NORMAL


def store_level(decision: Decision, settings: PolicySettings, held: Level = Level.NORMAL,
                spilling: bool = False) -> Level:
    """The object store's own level: Elevated when it is full or projected
    full within the reclaim horizon, High when projected full within the
    shed horizon (filling, not sitting full: a full store that stopped
    filling gets a reclaim, not a shed). Normal while Ray spills from it."""
    ev = decision.evidence
    if spilling or ev.store_fraction is None:
        return Level.NORMAL
    eta = ev.store_projected_full_s
    _, stretch = _holding(held, Level.HIGH, settings)
    if eta is not None and eta <= settings.shed_horizon_s * stretch:
        return Level.HIGH
    slack, stretch = _holding(held, Level.ELEVATED, settings)
    if ev.store_fraction >= settings.store_full_fraction - slack or (
            eta is not None and eta <= settings.reclaim_horizon_s * stretch):
        return Level.ELEVATED
    return Level.NORMAL


def creep_between(window: PodWindow, start_s: float, end_s: float) -> float | None:
    """Memory in use's slope (bytes an hour) over the one-minute means that
    start in ``[start_s, end_s)``; None with too few of them."""
    bs = window.rapid.buckets
    points = [(b.start_s, b.mean) for b in bs if start_s <= b.start_s < end_s]
    if len(points) < MIN_CREEP_POINTS:
        return None
    line = theil_sen([t for t, _ in points], [y for _, y in points])
    return None if line is None else line.slope * 3600.0


def level_span_s(settings: PolicySettings) -> float:
    """How far back memory in use is read at a step and at its judgement:
    three minutes, or a third of the settle time where that is shorter (a
    reclaim that freed 860 MiB, judged 45 s on over three minutes' means,
    read as 117 MiB freed: the judgement read mostly the time before it)."""
    return min(LEVEL_SPAN_S, settings.ladder_settle_s / SETTLE_SHARE)


def used_near(window: PodWindow, now_s: float, fallback: int | None, span_s: float) -> int | None:
    """Memory in use now, as the median of the one-minute means of the last
    ``span_s`` (one sample is a batch's spike as often as not); the last
    sample's figure where no mean starts in it."""
    means = [b.mean for b in window.rapid.buckets if now_s - span_s <= b.start_s <= now_s]
    return int(median(means)) if means else fallback


def swing_before(window: PodWindow, since_s: float, span_s: float) -> float:
    """How far the pod's one-minute means ranged in the ``span_s`` before a
    step (0 where the window no longer holds them: a restarted operator).
    Only minutes that ended by the step count: the minute it was asked in
    holds what it freed (in the demo that minute alone read as a swing of
    17.7 GiB, and a reclaim that freed 17.1 GiB as no effect)."""
    width = window.rapid.bucket_s
    means = [b.mean for b in window.rapid.buckets if since_s - span_s <= b.start_s and b.start_s + width <= since_s]
    return max(means) - min(means) if len(means) >= 2 else 0.0


def judge_step(step: Step, decision: Decision, window: PodWindow, settings: PolicySettings,
               now_s: float) -> Judgement:
    ev = decision.evidence
    used = used_near(window, now_s, ev.used_bytes, level_span_s(settings))
    freed = step.used_bytes - (used if used is not None else step.used_bytes)
    after = creep_between(window, step.since_s, now_s + 1)
    before = step.creep_bytes_per_h
    ceiling = _ceiling(decision) or 0
    noise = settings.min_growth_fraction_per_h * ceiling
    # Freed: more than minFreedPercent, and more than the pod swung on its
    # own before the step (a GC sawtooth of 2 GiB read a true leak's reclaim
    # as "freed 1.3 GiB: effective" in the demo).
    needed = max(settings.ladder_min_freed_fraction * ceiling, swing_before(window, step.since_s,
                                                                             settings.ladder_settle_s))
    freed_enough = ceiling > 0 and freed >= needed
    slowed = (before is not None and after is not None and before > noise
              and after <= EFFECTIVE_CREEP_RATIO * before and before - after > noise)
    # Only for a step asked while the store was pressed (a pipeline's store moves more on its own).
    store_after = ev.store_fraction if step.store_fraction is not None else None
    store_emptied = (store_after is not None and step.store_fraction is not None
                     and step.store_fraction - store_after >= settings.ladder_min_freed_fraction)
    effect = Effect.EFFECTIVE if freed_enough or slowed or store_emptied else Effect.NO_EFFECT
    creep = (f"creep {fmt_rate(before) if before is not None else 'unknown'} -> "
             f"{fmt_rate(after) if after is not None else 'unknown'}")
    store = (f", object store {step.store_fraction:.0%} -> {store_after:.0%}"
             if step.store_fraction is not None and store_after is not None else "")
    why = ("freed more than its own swing" if freed_enough else "its creep at least halved" if slowed
           else "the object store emptied" if store_emptied else f"freeing needed {fmt_bytes(needed)} (its own "
           f"swing, or {settings.ladder_min_freed_fraction:.0%} of the limit) and the creep did not halve")
    message = (f"{step.rung.value.lower()} {fmt_duration(now_s - step.since_s)} ago: "
               f"{'freed ' + fmt_bytes(freed) if freed >= 0 else 'grew ' + fmt_bytes(-freed)}, {creep}{store}: "
               f"{'effective' if effect is Effect.EFFECTIVE else 'no effect'} ({why})")
    return Judgement(step.rung, effect, freed, before, after, now_s - step.since_s, message, store_after)


def _ask(rung: Rung, level: Level, decision: Decision, window: PodWindow, settings: PolicySettings,
         now_s: float) -> Step | None:
    used = used_near(window, now_s, decision.evidence.used_bytes, level_span_s(settings))
    if used is None:
        return None
    # The creep before: over the rapid-growth rule's window of one-minute means.
    before = creep_between(window, now_s - settings.rapid_window_s, now_s + 1)
    pressed = store_level(decision, settings, level, window.spilling(now_s)) is not Level.NORMAL
    return Step(rung, level, now_s, used, before, store_fraction=decision.evidence.store_fraction if pressed else None)


def _why(level: Level, decision: Decision) -> str:
    ev = decision.evidence
    ceiling = _ceiling(decision)
    parts = []
    if ev.used_bytes is not None and ceiling:
        parts.append(f"in use {ev.used_bytes / ceiling:.0%} of {fmt_bytes(ceiling)}")
    if ev.projected_oom_s is not None:
        parts.append(fmt_oom_in(ev.projected_oom_s))
    if ev.store_fraction is not None:
        store = f"object store {ev.store_fraction:.0%}"
        if ev.store_projected_full_s is not None:
            store += f", full in {fmt_duration(ev.store_projected_full_s)}"
        parts.append(store)
    return f"pressure {level.value}" + (f" ({', '.join(parts)})" if parts else "")


def climb(*, settings: PolicySettings, step: Step | None, decision: Decision, window: PodWindow,
          now_s: float, shed_waits: str | None = None) -> Move:
    """One pod's ladder now, from its last step (None: nothing asked) and
    the policy's decision for it now. ``shed_waits``: why no shed may be
    asked now (the group's budget), or None."""
    held = step.level if step is not None else Level.NORMAL
    level = level_of(decision, settings, held,
                     used_near(window, now_s, decision.evidence.used_bytes, level_span_s(settings)),
                     window.spilling(now_s))
    if not settings.ladder_enabled:
        return Move(level, Rung.NONE, None, "the ladder is off for this guard: rotation alone", ended=step is not None)
    why = _why(level, decision)
    if level is Level.CRITICAL:
        return Move(level, Rung.REPLACE, step, f"{why}: replace (the policy's rotation)")
    if step is not None and step.rung is Rung.REPLACE:
        if level.rank >= Level.HIGH.rank:
            return Move(level, Rung.REPLACE, step, f"{why}: reclaim and shed did not move it: replace")
        step = None  # it came down before it was replaced: start again from the bottom
    if step is None:
        if level.rank >= Level.ELEVATED.rank:
            asked = _ask(Rung.RECLAIM, level, decision, window, settings, now_s)
            if asked is not None:
                return Move(level, Rung.RECLAIM, asked, f"{why}: reclaim asked", started=True)
        return Move(level, Rung.NONE, None, why, ended=held is not Level.NORMAL)
    if step.effect is not None:
        # Judged once already: it stays in effect until the level moves.
        if level is Level.NORMAL:
            return Move(level, Rung.NONE, None, f"{why}: {step.rung.value.lower()} no longer asked", ended=True)
        if step.rung is Rung.SHED and step.effect is Effect.NO_EFFECT:
            # A shed judged while the pod was not yet heading for the OOM (below
            # shedPercent, or its projection beyond the horizon) stays asked; once
            # the pod gets there, still growing since the shed, the ladder asks
            # for the replacement, as it would have at the judgement.
            since_shed = creep_between(window, step.since_s, now_s + 1)
            if _still_heading_for_oom(decision, settings, since_shed, window, now_s):
                used = used_near(window, now_s, decision.evidence.used_bytes, level_span_s(settings))
                replace = Step(Rung.REPLACE, level, now_s, used if used is not None else step.used_bytes,
                               since_shed, Effect.NO_EFFECT, step.store_fraction)
                return Move(level, Rung.REPLACE, replace,
                            f"{why}: the shed did not stop it ({fmt_rate(since_shed or 0.0)} since): reclaim and "
                            "shed did not move it: replace", started=True)
        if level.rank > step.level.rank:
            # Higher than when it was judged: an ineffective reclaim escalates,
            # an effective step is asked again (the garbage came back).
            if step.rung is Rung.RECLAIM and level.rank >= Level.HIGH.rank and step.effect is Effect.NO_EFFECT:
                return _escalate(Rung.SHED, level, decision, window, settings, now_s,
                                 f"{why}: the reclaim did not move it; shed asked", None, step, shed_waits)
            return _escalate(step.rung, level, decision, window, settings, now_s,
                             f"{why}: {step.rung.value.lower()} asked again", None, step)
        return Move(level, step.rung, step,
                    f"{why}: {step.rung.value.lower()} in effect, judged {step.effect.value}")
    if now_s - step.since_s < settings.ladder_settle_s:
        return Move(level, step.rung, dataclasses.replace(step, level=level),
                    f"{why}: {step.rung.value.lower()} asked {fmt_duration(now_s - step.since_s)} ago, "
                    f"judged after {fmt_duration(settings.ladder_settle_s)}")
    judged = judge_step(step, decision, window, settings, now_s)
    if judged.effect is Effect.EFFECTIVE:
        if step.rung is Rung.SHED and level is not Level.NORMAL:
            # Back down one rung: the workload takes work again and keeps reclaiming.
            back = Step(Rung.RECLAIM, level, now_s, step.used_bytes - judged.freed_bytes,
                        judged.creep_after_bytes_per_h, Effect.EFFECTIVE, judged.store_after)
            return Move(level, Rung.RECLAIM, back, f"{why}: {judged.message}; back to reclaim", judged=judged,
                        started=True)
        if level is Level.NORMAL:
            return Move(level, Rung.NONE, None, f"{why}: {judged.message}; nothing asked", judged=judged,
                        ended=True)
        return Move(level, step.rung, dataclasses.replace(step, level=level, effect=judged.effect),
                    f"{why}: {judged.message}; asked again if the level rises", judged=judged)
    if step.rung is Rung.RECLAIM and level.rank >= Level.HIGH.rank:
        return _escalate(Rung.SHED, level, decision, window, settings, now_s,
                         f"{why}: {judged.message}; shed asked", judged, step, shed_waits)
    if step.rung is Rung.SHED and _still_heading_for_oom(decision, settings, judged.creep_after_bytes_per_h,
                                                           window, now_s):
        replace = Step(Rung.REPLACE, level, now_s, step.used_bytes - judged.freed_bytes,
                       judged.creep_after_bytes_per_h, Effect.NO_EFFECT, judged.store_after)
        return Move(level, Rung.REPLACE, replace,
                    f"{why}: {judged.message}; reclaim and shed did not move it: replace", judged=judged,
                    started=True)
    if level is Level.NORMAL:
        return Move(level, Rung.NONE, None, f"{why}: {judged.message}; nothing asked", judged=judged, ended=True)
    return Move(level, step.rung, dataclasses.replace(step, level=level, effect=judged.effect),
                f"{why}: {judged.message}; {step.rung.value.lower()} stays asked", judged=judged)


def _escalate(rung: Rung, level: Level, decision: Decision, window: PodWindow, settings: PolicySettings,
              now_s: float, message: str, judged: Judgement | None, step: Step, waits: str | None = None) -> Move:
    if waits is not None and rung is Rung.SHED:  # the step in effect stays; the shed is asked once it may be
        # Its level stays the one it was asked at: the rise is seen again, and the shed asked, once it may be.
        kept = dataclasses.replace(step, effect=judged.effect if judged else step.effect)
        return Move(level, step.rung, kept, f"{message.rsplit(';', 1)[0]}; shed waits: {waits}", judged=judged)
    asked = _ask(rung, level, decision, window, settings, now_s)
    if asked is None:  # memory in use unknown now: the step in effect stays
        return Move(level, step.rung, dataclasses.replace(step, level=level), message, judged=judged)
    return Move(level, rung, asked, message, started=True, judged=judged)


def _still_heading_for_oom(decision: Decision, settings: PolicySettings, after: float | None, window: PodWindow,
                           now_s: float) -> bool:
    """A shed that did not move a pod already at ``shedPercent`` whose
    growth goes on (after the shed, above the policy's floor of growth) and
    the policy projects to the limit within its own rotation horizon, onto
    new ground as the policy's trend rules want it: growth the workload
    cannot stop. A pod that sits high without growing, whose climb is only
    projected from afar (a morning's ramp), or that climbs where it was a
    day ago (a serving pod's day at its peak, its noise read as growth) is
    not replaced by the ladder: measured on the examples, the shed horizon
    alone rotated two healthy pods; without the day back, two of six
    drawn serving pods' days (issue 39's shapes)."""
    ev = decision.evidence
    ceiling = _ceiling(decision) or 0
    noise = settings.min_growth_fraction_per_h * ceiling
    high = ev.used_bytes is not None and ceiling > 0 and ev.used_bytes >= settings.shed_fraction * ceiling
    return (high and ev.projected_oom_s is not None and ev.projected_oom_s <= settings.horizon_s
            and after is not None and after > noise and trend_on_new_ground(window, settings, now_s, int(ceiling)))
