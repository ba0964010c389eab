"""The steps of a guard's cycle, in the order guarding.cycle runs them.

Each takes the guard (``Guard``: who it is, its memory) and what the steps
before it found, as arguments; an observing step returns what it found
(the spec, the namespace's guards, the clusters, the pods, the pods'
views), and every step returns what it decided (decided.py): Events,
pieces of status, or that the cycle ends here. None writes the status or
posts an Event: the cycle does, once, at its end.

A step that acts through the API (rotation, remediation, evidence) reads
the clock afresh (``g.ctx.clock.now()``) rather than the cycle's start:
it stamps what it did when it did it, and the policy judges samples that
a poll brought in after the cycle began.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import Action, efficacy, urgency
from memoryguard_kuberay.core.policy.efficacy import Verdict
from memoryguard_kuberay.core.policy.ladder import Move, Rung
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import PageTooLarge
from memoryguard_kuberay.operator.clock import iso
from memoryguard_kuberay.operator.cycle import acting, guardroster, judging, laddering
from memoryguard_kuberay.operator.cycle.guardstate import Cycle, Guard, Run
from memoryguard_kuberay.operator.cycle.judging import Judged
from memoryguard_kuberay.operator.decided import NOTHING, Decided, Say, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import GuardSpec, Mode, SpecError, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import clusters, kuberayrules, remediation
from memoryguard_kuberay.operator.rayclusters.groups import Groups
from memoryguard_kuberay.operator.rotations import rotation
from memoryguard_kuberay.operator.rotations.ledger import OutcomeKind, Phase

log = logging.getLogger("memoryguard_kuberay.operator")
POLL_CONCURRENCY = 64  # one namespace's polls at once (every guard there together)
POD_WAIT_S = 10.0  # a guard's first cycle waits this long for its namespace's pods to be listed
INVALID_RETRY_S = 30.0  # an invalid spec is read again after this (its change also wakes kopf)
REFUSED_RETRY_S = 60.0  # a guard over its namespace's limit asks again after this
# Real seconds, not the operator clock's: the first placement ends at a tick
# of the shards' Leases (real time); on a clock run 600 times faster, 3 s of
# it was 5 ms, and every guard cycled (API reads, patches) that often.
PLACING_RETRY_S = 3.0  # a guard counting its pods during the first placement counts again after this


def read_spec(g: Guard, run: Run) -> tuple[GuardSpec | None, Decided]:
    """The spec, read as `simulate` reads it, within the installer's limits;
    None (and the cycle ends) when it is invalid, said once a generation."""
    try:
        spec = read_guard_spec(run.body.get("spec"), sidecar_image=g.ctx.sidecar_image, trust=g.ctx.trust)
    except SpecError as e:
        says: tuple[Say, ...] = ()
        if g.mem.invalid_generation != run.generation:
            g.mem.invalid_generation = run.generation
            says = (say(EventReason.INVALID_SPEC, "; ".join(e.problems)),)
        return None, Decided(says, status_without_pods(g, run, spec_error=str(e)), INVALID_RETRY_S, "InvalidSpec")
    g.mem.invalid_generation = None
    if g.mem.settings != spec.policy:
        # New thresholds, new windows: the sidecars' buffers refill them.
        g.mem.tracks.clear()
        g.mem.settings = spec.policy
    return spec, NOTHING


async def admit(g: Guard, run: Run) -> Decided:
    """The namespace's guards (listed once for all of them): a guard past
    the installer's limit per namespace is refused, saying why, and the
    cycle ends."""
    guards = await g.ctx.roster.guards(g.namespace)
    refused = guardroster.refusal(guards, run.body, g.ctx.roster.limit)
    if refused:
        return Decided((), status_without_pods(g, run, refused=refused), REFUSED_RETRY_S, "TooManyGuards")
    return NOTHING


async def find_clusters(g: Guard, run: Run, spec: GuardSpec) -> clusters.Selected:
    """The RayClusters the guard selects, and those it names that are missing
    or another (older, served) guard's."""
    older = await g.ctx.roster.older_served(g.namespace, run.body)
    return await clusters.select(g.ctx.kube, namespace=g.namespace, guard=run.body, spec=spec, guards=older,
                                 trust=g.ctx.trust)


