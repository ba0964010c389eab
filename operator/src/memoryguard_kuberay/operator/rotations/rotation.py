"""Graceful rotation of one pod: annotate -> drain -> evict -> wait for
KubeRay's replacement, one idempotent step per call.

Progress lives where it survives a restart: before the eviction on the pod
(annotations ``memoryguard.io/rotation-*``), after it in the MemoryGuard's
status (``status.rotations.inFlight``), so a restarted operator resumes
at the step it was at and never evicts twice. Pods are never deleted: only
the Eviction API, whose 429 (a PodDisruptionBudget says not now) means wait.
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError, EvictionAnswer
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.decided import Say, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.rotations.drain import Drainer
from memoryguard_kuberay.operator.rotations.ledger import InFlight, Outcome, OutcomeKind, Phase

# An eviction is given up only after its deadline AND this many refusals: a
# flaky API server (a 5xx or two in a row) is retried, not taken for a
# budget that will never allow (seen in the soak: one 500, a long cycle, and
# a rotation abandoned after a single try, which then held up its group).
MIN_REFUSALS = 3


async def start(kube: Kube, pod: pi.PodInfo, *, guard: str, reason: str, now: float) -> InFlight:
    """Step 1: mark the pod (so a restarted operator knows) and record it."""
    await kube.patch_pod_annotations(pod.namespace, pod.name, {
        C.ANN_REQUESTED_AT: f"{now:.3f}", C.ANN_REASON: reason[:256], C.ANN_PHASE: Phase.DRAINING.value,
        C.ANN_GUARD: guard,
    })
    return InFlight(pod=pod.name, uid=pod.uid, cluster=pod.cluster, group=pod.group, reason=reason[:256],
                    requested_at=now, phase=Phase.DRAINING)


def backoff_s(refused: int) -> float:
    """Seconds (operator clock) to wait after the n-th refused eviction."""
    return float(min(300, 10 * 2 ** min(refused, 5)))


async def give_up_eviction(rot: InFlight, pod: pi.PodInfo, *, kube: Kube, now: float,
                           eviction_timeout_s: float) -> Outcome:
    """The evicting step's deadline passed: take the marks off the pod (it
    stays, serving) and end the rotation as failed, naming what refused."""
    await kube.patch_pod_annotations(pod.namespace, pod.name, dict.fromkeys(pi.ROTATION_ANNOTATIONS))
    waited = now - (rot.evicting_since if rot.evicting_since is not None else rot.requested_at)
    why = rot.last_refusal or "no answer"
    message = (f"{rot.pod} not evicted: refused {rot.refused} time(s) over {waited:.0f} s "
               f"(evictionTimeoutSeconds {eviction_timeout_s:.0f}); last: {why}. "
               "The pod keeps running; its rotation marks are removed")
    return Outcome(OutcomeKind.FAILED, message, eviction_timed_out=True)


def replica_hosts(pod: pi.PodInfo, pods: Sequence[pi.PodInfo]) -> list[pi.PodInfo]:
    """The pod first, then the other hosts of its multi-host replica that
    are not going already (just the pod when it is its own replica)."""
    if not pod.replica:
        return [pod]
    return [pod, *sorted((p for p in pods if p.uid != pod.uid and p.replica == pod.replica
                          and p.cluster == pod.cluster and p.group == pod.group and not p.terminating),
                         key=lambda p: p.name)]


async def _evict_hosts(kube: Kube, hosts: Sequence[pi.PodInfo]) -> str:
    """The rest of a replica, each through the Eviction API (KubeRay would
    delete them anyway, with no budget asked, once the first is gone)."""
    said = []
    for host in hosts:
        try:
            answer, message = await kube.evict(host.namespace, host.name)
        except ApiError as e:
            answer, message = EvictionAnswer.REFUSED, str(e)
        said.append(f"{host.name} " + ("evicted" if answer is not EvictionAnswer.REFUSED
                                       else f"not evicted ({message[:200]}); KubeRay deletes it"))
    return ", ".join(said)


async def advance(rot: InFlight, *, kube: Kube, drainer: Drainer, pods: Sequence[pi.PodInfo], gcs_address: str | None,
                  drain_timeout_s: float, replacement_timeout_s: float, eviction_timeout_s: float,
                  now: float, serving: bool = False) -> Outcome:
    """Do the next step of one rotation; safe to call again after any crash.
    Returns what it did, its Events included (``Outcome.says``).
    ``serving``: the pod's RayCluster is a RayService's, whose new worker is
    Ready only once Serve places a replica (and so a proxy) on it: its
    replacement counts once its Ray container runs (seen on KubeRay v1.7.0
    with Ray 2.60: the evicted worker's replica moved to the head, and the
    replacement stayed NotReady for ever)."""
    pod = next((p for p in pods if p.uid == rot.uid), None)
    about = pod_ref(rot.pod, rot.uid)

    def told(reason: EventReason, message: str) -> tuple[Say, ...]:
        return (say(reason, message, about),)

    def gone() -> None:
        rot.phase, rot.evicted_at = Phase.REPLACING, now
        rot.peers = tuple(p.uid for p in pods if p.cluster == rot.cluster and p.group == rot.group)

    if rot.phase is Phase.DRAINING:
        if pod is None or pod.terminating:
            gone()  # gone already (KubeRay, a user, the kubelet)
            return Outcome()
        if pod.ip and gcs_address:
            result = await drainer.drain(gcs_address=gcs_address, node_ip=pod.ip, pod_name=pod.name,
                                         deadline_s=drain_timeout_s,
                                         reason=f"memoryguard-kuberay: {rot.reason}")
            msg = result.message
            says = () if result.skipped else told(EventReason.DRAINED if result.ok else EventReason.DRAIN_FAILED,
                                                  f"{rot.pod}: {msg}")
            rot.drained = result.ok and not result.skipped
        else:
            msg, says = "no pod IP or GCS address; not drained", ()
        await kube.patch_pod_annotations(pod.namespace, pod.name, {C.ANN_PHASE: Phase.EVICTING.value,
                                                                   C.ANN_DRAIN: msg[:256]})
        rot.phase = Phase.EVICTING
        return Outcome(says=says)
    if rot.phase is Phase.EVICTING:
        if pod is None or pod.terminating:
            gone()
            return Outcome()
        if rot.evicting_since is None:
            rot.evicting_since = now
        if rot.refused >= MIN_REFUSALS and now - rot.evicting_since > eviction_timeout_s:
            return await give_up_eviction(rot, pod, kube=kube, now=now, eviction_timeout_s=eviction_timeout_s)
        if rot.last_attempt is not None and rot.refused and now - rot.last_attempt < backoff_s(rot.refused):
            return Outcome()
        rot.last_attempt = now
        hosts = replica_hosts(pod, pods)
        try:
            answer, message = EvictionAnswer.EVICTED, ""
            for host in hosts if len(hosts) > 1 else ():
                # A multi-host replica goes whole or not at all: every host's
                # eviction judged first, so a budget that refuses one stops all.
                answer, message = await kube.evict(host.namespace, host.name, dry_run=True)
                if answer is EvictionAnswer.REFUSED:
                    message = f"{host.name} (a host of the same replica): {message}"
                    break
            if answer is not EvictionAnswer.REFUSED:
                answer, message = await kube.evict(pod.namespace, pod.name, grace_seconds=C.DRAINED_GRACE_SECONDS
                                                   if rot.drained else None)
        except ApiError as e:
            # 5xx and timeouts: try again next cycle; never fall back to a delete.
            rot.refused += 1
            rot.last_refusal = str(e)[:512]
            return Outcome(message=f"eviction of {rot.pod} failed: {e}")
        if answer is not EvictionAnswer.REFUSED:
            gone()
            others = await _evict_hosts(kube, hosts[1:])
            also = f"; with the other hosts of its replica: {others}" if others else ""
            return Outcome(says=told(EventReason.EVICTED, f"{rot.pod} evicted ({rot.reason}){also}"))
        rot.refused += 1
        rot.last_refusal = message[:512]
        if rot.refused == 1 or rot.refused % 10 == 0:
            return Outcome(says=told(EventReason.EVICTION_REFUSED, f"{rot.pod}: eviction refused ({message}); "
                                     f"retrying in {backoff_s(rot.refused):.0f} s"))
        return Outcome()
    # replacing: KubeRay recreates the worker once the evicted pod is gone (it
    # counts a Terminating pod: docs/facts.md), so the wait is in two parts,
    # each given replacementTimeoutSeconds: the pod's end (its grace period:
    # Ray's waits out 30 s), then a new pod of the group ready.
    evicted = rot.evicted_at if rot.evicted_at is not None else rot.requested_at
    replacement = [p for p in pods if p.cluster == rot.cluster and p.group == rot.group and p.uid != rot.uid
                   and p.uid not in rot.peers and (p.ready or (serving and p.ray_started)) and p.phase == "Running"
                   and not p.terminating]
    if replacement:
        how = "is ready" if replacement[0].ready else ("runs Ray (a RayService's worker is Ready only once Serve "
                                                        "places a replica on it)")
        return Outcome(OutcomeKind.ROTATED, f"{rot.pod} rotated ({rot.reason}); {replacement[0].name} {how}")
    if pod is not None:
        if now - evicted > replacement_timeout_s:
            return Outcome(OutcomeKind.FAILED, f"{rot.pod} was evicted but is still there (Terminating) after "
                                               f"{replacement_timeout_s:.0f} s; KubeRay replaces it only once it "
                                               f"is gone")
        return Outcome()
    if rot.gone_at is None:
        rot.gone_at = now
    if now - rot.gone_at > replacement_timeout_s:
        return Outcome(OutcomeKind.FAILED, f"{rot.pod} was evicted but no replacement in group {rot.group} became "
                                           f"ready within {replacement_timeout_s:.0f} s of its end")
    return Outcome()

