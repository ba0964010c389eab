"""The ladder before a rotation, asked of each pod judged this cycle: the
core's ``climb`` (core/policy/ladder.py) decides; this applies it.

What a pod is asked is its ``memoryguard.io/pressure`` annotation
(core/pressure.py): the injected templates carry a downward API volume that
shows it to the pod's containers as ``/etc/memoryguard/pressure``, where the
workload's ``on_pressure`` reads it. The annotation is the step's durable
record: read back on a guard's first cycle (a restart, a shard moved). It is
written only when the level, the step or its verdict changes, never for the
projection alone (one patch a pod a cycle at 20,000 pods would be the API's
whole load). A dry run writes nothing and says what it would ask.

Budget: at most ``rotation.maxUnavailable`` pods of a group shed at once,
rotations under way included (a shedding pod takes no new work, as one
leaving); the others keep reclaiming, saying why the shed waits.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import pressure
from memoryguard_kuberay.core.policy import Reason
from memoryguard_kuberay.core.policy.ladder import Effect, Level, Move, Rung, Step, climb
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.clock import micro_time, parse_time
from memoryguard_kuberay.operator.cycle.guardstate import Cycle, Guard
from memoryguard_kuberay.operator.cycle.judging import Judged, PodState
from memoryguard_kuberay.operator.decided import NOTHING, Decided, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason

log = logging.getLogger("memoryguard_kuberay.operator")
# Verdicts with nothing fresh to climb on: the step in effect stays as it is.
NOT_JUDGED = frozenset({Reason.NO_SAMPLES, Reason.SAMPLES_STALE, Reason.ROTATION_IN_PROGRESS})


def step_from(asked: pressure.Pressure | None) -> Step | None:
    """The step a pod's annotation records, or None (nothing asked, or a
    value the operator could not have written)."""
    if asked is None or asked.step == Rung.NONE.value:
        return None
    since = parse_time(asked.since) if asked.since else None
    if since is None or asked.used_bytes is None:
        return None
    return Step(Rung(asked.step), Level(asked.level), since, asked.used_bytes, asked.creep_bytes_per_h,
                Effect(asked.effect) if asked.effect else None, asked.store_fraction)


def asked_of(guard: str, move: Move, projected_oom_s: float | None) -> pressure.Pressure:
    """What the pod's annotation says after ``move``."""
    step = move.step
    return pressure.Pressure(
        level=move.level.value, step=step.rung.value if step else Rung.NONE.value,
        since=micro_time(step.since_s) if step else None, projected_oom_s=projected_oom_s,
        used_bytes=step.used_bytes if step else None, creep_bytes_per_h=step.creep_bytes_per_h if step else None,
        effect=step.effect.value if step and step.effect else None, guard=guard,
        store_fraction=step.store_fraction if step else None)


def said_key(asked: pressure.Pressure | None, dry_run: bool) -> tuple[object, ...]:
    """What decides a new write: the level, the step, when it was asked, its
    verdict, and whether it was only said (a dry run: written once the dry
    run ends). An annotation the operator could not have written: ()."""
    return () if asked is None else (dry_run, asked.level, asked.step, asked.since, asked.effect)


