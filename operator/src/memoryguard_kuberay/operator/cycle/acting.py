"""Acting on one pod's decisions (the policy's, core/policy): start its
rotation and the collection of its evidence, or recommend or apply a
remediation to its RayCluster. Called by the cycle's deciding and
evidence steps (steps.py); each returns what it decided (decided.py).

What it changes in the guard's memory (the ledger's rotations in flight,
what was remembered and reviewed) is what the cycle writes to the status
at its end; the pod's annotation, made first, is a rotation's durable
record until then (rotation.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.policy import Action, Decision, Reason, RotationHistory, efficacy
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.clock import micro_time
from memoryguard_kuberay.operator.cycle.guardstate import Cycle, Guard
from memoryguard_kuberay.operator.cycle.judging import PodState
from memoryguard_kuberay.operator.decided import NOTHING, Decided, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.forensics import collect as forensics
from memoryguard_kuberay.operator.guardspec import Mode
from memoryguard_kuberay.operator.rayclusters import kuberayrules, remediation
from memoryguard_kuberay.operator.rayclusters.groups import Groups
from memoryguard_kuberay.operator.rotations import rotation

log = logging.getLogger("memoryguard_kuberay.operator")
STORE_REASONS = frozenset({Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL})


async def act(g: Guard, found: Cycle, p: pi.PodInfo, track: PodState, decisions: list[Decision]) -> Decided:
    decided = NOTHING
    for d in decisions:
        if d.action is Action.ROTATE:
            decided += await rotate(g, found, p, d, track)
        elif d.action is Action.REMEDIATE:
            g.mem.remembered.advised.add((p.cluster, p.group))
            decided += await remediate(g, found, p, d, "jemalloc")
        if d.reason in STORE_REASONS and found.spec.spilling.mode != Mode.OFF:
            decided += await remediate(g, found, p, d, "spilling")
    return decided


async def rotate(g: Guard, found: Cycle, p: pi.PodInfo, d: Decision, track: PodState) -> Decided:
    """Start a rotation (rotation.py) and the collection of its evidence;
    a dry run only says, once per pod, what it would rotate."""
    reason = f"{d.reason.value}: {d.message}"
    about = pod_ref(p.name, p.uid)
    if d.dry_run:
        if p.uid in g.mem.remembered.planned:
            return NOTHING
        g.mem.remembered.planned.add(p.uid)
        return Decided((say(EventReason.ROTATION_PLANNED, f"dry run: would rotate {p.name}: {reason}", about),))
    try:
        rot = await rotation.start(g.ctx.kube, p, guard=g.name, reason=reason, now=g.ctx.clock.now())
    except ApiError as e:
        log.warning("%s/%s: could not mark %s for rotation: %s", g.namespace, g.name, p.name, e)
        return NOTHING
    g.mem.ledger.inflight[p.uid] = rot
    if found.spec.forensics.enabled:
        start_evidence(g, found, p, d, track)
    return Decided((say(EventReason.ROTATION_STARTED, f"rotating {p.name} (group {p.group}): {reason}", about),),
                   {"rotations": g.mem.ledger.to_status()})


def ladder_record(track: PodState) -> dict[str, Any] | None:
    """The ladder's steps before a rotation, for its evidence: the step in
    effect (or the last asked) and the last step's measured effect."""
    step = track.ladder
    if step is None and track.ladder_judged is None:
        return None
    out: dict[str, Any] = {"lastJudged": track.ladder_judged}
    if step is not None:
        out.update(step=step.rung.value, level=step.level.value, since=micro_time(step.since_s),
                   usedBytesAtStep=step.used_bytes, effect=step.effect.value if step.effect else None)
    return out


def start_evidence(g: Guard, found: Cycle, p: pi.PodInfo, d: Decision, track: PodState) -> None:
    spec = found.spec
    subject = forensics.Subject(
        namespace=g.namespace, guard=g.name, guard_uid=found.guard_uid,
        pod=p.name, pod_uid=p.uid, cluster=p.cluster, group=p.group, ip=p.ip,
        sidecar_port=spec.sampling.sidecar_port, gcs_address=found.gcs_address(p.cluster), decision=d,
        last_sample=track.window.last, ladder=ladder_record(track))
    g.evidence.start(subject, kube=g.ctx.kube, budget_s=spec.forensics.timeout_s, keep_n=spec.forensics.keep,
                     with_ray=g.ctx.ray_forensics, probe_slots=g.ctx.probe_slots, now=g.ctx.clock.now())


async def remediate(g: Guard, found: Cycle, p: pi.PodInfo, d: Decision, kind: str) -> Decided:
    """Once per (cluster, group, kind): recommend or patch (remediation.py)."""
    key = (p.cluster, p.group, kind)
    rc = found.by_name.get(p.cluster)
    if rc is None or key in g.mem.remembered.remediated or p.is_head:
        return NOTHING
    done = await remediation.remediate(g.ctx.kube, namespace=g.namespace, spec=found.spec, rc=rc, pod=p,
                                       decision=d, kind=kind, admission=g.ctx.admission)
    if done.mode is not None:  # None: refused by the API, tried again next time
        g.mem.remembered.remediated.add(key)
    if done.rc is not None:  # the rest of the cycle patches from what the server now has
        found.saw(p.cluster, done.rc)
    if done.mode:
        g.ctx.metrics.remediations.labels(g.namespace, g.name, kind, done.mode).inc()
    if done.env:  # applied: its review starts, the group's pods as they are the "before"
        tracks = g.mem.tracks
        g.mem.reviews.start(key, done.env, now=g.ctx.clock.now(), creeps=[
            (q.uid, efficacy.creep_bytes_per_h(tracks[q.uid].window)) for q in found.guarded
            if q.cluster == p.cluster and q.group == p.group and q.uid in tracks])
        return Decided(done.says, {"remembered": g.mem.remembered.to_status(),
                                   "remediations": g.mem.reviews.to_status()})
    return Decided(done.says, {"remembered": g.mem.remembered.to_status()})


def history_for(g: Guard, p: pi.PodInfo, now: float, groups: Groups,
                rc: Mapping[str, Any] | None = None, *, ladder_replace: bool = False) -> RotationHistory:
    """What the policy weighs a rotation of ``p`` against (its group's and
    the guard's rotations); ``rc``: the pod's RayCluster (its numOfHosts),
    where the caller has it; ``ladder_replace``: the ladder asks for it."""
    ledger = g.mem.ledger
    in_group = ledger.rotating_in(p.cluster, p.group)
    group_starts = ledger.starts(now, group=(p.cluster, p.group))
    return RotationHistory(
        is_head=p.is_head,
        pod_rotation_in_flight=p.uid in ledger.inflight or bool(p.rotation_phase) or p.terminating,
        group_in_flight=in_group,
        group_short=groups.short(p.cluster, p.group, rotating=in_group, inflight=ledger.inflight),
        group_last_rotation_s=max(group_starts) if group_starts else None,
        guard_rotations_last_hour=ledger.rotations_last_hour(now),
        remediation_advised=(p.cluster, p.group) in g.mem.remembered.advised, user_requested=p.user_requested,
        hosts_per_replica=kuberayrules.hosts_per_replica(rc, p.group) if p.replica else 1,
        ladder_replace=ladder_replace)
