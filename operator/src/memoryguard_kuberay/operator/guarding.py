"""One MemoryGuard's cycle: find its pods, poll their sidecars, ask the
policy, act within budgets, report. Called by the kopf daemon every
``sampling.intervalSeconds`` (operator clock).

Order of a cycle, each step idempotent (as KubeRay reconciles):
validate the spec -> find the RayClusters -> inject the sidecar and ensure
PodDisruptionBudgets (unless dry run) -> read their pods (from the
namespace's watch, podcache.py) -> resume rotations in
flight -> poll sidecars and feed the policy -> decide, rotate, remediate ->
write the status if it changed. What must survive a restart is on the
objects (pod annotations, the guard's status); ``GuardReconciler`` itself only
holds the policy windows, which the sidecars' ring buffers refill.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core.policy import Action, Decision, PodWindow, Reason, RotationHistory, decide, urgency
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.trust import Trust
from memoryguard_kuberay.operator import clusters, forensics, guardroster, remediation, rotation, sidecar_client
from memoryguard_kuberay.operator import podinfo as pi
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.clock import Clock, iso
from memoryguard_kuberay.operator.drain import Drainer
from memoryguard_kuberay.operator.eventqueue import EventPoster, PendingEvent, pod_ref
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.groups import Groups
from memoryguard_kuberay.operator.guardspec import DEFAULT_SIDECAR_IMAGE, GuardSpec, Mode, SpecError, read_guard_spec
from memoryguard_kuberay.operator.kube import ApiError, Kube
from memoryguard_kuberay.operator.ledger import Ledger, OutcomeKind, Phase
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.podcache import PodCaches
from memoryguard_kuberay.operator.remembered import Remembered

log = logging.getLogger("memoryguard_kuberay.operator")
STORE_REASONS = frozenset({Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL})
POLL_CONCURRENCY = 64  # one namespace's polls at once (every guard there together)
POD_CONNECTIONS = 256  # every guard's polls at once
POD_WAIT_S = 10.0  # a guard's first cycle waits this long for its namespace's pods to be listed
MIN_PAUSE_S = 0.5  # operator clock: the least pause between two cycles of one guard


@dataclasses.dataclass
class OperatorContext:
    """What every guard's loop uses, made once at startup."""

    kube: Kube
    events: EventPoster
    drainer: Drainer
    clock: Clock
    metrics: OperatorMetrics
    pods: PodCaches  # every guard's pods, from one watch per namespace
    sidecar_image: str = DEFAULT_SIDECAR_IMAGE
    trust: Trust | None = None  # the installer's limits on guards (trust.py)
    ray_forensics: bool = True  # Ray's GCS is reachable (MEMORYGUARD_DRAIN): list objects by call site
    # Connections to pods at once, across every guard: each is a descriptor.
    pod_slots: asyncio.Semaphore = dataclasses.field(default_factory=lambda: asyncio.Semaphore(POD_CONNECTIONS))
    # And per namespace (a tenant): pods that hang, however many guards poll
    # them, hold at most POLL_CONCURRENCY of the POD_CONNECTIONS.
    namespace_slots: dict[str, asyncio.Semaphore] = dataclasses.field(default_factory=dict)
    roster: guardroster.GuardRoster | None = None  # every namespace's guards, listed once for all its guards
    probe_slots: asyncio.Semaphore = dataclasses.field(
        default_factory=lambda: asyncio.Semaphore(forensics.MAX_PROBES))  # rayprobe processes at once

    def guard_roster(self) -> guardroster.GuardRoster:
        if self.roster is None:
            self.roster = guardroster.GuardRoster(self.kube)
        return self.roster


@dataclasses.dataclass
class PodState:
    window: PodWindow
    group: str
    error: str | None = None
    failure: sidecar_client.PollFailure | None = None  # why the last poll brought no samples
    last_decision: Decision | None = None
    blind: bool = False  # the sidecar answers but reads no memory


