"""One MemoryGuard's cycle: find its pods, poll their sidecars, ask the
policy, act within budgets, report. Called by the kopf daemon every
``sampling.intervalSeconds`` (operator clock).

Order of a cycle, each step idempotent (as KubeRay reconciles):
validate the spec -> find the RayClusters -> inject the sidecar and ensure
PodDisruptionBudgets (unless dry run) -> list the pods -> resume rotations in
flight -> poll sidecars and feed the policy -> decide, rotate, remediate ->
write the status if it changed. What must survive a restart is on the
objects (pod annotations, the guard's status); ``GuardLoop`` itself only
holds the policy windows, which the sidecars' ring buffers refill.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from memoryguard_kuberay.core.policy import Action, Decision, PodWindow, Reason, RotationHistory, decide, urgency
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.operator import budgets, patches, rotation, sidecar_client
from memoryguard_kuberay.operator import podinfo as pi
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.clock import Clock
from memoryguard_kuberay.operator.drain import Drainer
from memoryguard_kuberay.operator.eventqueue import EventPoster, PendingEvent, pod_ref
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import DEFAULT_SIDECAR_IMAGE, GuardSpec, Mode, SpecError, read_guard_spec
from memoryguard_kuberay.operator.kube import ApiError, Kube
from memoryguard_kuberay.operator.ledger import Ledger, OutcomeKind
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.trust import Trust

log = logging.getLogger("memoryguard_kuberay.operator")
STORE_REASONS = frozenset({Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL})
POLL_CONCURRENCY = 64


@dataclasses.dataclass
class Shared:
    """What every guard's loop uses, made once at startup."""

    kube: Kube
    events: EventPoster
    drainer: Drainer
    http: aiohttp.ClientSession
    clock: Clock
    metrics: OperatorMetrics
    sidecar_image: str = DEFAULT_SIDECAR_IMAGE
    trust: Trust | None = None  # the installer's limits on guards (trust.py)