async def say_missing_clusters(g: Guard, run: Run, selected: clusters.Selected) -> Decided:
    """A Warning Event when the RayClusters the spec names and the namespace
    lacks change, with the nearest names it has (issue 61, 6: a misspelled
    name got no Event and no log line, only a condition)."""
    missing = sorted(selected.missing)
    before = g.mem.status.get("clustersNotFound") or []
    if missing == before:
        return NOTHING
    if not missing:
        return Decided((), {"clustersNotFound": None})
    try:
        have = await g.ctx.kube.raycluster_names(g.namespace)
    except (ApiError, PageTooLarge):  # the names are a hint: the Event goes without them
        have = []
    parts = []
    for name in missing:
        near = difflib.get_close_matches(name, have, n=2, cutoff=0.6)
        parts.append(f"{name}" + (f" (did you mean {' or '.join(near)}?)" if near else ""))
    return Decided((say(EventReason.CLUSTER_NOT_FOUND, f"spec.clusterSelector.names: RayCluster(s) not found in "
                                                       f"namespace {g.namespace}: {'; '.join(parts)}"),),
                   {"clustersNotFound": missing})


async def set_up_clusters(g: Guard, run: Run, spec: GuardSpec, selected: clusters.Selected) -> Decided:
    """The sidecar injected and the budgets kept (a dry run injects the
    sidecar, the observer, and keeps no budget: clusters.set_up)."""
    before = g.mem.status.get("templatesHeld") or {}
    done = await clusters.set_up(g.ctx.kube, namespace=g.namespace, guard=run.body, spec=spec,
                                 clusters=selected.clusters, native_sidecar=g.ctx.native_sidecars,
                                 dry_run=spec.policy.dry_run, admission=g.ctx.admission,
                                 held_before=list(before) if isinstance(before, Mapping) else [])
    held = {name: {"reason": h.why.value, "message": h.message} for name, h in sorted(done.held.items())}
    return Decided(tuple(done.says), {"templatesHeld": held} if held != before else {})


async def read_pods(g: Guard, run: Run, spec: GuardSpec, selected: clusters.Selected) -> Cycle:
    """Their pods, from the namespace's watch (podcache.py); rotations a
    restart left on pods' annotations are adopted into the ledger."""
    pods = await g.ctx.pods.pods(g.namespace, g.name, [c["metadata"]["name"] for c in selected.clusters],
                                 wait_s=POD_WAIT_S)
    declared = clusters.declared_groups(selected.clusters)
    found = Cycle(spec, selected, pods, [p for p in pods if clusters.is_guarded(spec, p, declared)],
                  Groups.of(selected.clusters, pods), run.uid)
    g.mem.ledger.adopt(pods, guard=g.name, max_unavailable=spec.policy.max_unavailable, now=g.ctx.clock.now())
    return found


def hold_while_placing(g: Guard) -> Decided:
    """A release's first placement of its shards (shards.py): the pods
    counted (the shard's weight) and none polled, until the shards sit
    where their counts place them; else a shard moved right after would
    have cost this replica its pods' first polls for nothing."""
    if g.ctx.shards.placing():
        return Decided(end_in_s=PLACING_RETRY_S * g.ctx.clock.scale)
    return NOTHING


async def advance_rotations(g: Guard, found: Cycle) -> Decided:
    """The next step of every rotation in flight (rotation.py)."""
    spec, ledger, metrics = found.spec, g.mem.ledger, g.ctx.metrics
    guarded = {p.uid for p in found.guarded}
    dropped = ledger.vet(found.pods, guard=g.name, guarded=lambda p: p.uid in guarded,
                         max_unavailable=spec.policy.max_unavailable)
    changed = bool(dropped)
    says: list[Say] = [say(EventReason.STATUS_RECORD_DROPPED, why) for why in dropped]
    for uid, rot in list(ledger.inflight.items()):
        if rot.phase is Phase.DRAINING and g.evidence.collecting_for(uid):
            continue  # its evidence first (never past the forensics deadline)
        before = (rot.phase, rot.refused, rot.gone_at)
        try:
            out = await rotation.advance(
                rot, kube=g.ctx.kube, drainer=g.ctx.drainer, pods=found.pods,
                gcs_address=found.gcs_address(rot.cluster), drain_timeout_s=spec.policy.drain_timeout_s,
                replacement_timeout_s=spec.replacement_timeout_s, eviction_timeout_s=spec.eviction_timeout_s,
                now=g.ctx.clock.now(),
                serving=kuberayrules.rayservice_owner(found.by_name.get(rot.cluster) or {}) is not None)
        except ApiError as e:
            # The step is repeated next cycle (each is idempotent); the other rotations go on.
            log.warning("%s/%s: rotation of %s stays %s for now: %s", g.namespace, g.name, rot.pod, rot.phase, e)
            continue
        says.extend(out.says)
        if rot.refused > before[1]:
            metrics.evictions_refused.labels(g.namespace, g.name).inc()
            if out.message:
                log.warning("%s/%s: %s", g.namespace, g.name, out.message)
        if out.ended:
            ledger.end(uid, out, now=g.ctx.clock.now())
            metrics.rotations.labels(g.namespace, g.name, rot.reason_code, out.kind.value).inc()
            if out.eviction_timed_out:
                metrics.eviction_timeouts.labels(g.namespace, g.name).inc()
            rotated = out.kind is OutcomeKind.ROTATED
            says.append(say(EventReason.ROTATED if rotated else EventReason.ROTATION_FAILED, out.message,
                            pod_ref(rot.pod, rot.uid)))
        changed = changed or out.ended or (rot.phase, rot.refused, rot.gone_at) != before
    return Decided(tuple(says), {"rotations": ledger.to_status()} if changed else {})


