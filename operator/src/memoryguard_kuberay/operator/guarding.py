"""One MemoryGuard's cycle, called by the kopf daemon every
``sampling.intervalSeconds`` (operator clock).

A cycle is the literal list of steps in ``GuardReconciler.cycle``, run in
order, as KubeRay's controller runs its reconcile functions. Each step
reads what the steps before it found (``Run``, made afresh each cycle),
acts through the API where it must, and returns what it decided
(decided.py): Events, pieces of status, or that the cycle ends here. The
loop alone writes the status (first) and posts the Events (after); then
the status is computed once from the whole cycle and written only when it
changed.

What must survive a restart is on the objects (pod annotations, the
guard's status: rotations, what was said and remediated), read back on
the first cycle; the policy windows are the only state kept in memory
alone, and the sidecars' ring buffers refill them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import Action, Decision, Reason, RotationHistory, efficacy, urgency
from memoryguard_kuberay.core.policy.efficacy import Verdict
from memoryguard_kuberay.operator import (
    cadence,
    clusters,
    forensics,
    guardroster,
    judging,
    kuberayrules,
    remediation,
    rotation,
)
from memoryguard_kuberay.operator import podinfo as pi
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.clock import iso
from memoryguard_kuberay.operator.decided import NOTHING, Decided, Say, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.evidence import Evidence
from memoryguard_kuberay.operator.groups import Groups
from memoryguard_kuberay.operator.guardspec import Mode, SpecError, read_guard_spec
from memoryguard_kuberay.operator.guardstate import Cycle, Memory, OperatorContext, Run
from memoryguard_kuberay.operator.judging import Judged, PodState
from memoryguard_kuberay.operator.kube import ApiError
from memoryguard_kuberay.operator.ledger import OutcomeKind, Phase

log = logging.getLogger("memoryguard_kuberay.operator")
STORE_REASONS = frozenset({Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL})
POLL_CONCURRENCY = 64  # one namespace's polls at once (every guard there together)
POD_WAIT_S = 10.0  # a guard's first cycle waits this long for its namespace's pods to be listed
MIN_PAUSE_S = 0.5  # operator clock: the least pause between two cycles of one guard
INVALID_RETRY_S = 30.0  # an invalid spec is read again after this (its change also wakes kopf)
REFUSED_RETRY_S = 60.0  # a guard over its namespace's limit asks again after this
# Real seconds, not the operator clock's: the first placement ends at a tick
# of the shards' Leases (real time); on a clock run 600 times faster, 3 s of
# it was 5 ms, and every guard cycled (API reads, patches) that often.
PLACING_RETRY_S = 3.0  # a guard counting its pods during the first placement counts again after this


Step = Callable[[Run], Awaitable[Decided]]


class GuardReconciler:
    def __init__(self, ctx: OperatorContext, namespace: str, name: str) -> None:
        self.ctx = ctx
        self.namespace, self.name = namespace, name
        self.memory: Memory | None = None  # read back from the guard's status on the first cycle
        self.evidence = Evidence()  # collections under way (work, not memory: see evidence.py)
        self.counted: int | None = None  # its guarded pods, as the last cycle to read them found them
        self.phase = cadence.phase_of(namespace, name)  # its place within the sampling interval

    # -- the cycle ---------------------------------------------------------------------
    async def cycle(self, body: Mapping[str, Any], *, stopped: Callable[[], bool] = lambda: False) -> float:
        """One pass; returns the delay until the next (operator clock).
        ``stopped`` is asked between steps: a guard being deleted starts no
        new step (its finalizer then cleans up)."""
        t0 = time.monotonic()
        if self.memory is None:
            self.memory = Memory.from_status(body.get("status") or {})
        run = Run(body=body, now=self.ctx.clock.now())
        steps: list[Step] = [
            self.read_spec,
            self.admit,
            self.find_clusters,
            self.set_up_clusters,
            self.read_pods,
            self.hold_while_placing,
            self.advance_rotations,
            self.take_evidence,
            self.poll_and_decide,
            self.review_remediations,
            self.summarize,
        ]
        for step in steps:
            if stopped():
                return 0.0
            try:
                decided = await step(run)
            except ApiError as e:
                # Every step is idempotent: the next cycle repeats this one.
                log.warning("%s/%s: API error in %s, retrying next cycle: %s", self.namespace, self.name,
                            step.__name__, e)
                return run.spec.sampling.interval_s if run.spec else INVALID_RETRY_S
            await self.apply(body, decided)
            if decided.end_in_s is not None:
                if run.found is None:
                    self.counted = 0  # ended by a decision before its pods (invalid, refused): it polls none
                self.ctx.metrics.degraded(self.namespace, self.name, decided.degraded)
                return decided.end_in_s
        assert run.spec is not None
        took = time.monotonic() - t0
        self.ctx.metrics.cycle_seconds.labels(self.namespace, self.name).observe(took)
        # Cycles start every interval, not an interval after the last one
        # ended: a long cycle (thousands of pods) must not stretch the time
        # between two polls of a pod; and at the guard's own place in the
        # interval, so a replica's guards do not all poll at once (cadence.py).
        return cadence.pause(started=run.now, now=self.ctx.clock.now(), interval_s=run.spec.sampling.interval_s,
                             phase=self.phase, min_pause_s=MIN_PAUSE_S)

    async def apply(self, guard: Mapping[str, Any], decided: Decided) -> None:
        """A step's decision: the status first, then the Events, so whoever
        sees an Event finds what it announced already recorded (a restarted
        operator resumes from that record)."""
        status = dict(decided.status)
        if decided.says:
            status.update(lastAction=decided.says[-1].last_action, lastActionBrief=decided.says[-1].brief)
        if status:
            await self.write_status(status)
        for said in decided.says:
            log.info("%s/%s %s: %s", self.namespace, self.name, said.reason.value, said.message)
            self.ctx.events.announce(self.namespace, guard, said)

    def pods(self) -> int | None:
        """The pods this guard polls, as its last cycle to count them found
        them; None until one has (its pods not read yet: the API failing, the
        namespace's pods still being listed), so that a shard is not weighed
        on a guard that only could not count."""
        return self.counted

    @property
    def mem(self) -> Memory:
        assert self.memory is not None, "the cycle reads the memory back first"
        return self.memory

    # -- the steps, in the order the cycle runs them -------------------------------------
    async def read_spec(self, run: Run) -> Decided:
        """The spec, read as `simulate` reads it, within the installer's limits."""
        try:
            run.spec = read_guard_spec(run.body.get("spec"), sidecar_image=self.ctx.sidecar_image,
                                       trust=self.ctx.trust)
        except SpecError as e:
            says: tuple[Say, ...] = ()
            if self.mem.invalid_generation != run.generation:
                self.mem.invalid_generation = run.generation
                says = (say(EventReason.INVALID_SPEC, "; ".join(e.problems)),)
            return Decided(says, self.status_without_pods(run, spec_error=str(e)), INVALID_RETRY_S, "InvalidSpec")
        self.mem.invalid_generation = None
        if self.mem.settings != run.spec.policy:
            # New thresholds, new windows: the sidecars' buffers refill them.
            self.mem.tracks.clear()
            self.mem.settings = run.spec.policy
        return NOTHING

    async def admit(self, run: Run) -> Decided:
        """The namespace's guards (listed once for all of them): a guard past
        the installer's limit per namespace is refused, saying why."""
        run.guards = await self.ctx.roster.guards(self.namespace)
        refused = guardroster.refusal(run.guards, run.body, self.ctx.roster.limit)
        if refused:
            return Decided((), self.status_without_pods(run, refused=refused), REFUSED_RETRY_S, "TooManyGuards")
        return NOTHING

    async def find_clusters(self, run: Run) -> Decided:
        assert run.spec is not None
        run.selected = await clusters.select(self.ctx.kube, namespace=self.namespace, guard=run.body, spec=run.spec,
                                             guards=run.guards, trust=self.ctx.trust)
        return NOTHING

    async def set_up_clusters(self, run: Run) -> Decided:
        """The sidecar injected and the budgets kept (a dry run injects the
        sidecar, the observer, and keeps no budget: clusters.set_up)."""
        assert run.spec is not None and run.selected is not None
        before = self.mem.status.get("templatesHeld") or {}
        done = await clusters.set_up(self.ctx.kube, namespace=self.namespace, guard=run.body, spec=run.spec,
                                     clusters=run.selected.clusters, native_sidecar=self.ctx.native_sidecars,
                                     dry_run=run.spec.policy.dry_run,
                                     held_before=list(before) if isinstance(before, Mapping) else [])
        held = {name: {"reason": h.why.value, "message": h.message} for name, h in sorted(done.held.items())}
        return Decided(tuple(done.says), {"templatesHeld": held} if held != before else {})

    async def read_pods(self, run: Run) -> Decided:
        """Their pods, from the namespace's watch (podcache.py); rotations a
        restart left on pods' annotations are adopted into the ledger."""
        assert run.spec is not None and run.selected is not None
        spec, selected = run.spec, run.selected
        pods = await self.ctx.pods.pods(self.namespace, self.name, [c["metadata"]["name"] for c in selected.clusters],
                                        wait_s=POD_WAIT_S)
        run.found = Cycle(spec, selected, pods, [p for p in pods if clusters.is_guarded(spec, p)],
                          Groups.of(selected.clusters, pods), str((run.body.get("metadata") or {}).get("uid", "")))
        self.mem.ledger.adopt(pods, guard=self.name, max_unavailable=spec.policy.max_unavailable,
                              now=self.ctx.clock.now())
        self.counted = len(run.found.guarded)
        return NOTHING

    async def hold_while_placing(self, run: Run) -> Decided:
        """A release's first placement of its shards (shards.py): the pods
        counted (the shard's weight) and none polled, until the shards sit
        where their counts place them; else a shard moved right after would
        have cost this replica its pods' first polls for nothing."""
        if self.ctx.shards.placing():
            return Decided(end_in_s=PLACING_RETRY_S * self.ctx.clock.scale)
        return NOTHING

    async def advance_rotations(self, run: Run) -> Decided:
        """The next step of every rotation in flight (rotation.py)."""
        assert run.found is not None
        spec, ledger, metrics = run.found.spec, self.mem.ledger, self.ctx.metrics
        dropped = ledger.vet(run.found.pods, guard=self.name, guarded=lambda p: clusters.is_guarded(spec, p),
                             max_unavailable=spec.policy.max_unavailable)
        changed = bool(dropped)
        says: list[Say] = [say(EventReason.STATUS_RECORD_DROPPED, why) for why in dropped]
        for uid, rot in list(ledger.inflight.items()):
            if rot.phase is Phase.DRAINING and self.evidence.collecting_for(uid):
                continue  # its evidence first (never past the forensics deadline)
            before = (rot.phase, rot.refused, rot.gone_at)
            try:
                out = await rotation.advance(
                    rot, kube=self.ctx.kube, drainer=self.ctx.drainer, pods=run.found.pods,
                    gcs_address=run.found.gcs_address(rot.cluster), drain_timeout_s=spec.policy.drain_timeout_s,
                    replacement_timeout_s=spec.replacement_timeout_s, eviction_timeout_s=spec.eviction_timeout_s,
                    now=self.ctx.clock.now())
            except ApiError as e:
                # The step is repeated next cycle (each is idempotent); the other rotations go on.
                log.warning("%s/%s: rotation of %s stays %s for now: %s", self.namespace, self.name, rot.pod,
                            rot.phase, e)
                continue
            says.extend(out.says)
            if rot.refused > before[1]:
                metrics.evictions_refused.labels(self.namespace, self.name).inc()
                if out.message:
                    log.warning("%s/%s: %s", self.namespace, self.name, out.message)
            if out.ended:
                ledger.end(uid, out, now=self.ctx.clock.now())
                metrics.rotations.labels(self.namespace, self.name, rot.reason.split(":", 1)[0],
                                         out.kind.value).inc()
                if out.eviction_timed_out:
                    metrics.eviction_timeouts.labels(self.namespace, self.name).inc()
                rotated = out.kind is OutcomeKind.ROTATED
                says.append(say(EventReason.ROTATED if rotated else EventReason.ROTATION_FAILED, out.message,
                                pod_ref(rot.pod, rot.uid)))
            changed = changed or out.ended or (rot.phase, rot.refused, rot.gone_at) != before
        # Written at once when it moved: after an eviction the pod (and its annotations) are gone.
        return Decided(tuple(says), {"rotations": ledger.to_status()} if changed else {})

    async def take_evidence(self, run: Run) -> Decided:
        """Collections that finished since the last cycle: their Events and
        ``status.forensics``; Ray told to record call sites where it had not."""
        assert run.found is not None
        decided = NOTHING
        for kept in self.evidence.finished():
            decided += Decided(kept.says, {"forensics": kept.status} if kept.status else {})
            pod = next((p for p in run.found.pods if p.uid == kept.pod_uid), None)
            if kept.sites_unrecorded and pod is not None and run.found.spec.forensics.call_sites != Mode.OFF:
                decided += await self.remediate(run.found, pod, kept.decision, "callsites")
        return decided

    async def poll_and_decide(self, run: Run) -> Decided:
        """Every pod polled and judged (judging.py); then, once every pod has
        been heard, the rotations most urgent first (a group's slots go to
        the pods nearest their OOM, not to the first to answer), one at a
        time so each sees the slots the ones before it took: the policy
        decides again with them (it may now defer, and says why)."""
        assert run.found is not None and self.mem.settings is not None
        found, settings = run.found, self.mem.settings
        how = judging.Polling(
            port=found.spec.sampling.sidecar_port, timeout_s=found.spec.sampling.timeout_s, clock=self.ctx.clock,
            metrics=self.ctx.metrics, namespace=self.namespace, guard=self.name,
            slots=(self.ctx.namespace_slots.setdefault(self.namespace, asyncio.Semaphore(POLL_CONCURRENCY)),
                   self.ctx.pod_slots), pool=self.ctx.pod_pool, at_once=POLL_CONCURRENCY,
            expect_sidecar=found.spec.sidecar.inject)
        judged = await judging.poll_and_judge(found.guarded, self.mem.tracks, how, settings,
                                              lambda p: self.history_for(p, self.ctx.clock.now(), found.groups,
                                                                           found.by_name.get(p.cluster)))
        wanting = [j for j in judged if any(d.action is Action.ROTATE and not d.dry_run for d in j.decisions)]
        decided = NOTHING
        views: dict[str, st.PodView] = {}
        for j in [j for j in judged if j not in wanting]:
            decided += await self.act(found, j.pod, j.track, j.decisions)
            views[j.pod.name] = _view(j)
        for j in sorted(wanting, key=lambda w: urgency(w.track.last_decision)):
            decisions = judging.judge(settings, j.track, self.history_for(j.pod, self.ctx.clock.now(), found.groups,
                                                                      found.by_name.get(j.pod.cluster)),
                                      self.ctx.clock.now())
            decided += await self.act(found, j.pod, j.track, decisions)
            views[j.pod.name] = _view(Judged(j.pod, j.track, decisions))
        run.views = [views[k] for k in sorted(views)]
        for p in found.guarded:  # a user's ask the operator does not take: said once a pod
            if (value := p.ask_ignored) is not None and p.uid not in self.mem.remembered.ignored:
                self.mem.remembered.ignored.add(p.uid)
                decided += Decided((say(EventReason.ASK_IGNORED, (
                    f"{p.name}: {C.ANN_ROTATE}={value[:64]!r} is not a value MemoryGuard takes: set it to "
                    f"{' or '.join(pi.ROTATE_VALUES)} to ask for a rotation"), pod_ref(p.name, p.uid)),))
        self.mem.remembered.forget_pods_except([p.uid for p in found.pods])
        return decided + Decided((), {"rotations": self.mem.ledger.to_status(),
                                      "remembered": self.mem.remembered.to_status()})

    async def review_remediations(self, run: Run) -> Decided:
        """Each applied remediation not yet judged: its group's pods on either
        side of it, by their creep (reviews.py, efficacy.py); once judged, an
        Event, and an ineffective one undone when the guard asks for it (a
        revert the API refused for now is tried again next cycle)."""
        assert run.found is not None
        found, reviews, spec = run.found, self.mem.reviews, run.found.spec
        decided = NOTHING
        for (cluster, group, kind), o in list(reviews.open.items()):
            if not o.decided:
                limits = []
                for p in found.guarded:
                    track = self.mem.tracks.get(p.uid)
                    if p.cluster == cluster and p.group == group and track is not None:
                        o.observe(p.uid, p.remedy_env, efficacy.creep_bytes_per_h(track.window))
                        if track.window.limit_bytes:
                            limits.append(track.window.limit_bytes)
                review = o.judge(now=self.ctx.clock.now(), min_pods=spec.review.min_pods,
                                 noise_bytes_per_h=spec.policy.min_growth_fraction_per_h * min(limits or [0]),
                                 after_s=spec.review.after_s)
                decided += Decided((), {"remediations": reviews.to_status()})
                if review.verdict is Verdict.PENDING:
                    continue
                self.ctx.metrics.reviews.labels(self.namespace, self.name, kind, review.verdict.value).inc()
                decided += Decided((say(EventReason.REMEDIATION_INEFFECTIVE if review.verdict.ineffective
                                        else EventReason.REMEDIATION_EFFECTIVE,
                                        f"{kind} on group {group} of {cluster}: {review.message}",
                                        found.by_name.get(cluster) or {"metadata": {"name": cluster}}),))
            assert o.review is not None
            if o.review.verdict.ineffective and spec.review.revert_ineffective and not o.reverted \
                    and cluster in found.by_name:
                o.reverted, said, patched = await remediation.revert(
                    self.ctx.kube, namespace=self.namespace, rc=found.by_name[cluster], cluster=cluster,
                    group=group, kind=kind, env=o.env, why=o.review.message, allow_recreate=spec.allow_recreate)
                if patched is not None:  # the rest of the cycle patches from what the server now has
                    found.by_name[cluster] = patched
                decided += Decided(() if said is None else (said,), {"remediations": reviews.to_status()})
        return decided

    async def summarize(self, run: Run) -> Decided:
        """The status, computed once from what the cycle found and did."""
        assert run.found is not None and run.selected is not None
        self.ctx.metrics.publish(self.namespace, self.name, run.views, guarded=len(run.found.guarded))
        status = st.build(generation=run.generation, clusters=[c["metadata"]["name"] for c in run.selected.clusters],
                          pods=run.views, spec_error=None, missing_clusters=run.selected.missing,
                          contested=run.selected.contested, rotations=self.mem.ledger.to_status(),
                          last_action=None, now_iso=iso(run.now), previous=self.mem.status,
                          held=self.mem.status.get("templatesHeld") or {},
                          unknown_groups=clusters.unknown_groups(run.found.spec, run.selected.clusters))
        status["templates"] = st.templates(run.views)
        deg = next(c for c in status["conditions"] if c["type"] == "Degraded")
        self.ctx.metrics.degraded(self.namespace, self.name, deg["reason"] if deg["status"] == "True" else None)
        return Decided((), status)

    # -- acting on one pod's decisions ---------------------------------------------------
    async def act(self, found: Cycle, p: pi.PodInfo, track: PodState, decisions: list[Decision]) -> Decided:
        decided = NOTHING
        for d in decisions:
            if d.action is Action.ROTATE:
                decided += await self.rotate(found, p, d, track)
            elif d.action is Action.REMEDIATE:
                self.mem.remembered.advised.add((p.cluster, p.group))
                decided += await self.remediate(found, p, d, "jemalloc")
            if d.reason in STORE_REASONS and found.spec.spilling.mode != Mode.OFF:
                decided += await self.remediate(found, p, d, "spilling")
        return decided

    async def rotate(self, found: Cycle, p: pi.PodInfo, d: Decision, track: PodState) -> Decided:
        """Start a rotation (rotation.py) and the collection of its evidence;
        a dry run only says, once per pod, what it would rotate."""
        reason = f"{d.reason.value}: {d.message}"
        about = pod_ref(p.name, p.uid)
        if d.dry_run:
            if p.uid in self.mem.remembered.planned:
                return NOTHING
            self.mem.remembered.planned.add(p.uid)
            return Decided((say(EventReason.ROTATION_PLANNED, f"dry run: would rotate {p.name}: {reason}", about),))
        try:
            rot = await rotation.start(self.ctx.kube, p, guard=self.name, reason=reason, now=self.ctx.clock.now())
        except ApiError as e:
            log.warning("%s/%s: could not mark %s for rotation: %s", self.namespace, self.name, p.name, e)
            return NOTHING
        self.mem.ledger.inflight[p.uid] = rot
        if found.spec.forensics.enabled:
            self.start_evidence(found, p, d, track)
        return Decided((say(EventReason.ROTATION_STARTED, f"rotating {p.name} (group {p.group}): {reason}", about),),
                       {"rotations": self.mem.ledger.to_status()})

    def start_evidence(self, found: Cycle, p: pi.PodInfo, d: Decision, track: PodState) -> None:
        spec = found.spec
        subject = forensics.Subject(
            namespace=self.namespace, guard=self.name, guard_uid=found.guard_uid,
            pod=p.name, pod_uid=p.uid, cluster=p.cluster, group=p.group, ip=p.ip,
            sidecar_port=spec.sampling.sidecar_port, gcs_address=found.gcs_address(p.cluster), decision=d,
            last_sample=track.window.last)
        self.evidence.start(subject, kube=self.ctx.kube, budget_s=spec.forensics.timeout_s, keep_n=spec.forensics.keep,
                            with_ray=self.ctx.ray_forensics, probe_slots=self.ctx.probe_slots,
                            now=self.ctx.clock.now())

    async def remediate(self, found: Cycle, p: pi.PodInfo, d: Decision, kind: str) -> Decided:
        """Once per (cluster, group, kind): recommend or patch (remediation.py)."""
        key = (p.cluster, p.group, kind)
        rc = found.by_name.get(p.cluster)
        if rc is None or key in self.mem.remembered.remediated or p.is_head:
            return NOTHING
        done = await remediation.remediate(self.ctx.kube, namespace=self.namespace, spec=found.spec, rc=rc, pod=p,
                                           decision=d, kind=kind)
        if done.mode is not None:  # None: refused by the API, tried again next time
            self.mem.remembered.remediated.add(key)
        if done.rc is not None:  # the rest of the cycle patches from what the server now has
            found.by_name[p.cluster] = done.rc
        if done.mode:
            self.ctx.metrics.remediations.labels(self.namespace, self.name, kind, done.mode).inc()
        if done.env:  # applied: its review starts, the group's pods as they are the "before"
            tracks = self.mem.tracks
            self.mem.reviews.start(key, done.env, now=self.ctx.clock.now(), creeps=[
                (q.uid, efficacy.creep_bytes_per_h(tracks[q.uid].window)) for q in found.guarded
                if q.cluster == p.cluster and q.group == p.group and q.uid in tracks])
            return Decided(done.says, {"remembered": self.mem.remembered.to_status(),
                                       "remediations": self.mem.reviews.to_status()})
        return Decided(done.says, {"remembered": self.mem.remembered.to_status()})

    def history_for(self, p: pi.PodInfo, now: float, groups: Groups,
                    rc: Mapping[str, Any] | None = None) -> RotationHistory:
        """``rc``: the pod's RayCluster (its numOfHosts), where the caller has it."""
        ledger = self.mem.ledger
        in_group = ledger.rotating_in(p.cluster, p.group)
        group_starts = ledger.starts(group=(p.cluster, p.group))
        return RotationHistory(
            is_head=p.is_head,
            pod_rotation_in_flight=p.uid in ledger.inflight or bool(p.rotation_phase) or p.terminating,
            group_in_flight=in_group,
            group_short=groups.short(p.cluster, p.group, rotating=in_group, inflight=ledger.inflight),
            group_last_rotation_s=max(group_starts) if group_starts else None,
            guard_rotations_last_hour=ledger.rotations_last_hour(now),
            remediation_advised=(p.cluster, p.group) in self.mem.remembered.advised, user_requested=p.user_requested,
            hosts_per_replica=kuberayrules.hosts_per_replica(rc, p.group) if p.replica else 1)

    # -- the status ----------------------------------------------------------------------
    def status_without_pods(self, run: Run, *, spec_error: str | None = None,
                            refused: str | None = None) -> dict[str, Any]:
        """The status of a guard that guards nothing this cycle, saying why."""
        return st.build(generation=run.generation, clusters=[], pods=[], spec_error=spec_error, refused=refused,
                        missing_clusters=[], rotations=self.mem.ledger.to_status(), last_action=None,
                        now_iso=iso(run.now), previous=self.mem.status)

    async def write_status(self, status: Mapping[str, Any]) -> None:
        """Merge-patch the status, only when it changed; every key that left
        (a pod, a verdict no pod has any more) is nulled out: a merge patch
        keeps keys it is not told to remove."""
        last = self.mem.status
        merged = {**last, **status}
        if merged == last:
            return
        patch = {k: st.merge_patch(last.get(k), v) for k, v in status.items()}
        try:
            await self.ctx.kube.patch_guard_status(self.namespace, self.name, patch)
        except ApiError as e:
            log.warning("%s/%s: status not written: %s", self.namespace, self.name, e)
            return
        self.mem.status = json.loads(json.dumps(merged))

    async def close(self) -> None:
        """The guard is gone or the operator stops: no evidence is awaited,
        and its namespace's pod cache is let go (closed with its last guard)."""
        self.evidence.cancel()
        await self.ctx.pods.release(self.namespace, self.name)


def _view(j: Judged) -> st.PodView:
    t = j.track
    return st.PodView(j.pod.name, j.pod.group, j.decisions[0], t.error, t.blind, t.failure, j.pod.template,
                      efficacy.creep_bytes_per_h(t.window))