@dataclasses.dataclass
class PodTrack:
    window: PodWindow
    group: str
    error: str | None = None
    last_decision: Decision | None = None
    blind: bool = False  # the sidecar answers but reads no memory


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def desired_replicas(rc: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(cluster, group) -> how many pods KubeRay keeps: 1 head, and per
    worker group ``replicas`` held within ``[minReplicas, maxReplicas]``
    times ``numOfHosts``, 0 when the group is suspended (KubeRay's
    ``GetWorkerGroupDesiredReplicas``)."""
    name = str((rc.get("metadata") or {}).get("name", ""))
    raw_spec = rc.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    raw_groups = spec.get("workerGroupSpecs")
    groups: list[Any] = raw_groups if isinstance(raw_groups, list) else []
    out = {(name, pi.HEAD_GROUP): 1}
    for g in groups:
        if not isinstance(g, Mapping) or not isinstance(g.get("groupName"), str):
            continue
        try:
            lo = int(g.get("minReplicas") or 0)
            hi = int(g["maxReplicas"]) if g.get("maxReplicas") is not None else 2**31 - 1
            replicas = lo if g.get("replicas") is None else int(g["replicas"])
            replicas = hi if lo > hi else min(max(replicas, lo), hi)
            n = 0 if g.get("suspend") is True else replicas * max(1, int(g.get("numOfHosts", 1) or 1))
        except (TypeError, ValueError):
            continue
        out[(name, g["groupName"])] = max(0, n)
    return out


class GuardLoop:
    def __init__(self, shared: Shared, namespace: str, name: str) -> None:
        self.s = shared
        self.namespace, self.name = namespace, name
        self.tracks: dict[str, PodTrack] = {}
        self.settings: PolicySettings | None = None
        self.ledger: Ledger | None = None  # the rotations, loaded from status on the first cycle
        self.planned: set[str] = set()  # dry run: pods already reported
        self.remediated: set[tuple[str, str, str]] = set()  # (cluster, group, kind) patched or recommended
        # (cluster, group) whose plateau the policy already advised on: it says
        # so once per group, as simulate says it once per trace.
        self.advised: set[tuple[str, str]] = set()
        self.invalid_generation: int | None = None
        self.last_status: dict[str, Any] | None = None
        self.last_action: str | None = None
        self.last_action_brief: str | None = None  # the printer column's text: reason and object, <= 60 chars
        self.body: Mapping[str, Any] = {}
        self.contested: dict[str, str] = {}  # RayCluster -> the older guard that has it
        # (cluster, group) -> uids of its pods that were ready, running and
        # unmarked when this cycle listed them (group_short counts them).
        self.available: dict[tuple[str, str], list[str]] = {}
        self.desired: dict[tuple[str, str], int] = {}  # (cluster, group) -> pods KubeRay keeps

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
            self.s.events.post(PendingEvent(namespace=self.namespace, involved=involved, reason=reason.value,
                                            message=message, warning=reason.warning))

    # -- the cycle ----------------------------------------------------------------
    async def unmark_pods(self) -> None:
        """Take this guard's rotation marks off every pod that has them (the
        guard is going: nothing may be left half-rotated by it)."""
        for p in await self.s.kube.list_pods(self.namespace, f"{pi.LABEL_IS_RAY_NODE}=yes"):
            info = pi.pod_info(p)
            if info.annotations.get(pi.ANN_GUARD) == self.name and not info.terminating:
                await self.s.kube.patch_pod_annotations(self.namespace, info.name,
                                                        dict.fromkeys(pi.ROTATION_ANNOTATIONS))

    async def cycle(self, body: Mapping[str, Any], *, stopped: Callable[[], bool] = lambda: False) -> float:
        """One pass; returns the delay until the next (operator clock).
        ``stopped`` is asked between steps: a guard being deleted starts no
        new step (its finalizer then cleans up)."""
        t0 = time.monotonic()
        self.body = body
        now = self.s.clock.now()
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        previous = body.get("status") or {}
        if self.last_status is None:
            self.last_status = json.loads(json.dumps(previous))
        try:
            spec = read_guard_spec(body.get("spec"), sidecar_image=self.s.sidecar_image, trust=self.s.trust)
        except SpecError as e:
            if self.invalid_generation != generation:
                self.invalid_generation = generation
                await self.event(EventReason.INVALID_SPEC, "; ".join(e.problems))
            await self.write_status(st.build(generation=generation, clusters=[], pods=[], spec_error=str(e),
                                             missing_clusters=[], rotations=self.rotations_status(),
                                             last_action=self.last_action, last_action_brief=self.last_action_brief,
                                             now_iso=iso(now), previous=previous))
            self.s.metrics.degraded(self.namespace, self.name, "InvalidSpec")
            return 30.0
        self.invalid_generation = None
        if self.settings != spec.policy:
            # New thresholds, new windows: the sidecars' buffers refill them.
            self.tracks.clear()
            self.settings = spec.policy
        if self.ledger is None:
            self.ledger = Ledger.from_status(previous)
        try:
            clusters, missing = await self.find_clusters(spec)
            if not spec.policy.dry_run and not stopped():
                await self.reconcile_clusters(spec, clusters)
            all_pods = await self.list_pods(clusters)
        except ApiError as e:
            log.warning("%s/%s: API error, retrying next cycle: %s", self.namespace, self.name, e)
            return spec.sampling.interval_s
        if stopped():
            return 0.0
        guarded = [p for p in all_pods if self.is_guarded(spec, p)]
        self.available = {}
        for q in all_pods:
            if q.ready and q.phase == "Running" and not q.terminating and not q.rotation_phase:
                self.available.setdefault((q.cluster, q.group), []).append(q.uid)
        self.desired = {key: n for c in clusters for key, n in desired_replicas(c).items()}
        self.ledger.adopt(all_pods, guard=self.name, max_unavailable=spec.policy.max_unavailable,
                          now=self.s.clock.now())
        gcs = {c["metadata"]["name"]: self.gcs_address(c, all_pods) for c in clusters}
        await self.advance_rotations(spec, all_pods, gcs)
        if stopped():
            return 0.0
        views = await self.poll_and_decide(spec, guarded, clusters)
        self.publish_metrics(views, guarded)
        status = st.build(generation=generation, clusters=[c["metadata"]["name"] for c in clusters], pods=views,
                          spec_error=None, missing_clusters=missing, contested=self.contested,
                          rotations=self.rotations_status(), last_action=self.last_action,
                          last_action_brief=self.last_action_brief, now_iso=iso(now), previous=previous)
        await self.write_status(status)
        deg = next(c for c in status["conditions"] if c["type"] == "Degraded")
        self.s.metrics.degraded(self.namespace, self.name, deg["reason"] if deg["status"] == "True" else None)
        self.s.metrics.cycle_seconds.labels(self.namespace, self.name).observe(time.monotonic() - t0)
        return spec.sampling.interval_s

    # -- clusters and pods --------------------------------------------------------
    async def find_clusters(self, spec: GuardSpec) -> tuple[list[dict[str, Any]], list[str]]:
        """The RayClusters this guard selects and may act on, and the named
        ones that do not exist. A cluster an older guard also selects is left
        to that guard (``self.contested``): two guards never rotate one
        cluster's pods with two sets of budgets."""
        found: dict[str, dict[str, Any]] = {}
        missing = []
        for name in spec.selection.cluster_names:
            try:
                found[name] = await self.s.kube.get_raycluster(self.namespace, name)
            except ApiError as e:
                if e.status != 404:
                    raise
                missing.append(name)
        if spec.selection.cluster_labels:
            sel = ",".join(f"{k}={v}" for k, v in sorted(spec.selection.cluster_labels.items()))
            for rc in await self.s.kube.list_rayclusters(self.namespace, sel):
                found[rc["metadata"]["name"]] = rc
        self.contested = {}
        if found:
            for other in await self.s.kube.list_guards(self.namespace):
                if not self.older(other):
                    continue
                try:
                    sel_other = read_guard_spec(other.get("spec")).selection
                except SpecError:
                    continue  # an invalid guard guards nothing
                for name, rc in list(found.items()):
                    labels = (rc.get("metadata") or {}).get("labels") or {}
                    if name in sel_other.cluster_names or (sel_other.cluster_labels and all(
                            labels.get(k) == v for k, v in sel_other.cluster_labels.items())):
                        self.contested[name] = other["metadata"]["name"]
                        del found[name]
        return [found[k] for k in sorted(found)], missing

    def older(self, other: Mapping[str, Any]) -> bool:
        """Whether ``other`` is another live guard created before this one
        (ties broken by name): the older guard keeps a contested cluster."""
        mine, theirs = self.body.get("metadata") or {}, other.get("metadata") or {}
        if theirs.get("uid") == mine.get("uid") or theirs.get("deletionTimestamp"):
            return False
        return (str(theirs.get("creationTimestamp", "")), str(theirs.get("name", ""))) < (
            str(mine.get("creationTimestamp", "")), str(mine.get("name", "")))

    async def reconcile_clusters(self, spec: GuardSpec, clusters: Sequence[dict[str, Any]]) -> None:
        for rc in clusters:
            name = rc["metadata"]["name"]
            if spec.sidecar.inject:
                ops = patches.inject_patch(rc, spec.sidecar, groups=spec.selection.worker_groups)
                if ops:
                    try:
                        await self.s.kube.json_patch_raycluster(self.namespace, name, ops)
                        await self.event(EventReason.SIDECAR_INJECTED,
                                         f"sidecar added to the pod templates of RayCluster {name}; pods get it as "
                                         "KubeRay creates them", also=[rc])
                    except ApiError as e:
                        await self.event(EventReason.SIDECAR_INJECTION_FAILED, f"RayCluster {name}: {e}", also=[rc])
            if spec.pdb.enabled:
                await self.keep_budgets(spec, rc)

    async def keep_budgets(self, spec: GuardSpec, rc: Mapping[str, Any]) -> None:
        """One PodDisruptionBudget per guarded worker group, read every cycle
        and written only when it differs (see budgets.py for its shape)."""
        name = rc["metadata"]["name"]
        desired = desired_replicas(rc)
        for group, _, _ in patches.templates(rc, include_head=False):
            if spec.selection.worker_groups and group not in spec.selection.worker_groups:
                continue
            wanted = budgets.wanted_pdb(namespace=self.namespace, cluster=name, group=group,
                                        desired_pods=desired.get((name, group), 0),
                                        max_unavailable=spec.pdb.max_unavailable, owner=self.owner_ref())
            pdb = wanted["metadata"]["name"]
            current = await self.s.kube.get_pdb(self.namespace, pdb)
            if current is None:
                await self.s.kube.create_pdb(self.namespace, wanted)
            elif not budgets.is_ours(current):
                log.warning("%s/%s: PodDisruptionBudget %s exists and is not MemoryGuard's; left alone",
                            self.namespace, self.name, pdb)
            elif (patch := budgets.pdb_patch(current, wanted)) is not None:
                await self.s.kube.patch_pdb(self.namespace, pdb, patch)

    def owner_ref(self) -> dict[str, Any]:
        meta = self.body.get("metadata") or {}
        return {"apiVersion": self.body.get("apiVersion"), "kind": self.body.get("kind"), "name": meta.get("name"),
                "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": False}

    async def list_pods(self, clusters: Sequence[dict[str, Any]]) -> list[pi.PodInfo]:
        if not clusters:
            return []
        names = ",".join(c["metadata"]["name"] for c in clusters)
        selector = f"{pi.LABEL_IS_RAY_NODE}=yes,{pi.LABEL_CLUSTER} in ({names})"
        pods = await self.s.kube.list_pods(self.namespace, selector)
        return [pi.pod_info(p) for p in pods]

    @staticmethod
    def is_guarded(spec: GuardSpec, p: pi.PodInfo) -> bool:
        if p.is_head:
            return spec.policy.include_head
        return not spec.selection.worker_groups or p.group in spec.selection.worker_groups

    @staticmethod
    def gcs_address(rc: Mapping[str, Any], pods: Sequence[pi.PodInfo]) -> str | None:
        head = next((p for p in pods if p.is_head and p.cluster == rc["metadata"]["name"] and p.ip), None)
        if head is None:
            return None
        params = ((rc.get("spec") or {}).get("headGroupSpec") or {}).get("rayStartParams") or {}
        port = str(params.get("port", "6379"))
        return f"{head.ip}:{port}" if port.isdigit() else None

    # -- rotations -------------------------------------------------------------------
    def rotations_status(self) -> dict[str, Any]:
        return (self.ledger or Ledger()).to_status()

    async def advance_rotations(self, spec: GuardSpec, pods: Sequence[pi.PodInfo],
                                gcs: Mapping[str, str | None]) -> None:
        assert self.ledger is not None
        changed = False
        ended: list[tuple[EventReason, str, dict[str, Any]]] = []
        for uid, rot in list(self.ledger.inflight.items()):
            before = (rot.phase, rot.refused)
            pod = pod_ref(rot.pod, rot.uid)

            async def report(reason: EventReason, message: str, pod: dict[str, Any] = pod) -> None:
                await self.event(reason, message, also=[pod])

            try:
                out = await rotation.advance(
                    rot, kube=self.s.kube, drainer=self.s.drainer, pods=pods, gcs_address=gcs.get(rot.cluster),
                    drain_timeout_s=spec.policy.drain_timeout_s, replacement_timeout_s=spec.replacement_timeout_s,
                    eviction_timeout_s=spec.eviction_timeout_s, now=self.s.clock.now(), report=report)
            except ApiError as e:
                # The step is repeated next cycle (each is idempotent); the
                # other rotations go on.
                log.warning("%s/%s: rotation of %s stays %s for now: %s", self.namespace, self.name, rot.pod,
                            rot.phase, e)
                continue
            if out.message and not out.ended:
                log.warning("%s/%s: %s", self.namespace, self.name, out.message)
                self.s.metrics.evictions_refused.labels(self.namespace, self.name).inc()
            if rot.refused > before[1] and not out.message:
                self.s.metrics.evictions_refused.labels(self.namespace, self.name).inc()
            if out.ended:
                self.ledger.end(uid, out, now=self.s.clock.now())
                self.s.metrics.rotations.labels(self.namespace, self.name, rot.reason.split(":", 1)[0],
                                                out.kind.value).inc()
                if out.eviction_timed_out:
                    self.s.metrics.eviction_timeouts.labels(self.namespace, self.name).inc()
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

    def history_for(self, p: pi.PodInfo, now: float) -> RotationHistory:
        assert self.ledger is not None
        in_group = self.ledger.rotating_in(p.cluster, p.group)
        starts = self.ledger.starts(rotated_only=True)
        group_starts = self.ledger.starts(group=(p.cluster, p.group))
        return RotationHistory(
            is_head=p.is_head,
            pod_rotation_in_flight=p.uid in self.ledger.inflight or bool(p.rotation_phase) or p.terminating,
            group_in_flight=in_group, group_short=self.group_short(p.cluster, p.group, in_group),
            group_last_rotation_s=max(group_starts) if group_starts else None,
            guard_rotations_last_hour=sum(1 for t in starts if now - t < 3600),
            remediation_advised=(p.cluster, p.group) in self.advised, user_requested=p.user_requested)

    def group_short(self, cluster: str, group: str, rotating: int) -> int:
        """Ready pods the group lacks, its ``rotating`` pods aside: the
        RayCluster's replicas for the group, less its pods that are ready,
        not going and not rotating. 0 when the group is unknown. Only the
        group's own pods are looked at (this runs once per pod per cycle)."""
        assert self.ledger is not None
        wanted = self.desired.get((cluster, group))
        if wanted is None:
            return 0
        available = sum(1 for uid in self.available.get((cluster, group), ()) if uid not in self.ledger.inflight)
        return max(0, wanted - available - rotating)

    # -- sampling and deciding -------------------------------------------------------
    async def poll_and_decide(self, spec: GuardSpec, pods: Sequence[pi.PodInfo],
                              clusters: Sequence[dict[str, Any]]) -> list[st.PodView]:
        """Poll every pod's sidecar concurrently and decide on each as soon as
        its samples are in, so a fresh sample waits for no other pod. Pods
        that want a rotation are rotated once every pod has been heard, most
        urgent first: a group's slots go to the pods nearest their OOM, not
        to the first to answer."""
        assert self.settings is not None and self.ledger is not None
        settings = self.settings
        live = {p.uid for p in pods}
        for uid in list(self.tracks):
            if uid not in live:
                del self.tracks[uid]
        sem = asyncio.Semaphore(POLL_CONCURRENCY)
        wanting: list[tuple[pi.PodInfo, PodTrack]] = []
        by_cluster = {c["metadata"]["name"]: c for c in clusters}
        views: dict[str, st.PodView] = {}

        async def one(p: pi.PodInfo) -> None:
            track = self.tracks.get(p.uid)
            if track is None:
                track = self.tracks[p.uid] = PodTrack(PodWindow(settings), p.group)
            if not p.ip or p.phase != "Running":
                track.error = f"pod is {p.phase or 'pending'} without an IP" if not p.ip else None
            else:
                since = track.window.last.time_s if track.window.last else None
                async with sem:
                    # Nothing older than the policy's window is asked for or kept.
                    res = await sidecar_client.poll(
                        self.s.http, p.ip, spec.sampling.sidecar_port, since, timeout_s=spec.sampling.timeout_s,
                        now=self.s.clock.now, pod_uid=p.uid, require_uid=p.injected_sidecar,
                        oldest_s=self.s.clock.now() - settings.trend_window_s)
                self.s.metrics.poll_seconds.labels(self.namespace, self.name).observe(res.latency_s)
                if res.error and not res.samples:
                    self.s.metrics.poll_errors.labels(self.namespace, self.name).inc()
                track.error = res.error if not res.samples else None
                if res.samples or res.blind:
                    track.blind = res.blind or all(s.memory_current_bytes is None for s in res.samples)
                for sample in res.samples:
                    track.window.add(sample)
            views[p.name] = await self.decide_one(spec, p, track, by_cluster, wanting)

        await asyncio.gather(*(one(p) for p in pods))
        # One at a time, so each sees the slots the ones before it took; the
        # policy decides again with them (it may now defer, and says why).
        for p, track in sorted(wanting, key=lambda w: urgency(w[1].last_decision)):
            views[p.name] = await self.decide_one(spec, p, track, by_cluster, None)
        return [views[k] for k in sorted(views)]

    async def decide_one(self, spec: GuardSpec, p: pi.PodInfo, track: PodTrack,
                         by_cluster: Mapping[str, dict[str, Any]],
                         wanting: list[tuple[pi.PodInfo, PodTrack]] | None) -> st.PodView:
        """Decide on one pod and act, except that a rotation is only noted in
        ``wanting`` when given (to be started in order of urgency)."""
        assert self.settings is not None
        now = self.s.clock.now()
        t0 = time.perf_counter()
        decisions = decide(settings=self.settings, window=track.window, history=self.history_for(p, now), now_s=now)
        track.last_decision = decisions[0]
        if wanting is not None:
            self.s.metrics.decision_seconds.labels(self.namespace, self.name).observe(time.perf_counter() - t0)
            if track.window.last is not None:
                self.s.metrics.sample_to_decision.labels(self.namespace, self.name).observe(
                    max(0.0, self.s.clock.real_seconds(now - track.window.last.time_s)))
            if any(d.action is Action.ROTATE and not d.dry_run for d in decisions):
                wanting.append((p, track))
                return st.PodView(p.name, p.group, decisions[0], track.error, track.blind)
        for d in decisions:
            if d.action is Action.ROTATE:
                await self.rotate(spec, p, d)
            elif d.action is Action.REMEDIATE:
                self.advised.add((p.cluster, p.group))
                await self.remediate(spec, by_cluster.get(p.cluster), p, d, "jemalloc")
            if d.reason in STORE_REASONS and spec.spilling.mode != Mode.OFF:
                await self.remediate(spec, by_cluster.get(p.cluster), p, d, "spilling")
        return st.PodView(p.name, p.group, decisions[0], track.error, track.blind)

    async def rotate(self, spec: GuardSpec, p: pi.PodInfo, d: Decision) -> None:
        assert self.ledger is not None
        reason = f"{d.reason.value}: {d.message}"
        if d.dry_run:
            if p.uid not in self.planned:
                self.planned.add(p.uid)
                await self.event(EventReason.ROTATION_PLANNED, f"dry run: would rotate {p.name}: {reason}",
                                 also=[pod_ref(p.name, p.uid)])
            return
        try:
            rot = await rotation.start(self.s.kube, p, guard=self.name, reason=reason, now=self.s.clock.now())
        except ApiError as e:
            log.warning("%s/%s: could not mark %s for rotation: %s", self.namespace, self.name, p.name, e)
            return
        self.ledger.inflight[p.uid] = rot
        await self.write_status({"rotations": self.rotations_status()})
        await self.event(EventReason.ROTATION_STARTED, f"rotating {p.name} (group {p.group}): {reason}",
                         also=[pod_ref(p.name, p.uid)])

    async def remediate(self, spec: GuardSpec, rc: Mapping[str, Any] | None, p: pi.PodInfo, d: Decision,
                        kind: str) -> None:
        mode = spec.jemalloc.mode if kind == "jemalloc" else spec.spilling.mode
        key = (p.cluster, p.group, kind)
        if mode == Mode.OFF or rc is None or key in self.remediated or p.is_head:
            return
        self.remediated.add(key)
        found = patches._worker_group(rc, p.group)
        if found is None:
            return
        container = (((found[1].get("template") or {}).get("spec") or {}).get("containers") or [{}])[0]
        preload = next((e.get("value") for e in container.get("env") or [] if e.get("name") == "LD_PRELOAD"), None)
        env = patches.jemalloc_env(spec.jemalloc, preload) if kind == "jemalloc" else patches.spilling_env(
            spec.spilling)
        what = ", ".join(f"{k}={v}" for k, v in env.items())
        why = f"{p.name}: {d.reason.value}: {d.message}"
        self.s.metrics.remediations.labels(self.namespace, self.name, kind, mode).inc()
        if mode == Mode.RECOMMEND or spec.policy.dry_run:
            await self.event(EventReason.REMEDIATION_RECOMMENDED,
                             f"group {p.group} of {p.cluster}: set {what} ({why})", also=[rc])
            return
        ops = patches.remediation_patch(rc, p.group, env, record=f"{d.reason.value} on {p.name}")
        if not ops:
            return
        try:
            await self.s.kube.json_patch_raycluster(self.namespace, p.cluster, ops)
        except ApiError as e:
            self.remediated.discard(key)
            await self.event(EventReason.REMEDIATION_FAILED, f"group {p.group} of {p.cluster}: {e}", also=[rc])
            return
        await self.event(EventReason.REMEDIATION_APPLIED,
                         f"group {p.group} of {p.cluster}: set {what} in the pod template ({why}); pods get it as "
                         "they are replaced", also=[rc])

    # -- reporting ---------------------------------------------------------------------
    def publish_metrics(self, views: Sequence[st.PodView], pods: Sequence[pi.PodInfo]) -> None:
        m = self.s.metrics
        m.pods_guarded.labels(self.namespace, self.name).set(len(pods))
        m.pods_at_risk.labels(self.namespace, self.name).set(
            sum(1 for v in views if v.decision.reason in st.AT_RISK))
        m.pods_blind.labels(self.namespace, self.name).set(sum(1 for v in views if v.blind))
        for v in views:
            ev = v.decision.evidence
            verdict = st.pod_status(v)["verdict"]
            m.pod(self.namespace, self.name, v.name, v.group, ws=ev.working_set_bytes, limit=ev.limit_bytes,
                  eta=ev.projected_oom_s, store=ev.store_fraction, verdict=verdict)
        m.forget_pods(self.namespace, self.name, {(v.name, v.group) for v in views})

    async def write_status(self, status: Mapping[str, Any]) -> None:
        """Merge-patch the status, only when it changed; pods that left are
        nulled out (a merge patch keeps keys it is not told to remove)."""
        merged = {**(self.last_status or {}), **status}
        if merged == self.last_status:
            return
        patch = dict(status)
        if "pods" in status and self.last_status and isinstance(self.last_status.get("pods"), dict):
            gone = {k: None for k in self.last_status["pods"] if k not in status["pods"]}
            patch["pods"] = {**gone, **status["pods"]}
        try:
            await self.s.kube.patch_guard_status(self.namespace, self.name, patch)
        except ApiError as e:
            log.warning("%s/%s: status not written: %s", self.namespace, self.name, e)
            return
        self.last_status = json.loads(json.dumps(merged))