async def take_evidence(g: Guard, found: Cycle) -> Decided:
    """Collections that finished since the last cycle: their Events and
    ``status.forensics``; Ray told to record call sites where it had not."""
    decided = NOTHING
    for kept in g.evidence.finished():
        decided += Decided(kept.says, {"forensics": kept.status} if kept.status else {})
        pod = next((p for p in found.pods if p.uid == kept.pod_uid), None)
        if kept.sites_unrecorded and pod is not None and found.spec.forensics.call_sites != Mode.OFF:
            decided += await acting.remediate(g, found, pod, kept.decision, "callsites")
    return decided


async def poll_and_decide(g: Guard, found: Cycle) -> tuple[list[st.PodView], Decided]:
    """Every pod polled and judged (judging.py); then, once every pod has
    been heard, the rotations most urgent first (a group's slots go to
    the pods nearest their OOM, not to the first to answer), one at a
    time so each sees the slots the ones before it took: the policy
    decides again with them (it may now defer, and says why). Returns
    each pod's view for the status, by name."""
    settings = found.spec.policy
    clock = g.ctx.clock
    how = judging.Polling(
        port=found.spec.sampling.sidecar_port, timeout_s=found.spec.sampling.timeout_s, clock=clock,
        metrics=g.ctx.metrics, namespace=g.namespace, guard=g.name,
        slots=(g.ctx.namespace_slots.setdefault(g.namespace, asyncio.Semaphore(POLL_CONCURRENCY)),
               g.ctx.pod_slots), pool=g.ctx.pod_pool, at_once=POLL_CONCURRENCY,
        expect_sidecar=found.spec.sidecar.inject, admission=g.ctx.admission)
    judged = await judging.poll_and_judge(
        found.guarded, g.mem.tracks, how, settings,
        lambda p: acting.history_for(g, p, clock.now(), found.groups, found.by_name.get(p.cluster)))
    # The ladder before a rotation (laddering.py): its steps asked, and the
    # pods whose reclaim and shed did not move them, for the rotation below.
    moves, decided = await laddering.climb_pods(g, found, judged)
    replace = {uid for uid, m in moves.items() if _ladder_replaces(m)}
    wanting = [j for j in judged if any(d.action is Action.ROTATE and not d.dry_run for d in j.decisions)
               or j.pod.uid in replace]
    views: dict[str, st.PodView] = {}
    for j in [j for j in judged if j not in wanting]:
        decided += await acting.act(g, found, j.pod, j.track, j.decisions)
        views[j.pod.name] = _view(j, moves.get(j.pod.uid))
    for j in sorted(wanting, key=lambda w: urgency(w.decisions[0])):
        decisions = judging.judge(settings, j.track, acting.history_for(
            g, j.pod, clock.now(), found.groups, found.by_name.get(j.pod.cluster),
            ladder_replace=j.pod.uid in replace), clock.now())
        decided += await acting.act(g, found, j.pod, j.track, decisions)
        views[j.pod.name] = _view(Judged(j.pod, j.track, decisions), moves.get(j.pod.uid))
    for p in found.guarded:  # a user's ask the operator does not take: said once a pod
        if (value := p.ask_ignored) is not None and p.uid not in g.mem.remembered.ignored:
            g.mem.remembered.ignored.add(p.uid)
            decided += Decided((say(EventReason.ASK_IGNORED, (
                f"{p.name}: {C.ANN_ROTATE}={value[:64]!r} is not a value MemoryGuard takes: set it to "
                f"{' or '.join(pi.ROTATE_VALUES)} to ask for a rotation"), pod_ref(p.name, p.uid)),))
    g.mem.remembered.forget_pods_except([p.uid for p in found.pods])
    return [views[k] for k in sorted(views)], decided + Decided((), {
        "rotations": g.mem.ledger.to_status(), "remembered": g.mem.remembered.to_status()})