@dataclasses.dataclass(frozen=True)
class Cycle:
    """What one cycle found, passed as a value to the steps after it; the
    loop keeps none of it."""

    spec: GuardSpec
    selected: clusters.Selected
    pods: list[pi.PodInfo]  # every pod of the selected clusters
    guarded: list[pi.PodInfo]  # those this guard judges
    groups: Groups

    @functools.cached_property
    def by_name(self) -> dict[str, Mapping[str, Any]]:
        """The selected RayClusters by name (looked up once per pod)."""
        return {c["metadata"]["name"]: c for c in self.selected.clusters}

    def gcs_address(self, cluster: str) -> str | None:
        """Its head's GCS, found when asked: it scans the pods, so only for
        the clusters a rotation or a forensic probe is in."""
        rc = self.by_name.get(cluster)
        return clusters.gcs_address(rc, self.pods) if rc is not None else None


class GuardReconciler:
    def __init__(self, ctx: OperatorContext, namespace: str, name: str) -> None:
        self.ctx = ctx
        self.namespace, self.name = namespace, name
        self.tracks: dict[str, PodState] = {}
        self.settings: PolicySettings | None = None
        self.ledger: Ledger | None = None  # the rotations, loaded from status on the first cycle
        # What it has said and done besides rotations, loaded from status on the first cycle.
        self.remembered: Remembered | None = None
        self.invalid_generation: int | None = None
        self.last_status: dict[str, Any] | None = None
        # Evidence being collected before a rotation drains: pod uid -> (task,
        # monotonic deadline). The rotation waits for it until the deadline.
        self.collecting: dict[str, tuple[asyncio.Task[None], float]] = {}
        self.forensics_latest: dict[str, Any] | None = None
        self.last_action: str | None = None
        self.last_action_brief: str | None = None  # the printer column's text: reason and object, <= 60 chars
        self.body: Mapping[str, Any] = {}  # the guard itself: the subject of its Events (the latest seen)

    # -- reporting --------------------------------------------------------------
    async def event(self, reason: EventReason, message: str, *, also: Sequence[Mapping[str, Any]] = ()) -> None:
        """Report on the guard and on the objects acted on (``also``: the
        pod a rotation is about, the RayCluster a patch changed), so that
        ``kubectl describe`` of either says what MemoryGuard did to it. The
        Events are queued, never awaited."""
        self.last_action = f"{reason.value}: {message}"[:256]
        subject = next((str((o.get("metadata") or {}).get("name", "")) for o in also), "")
        self.last_action_brief = f"{reason.value} {subject}".strip()[:st.BRIEF_MAX]
        log.info("%s/%s %s: %s", self.namespace, self.name, reason.value, message)
        for involved in (self.body, *also):
            self.ctx.events.post(PendingEvent(namespace=self.namespace, involved=involved, reason=reason.value,
                                            message=message, warning=reason.warning))

    # -- the cycle ----------------------------------------------------------------
    async def unmark_pods(self) -> None:
        """Take this guard's rotation marks off every pod that has them (the
        guard is going: nothing may be left half-rotated by it)."""
        for p in await self.ctx.kube.list_pods(self.namespace, f"{pi.LABEL_IS_RAY_NODE}=yes"):
            info = pi.pod_info(p)
            if info.annotations.get(pi.ANN_GUARD) == self.name and not info.terminating:
                await self.ctx.kube.patch_pod_annotations(self.namespace, info.name,
                                                        dict.fromkeys(pi.ROTATION_ANNOTATIONS))

    async def cycle(self, body: Mapping[str, Any], *, stopped: Callable[[], bool] = lambda: False) -> float:
        """One pass; returns the delay until the next (operator clock).
        ``stopped`` is asked between steps: a guard being deleted starts no
        new step (its finalizer then cleans up)."""
        t0 = time.monotonic()
        self.body = body  # the guard's object, for the Events it is the subject of
        now = self.ctx.clock.now()
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        previous = body.get("status") or {}
        if self.last_status is None:
            self.last_status = json.loads(json.dumps(previous))
        try:
            spec = read_guard_spec(body.get("spec"), sidecar_image=self.ctx.sidecar_image, trust=self.ctx.trust)
        except SpecError as e:
            if self.invalid_generation != generation:
                self.invalid_generation = generation
                await self.event(EventReason.INVALID_SPEC, "; ".join(e.problems))
            await self.write_status(st.build(generation=generation, clusters=[], pods=[], spec_error=str(e),
                                             missing_clusters=[], rotations=self.rotations_status(),
                                             last_action=self.last_action, last_action_brief=self.last_action_brief,
                                             now_iso=iso(now), previous=previous))
            self.ctx.metrics.degraded(self.namespace, self.name, "InvalidSpec")
            return 30.0
        self.invalid_generation = None
        if self.settings != spec.policy:
            # New thresholds, new windows: the sidecars' buffers refill them.
            self.tracks.clear()
            self.settings = spec.policy
        if self.ledger is None:
            self.ledger = Ledger.from_status(previous)
        if self.remembered is None:
            self.remembered = Remembered.from_status(previous)
        try:
            roster = self.ctx.guard_roster()
            guards = await roster.guards(self.namespace)
            refused = guardroster.refusal(guards, body, roster.limit)
            if refused:
                await self.write_status(st.build(generation=generation, clusters=[], pods=[], spec_error=None,
                                                 refused=refused, missing_clusters=[],
                                                 rotations=self.rotations_status(), last_action=self.last_action,
                                                 last_action_brief=self.last_action_brief, now_iso=iso(now),
                                                 previous=previous))
                self.ctx.metrics.degraded(self.namespace, self.name, "TooManyGuards")
                return 60.0
            selected = await clusters.select(self.ctx.kube, namespace=self.namespace, guard=body, spec=spec,
                                             guards=guards, trust=self.ctx.trust)
            if not spec.policy.dry_run and not stopped():
                await clusters.set_up(self.ctx.kube, namespace=self.namespace, guard=body, spec=spec,
                                      clusters=selected.clusters, report=self.event)
            all_pods = await self.ctx.pods.pods(self.namespace, self.name,
                                                [c["metadata"]["name"] for c in selected.clusters], wait_s=POD_WAIT_S)
        except ApiError as e:
            log.warning("%s/%s: API error, retrying next cycle: %s", self.namespace, self.name, e)
            return spec.sampling.interval_s
        if stopped():
            return 0.0
        cycle = Cycle(spec, selected, all_pods, [p for p in all_pods if clusters.is_guarded(spec, p)],
                      Groups.of(selected.clusters, all_pods))
        self.ledger.adopt(all_pods, guard=self.name, max_unavailable=spec.policy.max_unavailable,
                          now=self.ctx.clock.now())
        await self.advance_rotations(cycle)
        if stopped():
            return 0.0
        views = await self.poll_and_decide(cycle)
        # The status, computed once from what the cycle found and did.
        self.ctx.metrics.publish(self.namespace, self.name, views, guarded=len(cycle.guarded))
        status = st.build(generation=generation, clusters=[c["metadata"]["name"] for c in selected.clusters],
                          pods=views, spec_error=None, missing_clusters=selected.missing,
                          contested=selected.contested, rotations=self.rotations_status(),
                          last_action=self.last_action, last_action_brief=self.last_action_brief, now_iso=iso(now),
                          previous=previous)
        if self.forensics_latest is not None:
            status["forensics"] = self.forensics_latest
        self.memory.forget_pods_except([p.uid for p in all_pods])
        status["remembered"] = self.memory.to_status()
        await self.write_status(status)
        deg = next(c for c in status["conditions"] if c["type"] == "Degraded")
        self.ctx.metrics.degraded(self.namespace, self.name, deg["reason"] if deg["status"] == "True" else None)
        took = time.monotonic() - t0
        self.ctx.metrics.cycle_seconds.labels(self.namespace, self.name).observe(took)
        # Cycles start every interval, not an interval after the last one
        # ended: a long cycle (thousands of pods) must not stretch the time
        # between two polls of a pod. A cycle longer than the interval is
        # followed by the next at once (after a breath for the event loop).
        return max(MIN_PAUSE_S, spec.sampling.interval_s - took * self.ctx.clock.scale)

    # -- rotations -------------------------------------------------------------------
    def rotations_status(self) -> dict[str, Any]:
        return (self.ledger or Ledger()).to_status()

    @property
    def memory(self) -> Remembered:
        if self.remembered is None:
            self.remembered = Remembered()
        return self.remembered

    async def advance_rotations(self, cycle: Cycle) -> None:
        assert self.ledger is not None
        spec, pods = cycle.spec, cycle.pods
        changed = False
        ended: list[tuple[EventReason, str, dict[str, Any]]] = []
        for uid, rot in list(self.ledger.inflight.items()):
            if rot.phase is Phase.DRAINING and self.collecting_for(uid):
                continue  # its evidence first (never past the forensics deadline)
            before = (rot.phase, rot.refused)
            pod = pod_ref(rot.pod, rot.uid)

            async def report(reason: EventReason, message: str, pod: dict[str, Any] = pod) -> None:
                await self.event(reason, message, also=[pod])

            try:
                out = await rotation.advance(
                    rot, kube=self.ctx.kube, drainer=self.ctx.drainer, pods=pods,
                    gcs_address=cycle.gcs_address(rot.cluster),
                    drain_timeout_s=spec.policy.drain_timeout_s, replacement_timeout_s=spec.replacement_timeout_s,
                    eviction_timeout_s=spec.eviction_timeout_s, now=self.ctx.clock.now(), report=report)
            except ApiError as e:
                # The step is repeated next cycle (each is idempotent); the
                # other rotations go on.
                log.warning("%s/%s: rotation of %s stays %s for now: %s", self.namespace, self.name, rot.pod,
                            rot.phase, e)
                continue
            if out.message and not out.ended:
                log.warning("%s/%s: %s", self.namespace, self.name, out.message)
                self.ctx.metrics.evictions_refused.labels(self.namespace, self.name).inc()
            if rot.refused > before[1] and not out.message:
                self.ctx.metrics.evictions_refused.labels(self.namespace, self.name).inc()
            if out.ended:
                self.ledger.end(uid, out, now=self.ctx.clock.now())
                self.ctx.metrics.rotations.labels(self.namespace, self.name, rot.reason.split(":", 1)[0],
                                                out.kind.value).inc()
                if out.eviction_timed_out:
                    self.ctx.metrics.eviction_timeouts.labels(self.namespace, self.name).inc()
                rotated = out.kind is OutcomeKind.ROTATED
                ended.append((EventReason.ROTATED if rotated else EventReason.ROTATION_FAILED, out.message, pod))
                changed = True
            elif (rot.phase, rot.refused) != before:
                changed = True
        if changed:
            # Persist at once: after an eviction the pod (and its annotations) are gone.
            await self.write_status({"rotations": self.rotations_status()})
        # The Events go after the status, as a rotation's start does: whoever
        # sees WorkerRotated finds it counted, and the durable record (which a
        # restarted operator resumes from) never lags the announcement.
        for reason, message, involved in ended:
            await self.event(reason, message, also=[involved])

    def history_for(self, p: pi.PodInfo, now: float, groups: Groups) -> RotationHistory:
        assert self.ledger is not None
        in_group = self.ledger.rotating_in(p.cluster, p.group)
        group_starts = self.ledger.starts(group=(p.cluster, p.group))
        return RotationHistory(
            is_head=p.is_head,
            pod_rotation_in_flight=p.uid in self.ledger.inflight or bool(p.rotation_phase) or p.terminating,
            group_in_flight=in_group,
            group_short=groups.short(p.cluster, p.group, rotating=in_group, inflight=self.ledger.inflight),
            group_last_rotation_s=max(group_starts) if group_starts else None,
            guard_rotations_last_hour=self.ledger.rotations_last_hour(now),
            remediation_advised=(p.cluster, p.group) in self.memory.advised, user_requested=p.user_requested)

    # -- sampling and deciding -------------------------------------------------------
    async def poll_and_decide(self, cycle: Cycle) -> list[st.PodView]:
        """Poll every pod's sidecar concurrently and decide on each as soon as
        its samples are in, so a fresh sample waits for no other pod. Pods
        that want a rotation are rotated once every pod has been heard, most
        urgent first: a group's slots go to the pods nearest their OOM, not
        to the first to answer."""
        assert self.settings is not None and self.ledger is not None
        settings, spec, pods = self.settings, cycle.spec, cycle.guarded
        live = {p.uid for p in pods}
        for uid in list(self.tracks):
            if uid not in live:
                del self.tracks[uid]
        sem = self.ctx.namespace_slots.setdefault(self.namespace, asyncio.Semaphore(POLL_CONCURRENCY))
        wanting: list[tuple[pi.PodInfo, PodState]] = []
        views: dict[str, st.PodView] = {}

        async def one(p: pi.PodInfo) -> None:
            track = self.tracks.get(p.uid)
            if track is None:
                track = self.tracks[p.uid] = PodState(PodWindow(settings), p.group)
            if not p.ip or p.phase != "Running":
                track.error = f"pod is {p.phase or 'pending'} without an IP" if not p.ip else None
                track.failure = sidecar_client.PollFailure.UNREACHABLE if not p.ip else None
            else:
                since = track.window.last.time_s if track.window.last else None
                async with sem, self.ctx.pod_slots:
                    # Nothing older than the policy's window is asked for or kept.
                    res = await sidecar_client.poll(
                        p.ip, spec.sampling.sidecar_port, since, timeout_s=spec.sampling.timeout_s,
                        now=self.ctx.clock.now, pod_uid=p.uid, require_uid=p.injected_sidecar,
                        oldest_s=self.ctx.clock.now() - settings.trend_window_s)
                self.ctx.metrics.poll_seconds.labels(self.namespace, self.name).observe(res.latency_s)
                if res.error and not res.samples:
                    why = (res.failure or sidecar_client.PollFailure.BAD_ANSWER).value
                    self.ctx.metrics.poll_errors.labels(self.namespace, self.name, why).inc()
                track.error = res.error if not res.samples else None
                track.failure = res.failure if not res.samples else None
                if res.samples or res.blind:
                    track.blind = res.blind or all(s.memory_current_bytes is None for s in res.samples)
                for sample in res.samples:
                    track.window.add(sample)
            views[p.name] = await self.decide_one(cycle, p, track, wanting)

        async def isolated(p: pi.PodInfo) -> None:
            # A pod's failure is that pod's verdict: nothing one pod sends or
            # holds may stop the cycle of the others (issue 23).
            try:
                await one(p)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("%s/%s: pod %s: unexpected %s; its verdict is BadAnswer this cycle", self.namespace,
                          self.name, p.name, type(exc).__name__, exc_info=True)
                track = self.tracks.get(p.uid)
                if track is not None:
                    track.error = f"this pod's samples could not be judged ({type(exc).__name__})"
                    track.failure = sidecar_client.PollFailure.BAD_ANSWER

        await asyncio.gather(*(isolated(p) for p in pods))
        # One at a time, so each sees the slots the ones before it took; the
        # policy decides again with them (it may now defer, and says why).
        for p, track in sorted(wanting, key=lambda w: urgency(w[1].last_decision)):
            views[p.name] = await self.decide_one(cycle, p, track, None)
        return [views[k] for k in sorted(views)]

    async def decide_one(self, cycle: Cycle, p: pi.PodInfo, track: PodState,
                         wanting: list[tuple[pi.PodInfo, PodState]] | None) -> st.PodView:
        """Decide on one pod and act, except that a rotation is only noted in
        ``wanting`` when given (to be started in order of urgency)."""
        assert self.settings is not None
        now = self.ctx.clock.now()
        t0 = time.perf_counter()
        decisions = decide(settings=self.settings, window=track.window, history=self.history_for(p, now, cycle.groups),
                           now_s=now)
        track.last_decision = decisions[0]
        if wanting is not None:
            self.ctx.metrics.decision_seconds.labels(self.namespace, self.name).observe(time.perf_counter() - t0)
            if track.window.last is not None:
                self.ctx.metrics.sample_to_decision.labels(self.namespace, self.name).observe(
                    max(0.0, self.ctx.clock.real_seconds(now - track.window.last.time_s)))
            if any(d.action is Action.ROTATE and not d.dry_run for d in decisions):
                wanting.append((p, track))
                return st.PodView(p.name, p.group, decisions[0], track.error, track.blind, track.failure)
        spec = cycle.spec
        rc = cycle.by_name.get(p.cluster)
        for d in decisions:
            if d.action is Action.ROTATE:
                await self.rotate(spec, p, d, cycle=cycle, track=track)
            elif d.action is Action.REMEDIATE:
                self.memory.advised.add((p.cluster, p.group))
                await self.remediate(spec, rc, p, d, "jemalloc")
            if d.reason in STORE_REASONS and spec.spilling.mode != Mode.OFF:
                await self.remediate(spec, rc, p, d, "spilling")
        return st.PodView(p.name, p.group, decisions[0], track.error, track.blind, track.failure)

    async def rotate(self, spec: GuardSpec, p: pi.PodInfo, d: Decision, *, cycle: Cycle, track: PodState) -> None:
        assert self.ledger is not None
        reason = f"{d.reason.value}: {d.message}"
        if d.dry_run:
            if p.uid not in self.memory.planned:
                self.memory.planned.add(p.uid)
                await self.event(EventReason.ROTATION_PLANNED, f"dry run: would rotate {p.name}: {reason}",
                                 also=[pod_ref(p.name, p.uid)])
            return
        try:
            rot = await rotation.start(self.ctx.kube, p, guard=self.name, reason=reason, now=self.ctx.clock.now())
        except ApiError as e:
            log.warning("%s/%s: could not mark %s for rotation: %s", self.namespace, self.name, p.name, e)
            return
        self.ledger.inflight[p.uid] = rot
        await self.write_status({"rotations": self.rotations_status()})
        await self.event(EventReason.ROTATION_STARTED, f"rotating {p.name} (group {p.group}): {reason}",
                         also=[pod_ref(p.name, p.uid)])
        if spec.forensics.enabled:
            self.start_forensics(spec, cycle, p, d, track)

    # -- evidence ----------------------------------------------------------------------
    def collecting_for(self, uid: str) -> bool:
        """Evidence for this pod is still coming in, within its deadline."""
        job = self.collecting.get(uid)
        if job is None:
            return False
        if job[0].done() or time.monotonic() > job[1]:
            del self.collecting[uid]
            return False
        return True

    def start_forensics(self, spec: GuardSpec, cycle: Cycle, p: pi.PodInfo, d: Decision, track: PodState) -> None:
        rc = cycle.by_name.get(p.cluster)
        subject = forensics.Subject(
            namespace=self.namespace, guard=self.name, guard_uid=str(self.body.get("metadata", {}).get("uid", "")),
            pod=p.name, pod_uid=p.uid, cluster=p.cluster, group=p.group, ip=p.ip,
            sidecar_port=spec.sampling.sidecar_port,
            gcs_address=cycle.gcs_address(p.cluster), decision=d,
            last_sample=track.window.last)
        # Finished collections leave: the map holds only those under way.
        self.collecting = {uid: job for uid, job in self.collecting.items() if not job[0].done()}
        task = asyncio.create_task(self.keep_forensics(subject, spec, rc, p, d), name=f"forensics-{p.name}")
        # A second past the budget: the artifact is being written by then.
        self.collecting[p.uid] = (task, time.monotonic() + spec.forensics.timeout_s + 2.0)

    async def keep_forensics(self, subject: forensics.Subject, spec: GuardSpec, rc: Mapping[str, Any] | None,
                             p: pi.PodInfo, d: Decision) -> None:
        artifact = await forensics.collect(subject, budget_s=spec.forensics.timeout_s,
                                           with_ray=self.ctx.ray_forensics, probe_slots=self.ctx.probe_slots)
        pod = pod_ref(p.name, p.uid)
        try:
            name = await forensics.keep(self.ctx.kube, artifact, subject, keep_n=spec.forensics.keep,
                                        now=self.ctx.clock.now())
        except ApiError as e:
            await self.event(EventReason.FORENSICS_FAILED, f"{p.name}: the evidence could not be kept: {e}",
                             also=[pod])
            return
        size = forensics.size_of(artifact)
        skipped = "; ".join(f"{k} skipped: {v}" for k, v in artifact["skipped"].items())
        await self.event(EventReason.FORENSICS_KEPT, f"{p.name}: evidence kept in ConfigMap {name} "
                         f"({size / 1024:.0f} KiB, collected in {artifact['tookSeconds']:.1f} s)"
                         + (f"; {skipped}" if skipped else ""), also=[pod])
        self.forensics_latest = {"latest": name, "pod": p.name, "collectedAt": artifact["collectedAt"],
                                 "bytes": size}
        await self.write_status({"forensics": self.forensics_latest})
        objects = artifact.get("rayObjects") or {}
        sites = [c.get("callSite", "") for c in objects.get("callSites") or []]
        if sites and all(s.startswith("(not recorded") for s in sites) and spec.forensics.call_sites != Mode.OFF:
            await self.remediate(spec, rc, p, d, "callsites")

    async def close(self) -> None:
        """The guard is gone or the operator stops: no evidence is awaited,
        and its namespace's pod cache is let go (closed with its last guard)."""
        for task, _ in self.collecting.values():
            task.cancel()
        self.collecting.clear()
        await self.ctx.pods.release(self.namespace, self.name)

    async def remediate(self, spec: GuardSpec, rc: Mapping[str, Any] | None, p: pi.PodInfo, d: Decision,
                        kind: str) -> None:
        """Once per (cluster, group, kind): recommend or patch (remediation.py)."""
        key = (p.cluster, p.group, kind)
        if rc is None or key in self.memory.remediated or p.is_head:
            return
        self.memory.remediated.add(key)
        done = await remediation.remediate(self.ctx.kube, namespace=self.namespace, spec=spec, rc=rc, pod=p,
                                           decision=d, kind=kind, report=self.event)
        if done is None:
            self.memory.remediated.discard(key)  # refused by the API: try again next time
        elif done:
            self.ctx.metrics.remediations.labels(self.namespace, self.name, kind, done).inc()

    # -- reporting ---------------------------------------------------------------------
    async def write_status(self, status: Mapping[str, Any]) -> None:
        """Merge-patch the status, only when it changed; every key that left
        (a pod, a verdict no pod has any more) is nulled out: a merge patch
        keeps keys it is not told to remove."""
        merged = {**(self.last_status or {}), **status}
        if merged == self.last_status:
            return
        patch = {k: st.merge_patch((self.last_status or {}).get(k), v) for k, v in status.items()}
        try:
            await self.ctx.kube.patch_guard_status(self.namespace, self.name, patch)
        except ApiError as e:
            log.warning("%s/%s: status not written: %s", self.namespace, self.name, e)
            return
        self.last_status = json.loads(json.dumps(merged))