async def climb_pods(g: Guard, found: Cycle, judged: Sequence[Judged]) -> tuple[dict[str, Move], Decided]:
    """Each judged pod's ladder climbed and applied; returns each pod's move
    by uid (a move that wants the replacement is the cycle's to rotate,
    through the policy's gates)."""
    settings, dry_run = found.spec.policy, found.spec.policy.dry_run
    now = g.ctx.clock.now()
    shedding: collections.Counter[tuple[str, str]] = collections.Counter()
    for j in judged:
        step = _current(j.pod, j.track)
        if step is not None and step.rung is Rung.SHED:
            shedding[(j.pod.cluster, j.pod.group)] += 1
    moves: dict[str, Move] = {}
    decided = NOTHING
    for j in judged:
        p, track, decision = j.pod, j.track, j.decisions[0]
        before = _current(p, track)
        if decision.reason in NOT_JUDGED or p.terminating or p.rotation_phase or track.window.last is None:
            continue
        key = (p.cluster, p.group)
        rotating = g.mem.ledger.rotating_in(p.cluster, p.group)
        busy = shedding[key] - (1 if before is not None and before.rung is Rung.SHED else 0) + rotating
        waits = (f"{busy} pod(s) of group {p.group} shedding or rotating (maxUnavailable "
                 f"{settings.max_unavailable})") if busy >= settings.max_unavailable else None
        move = climb(settings=settings, step=before, decision=decision, window=track.window, now_s=now,
                     shed_waits=waits)
        moves[p.uid] = move
        track.ladder = move.step
        if move.judged is not None:
            track.ladder_judged = move.judged.message
        if (move.step is not None and move.step.rung is Rung.SHED) != (before is not None and before.rung is Rung.SHED):
            shedding[key] += 1 if move.step is not None and move.step.rung is Rung.SHED else -1
        decided += await _apply(g, p, track, move, decision.evidence.projected_oom_s, dry_run)
    return moves, decided


def _current(p: pi.PodInfo, track: PodState) -> Step | None:
    if not track.ladder_read:  # the first cycle of this pod here: its annotation says what was asked
        track.ladder_read = True
        value = p.annotations.get(C.ANN_PRESSURE)
        asked = pressure.parse(value)
        track.ladder = step_from(asked)
        track.pressure_said = None if value is None else said_key(asked, False)
    return track.ladder


async def _apply(g: Guard, p: pi.PodInfo, track: PodState, move: Move, projected_oom_s: float | None,
                 dry_run: bool) -> Decided:
    asked = asked_of(g.name, move, projected_oom_s)
    said = said_key(asked, dry_run)
    if track.pressure_said == said:
        return NOTHING
    if track.pressure_said is None and move.step is None:
        return NOTHING  # nothing was asked and nothing is (the ladder off, or the policy's own rotation)
    if not dry_run:
        try:
            await g.ctx.kube.patch_pod_annotations(p.namespace, p.name, {C.ANN_PRESSURE: asked.to_json()})
        except ApiError as e:  # written next cycle: the track keeps the step, the annotation its last value
            log.warning("%s/%s: could not write %s's pressure: %s", g.namespace, g.name, p.name, e)
            return NOTHING
    track.pressure_said = said
    return _told(g, p, move, dry_run)


def _told(g: Guard, p: pi.PodInfo, move: Move, dry_run: bool) -> Decided:
    about = pod_ref(p.name, p.uid)
    ahead = "dry run: would ask" if dry_run else "asked"
    says = []
    steps = g.ctx.metrics.ladder_steps
    if move.judged is not None:
        j = move.judged
        steps.labels(g.namespace, g.name, j.rung.value, j.effect.value).inc()
        says.append(say(EventReason.PRESSURE_STEP_JUDGED, f"{p.name}: {j.message}", about))
    if move.started and move.rung is not Rung.NONE:
        steps.labels(g.namespace, g.name, move.rung.value, "asked").inc()
        says.append(say(EventReason.PRESSURE_STEP_PLANNED if dry_run else EventReason.PRESSURE_STEP,
                        f"{ahead} {p.name} to {move.rung.value.lower()}: {move.message}", about))
    elif move.ended:
        says.append(say(EventReason.PRESSURE_EASED, f"{p.name}: {move.message}", about))
    return Decided(tuple(says))


def status_of(track: PodState, move: Move | None) -> dict[str, object] | None:
    """The pod's ``pressure`` in the guard's status."""
    step = track.ladder
    if move is None and step is None:
        return None
    out: dict[str, object] = {"level": (move.level if move else step.level if step else Level.NORMAL).value,
                              "step": step.rung.value if step else Rung.NONE.value}
    if step is not None:
        out["since"] = micro_time(step.since_s)
        if step.effect is not None:
            out["effect"] = step.effect.value
    return out