async def review_remediations(g: Guard, found: Cycle) -> Decided:
    """Each applied remediation not yet judged: its group's pods on either
    side of it, by their creep (reviews.py, efficacy.py); once judged, an
    Event, and an ineffective one undone when the guard asks for it (a
    revert the API refused for now is tried again next cycle)."""
    reviews, spec = g.mem.reviews, found.spec
    decided = NOTHING
    for (cluster, group, kind), o in list(reviews.open.items()):
        if not o.decided:
            limits = []
            for p in found.guarded:
                track = g.mem.tracks.get(p.uid)
                if p.cluster == cluster and p.group == group and track is not None:
                    o.observe(p.uid, p.remedy_env, efficacy.creep_bytes_per_h(track.window))
                    if track.window.limit_bytes:
                        limits.append(track.window.limit_bytes)
            review = o.judge(now=g.ctx.clock.now(), min_pods=spec.review.min_pods,
                             noise_bytes_per_h=spec.policy.min_growth_fraction_per_h * min(limits or [0]),
                             after_s=spec.review.after_s)
            decided += Decided((), {"remediations": reviews.to_status()})
            if review.verdict is Verdict.PENDING:
                continue
            g.ctx.metrics.reviews.labels(g.namespace, g.name, kind, review.verdict.value).inc()
            decided += Decided((say(EventReason.REMEDIATION_INEFFECTIVE if review.verdict.ineffective
                                    else EventReason.REMEDIATION_EFFECTIVE,
                                    f"{kind} on group {group} of {cluster}: {review.message}",
                                    found.by_name.get(cluster) or {"metadata": {"name": cluster}}),))
        assert o.review is not None
        if o.review.verdict.ineffective and spec.review.revert_ineffective and not o.reverted \
                and cluster in found.by_name:
            o.reverted, said, patched = await remediation.revert(
                g.ctx.kube, namespace=g.namespace, rc=found.by_name[cluster], cluster=cluster,
                group=group, kind=kind, env=o.env, why=o.review.message, allow_recreate=spec.allow_recreate,
                admission=g.ctx.admission)
            if patched is not None:  # the rest of the cycle patches from what the server now has
                found.saw(cluster, patched)
            decided += Decided(() if said is None else (said,), {"remediations": reviews.to_status()})
    return decided


def summarize(g: Guard, run: Run, found: Cycle, views: list[st.PodView]) -> Decided:
    """The status, computed once from what the cycle found and did."""
    selected = found.selected
    g.ctx.metrics.publish(g.namespace, g.name, views, guarded=len(found.guarded))
    status = st.build(generation=run.generation, clusters=[c["metadata"]["name"] for c in selected.clusters],
                      pods=views, spec_error=None, missing_clusters=selected.missing,
                      contested=selected.contested, rotations=g.mem.ledger.to_status(),
                      last_action=None, now_iso=iso(run.now), previous=g.mem.status,
                      held=g.mem.status.get("templatesHeld") or {},
                      unknown_groups=clusters.unknown_groups(found.spec, selected.clusters), unread=selected.unread)
    status["templates"] = st.templates(views)
    deg = next(c for c in status["conditions"] if c["type"] == "Degraded")
    g.ctx.metrics.degraded(g.namespace, g.name, deg["reason"] if deg["status"] == "True" else None)
    return Decided((), status)


def status_without_pods(g: Guard, run: Run, *, spec_error: str | None = None,
                        refused: str | None = None) -> dict[str, Any]:
    """The status of a guard that guards nothing this cycle, saying why."""
    return st.build(generation=run.generation, clusters=[], pods=[], spec_error=spec_error, refused=refused,
                    missing_clusters=[], rotations=g.mem.ledger.to_status(), last_action=None,
                    now_iso=iso(run.now), previous=g.mem.status)


def _ladder_replaces(m: Move) -> bool:
    """The ladder's own last rung (the policy's rotations need no asking)."""
    return m.step is not None and m.step.rung is Rung.REPLACE


def _view(j: Judged, move: Move | None = None) -> st.PodView:
    t = j.track
    return st.PodView(j.pod.name, j.pod.group, j.decisions[0], t.error, t.blind, t.failure, j.pod.template,
                      efficacy.creep_bytes_per_h(t.window), laddering.status_of(t, move))
