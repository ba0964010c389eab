"""The MemoryGuard's status, computed from one cycle's results. Purely
computational; the guard loop writes it only when it changed."""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core.policy import Action, Decision, Reason, urgency
from memoryguard_kuberay.core.policy.trend import median
from memoryguard_kuberay.operator.decided import BRIEF_MAX
from memoryguard_kuberay.operator.rotations import ledger
from memoryguard_kuberay.operator.sidecars.sidecar_client import NOT_FAULTS, PollFailure

# The guard's heartbeat (status.lastCycleTime, issue 61, 2): a cycle
# rewrites it once it is this old, even when nothing else changed (status
# writes are otherwise skipped when unchanged: thousands of guards, each
# one write a minute at most for it).
HEARTBEAT_S = 60.0


def stale_after_s(interval_s: float) -> float:
    """How old lastCycleTime may be while an operator still guards: it is
    rewritten every max(interval, HEARTBEAT_S); two such beats missed and a
    cycle more (one that runs long, a replica taking over a shard within
    about 20 s) and nobody is guarding."""
    return 2 * max(interval_s, HEARTBEAT_S) + interval_s


AT_RISK = frozenset({Reason.PROJECTED_OOM, Reason.NODE_MEMORY_RUNNING_OUT, Reason.CRITICAL_USAGE,
                     Reason.MEMORY_PRESSURE, Reason.OOM_KILLED,
                     Reason.OBJECT_STORE_FILLING, Reason.OBJECT_STORE_FULL, Reason.ROTATION_DEFERRED,
                     Reason.ROTATION_IN_PROGRESS, Reason.NEAR_LIMIT})
MAX_RECENT = ledger.MAX_RECENT
# A status must stay far below what etcd stores (about 1.5 MiB an object) at
# any scale: every pod is listed up to MAX_PODS_LISTED, beyond that only those
# worth a look (rotating, at risk, without samples), nearest harm first, and
# the whole status within MAX_STATUS_BYTES. The full per-pod picture is in
# the metrics (memoryguard_pod_*) and the Events.
MAX_PODS_LISTED = 50
MAX_STATUS_BYTES = 64 * 1024
MESSAGE_MAX = 400
NO_MEMORY_SOURCE = "NoMemorySource"  # the verdict of a pod whose sidecar answers but reads no memory


@dataclasses.dataclass(frozen=True)
class PodView:
    name: str
    group: str
    decision: Decision
    sidecar_error: str | None
    blind: bool = False  # its sidecar answers, but reads no memory (source "none")
    failure: PollFailure | None = None  # why its last poll brought no samples
    template: str = ""  # the pod's template revision (podinfo.PodInfo.template)
    creep_bytes_per_h: float | None = None  # its trend, once it spans the policy's minimum
    pressure: Mapping[str, Any] | None = None  # the ladder's level and step (cycle/laddering.py)


def condition(kind: str, ok: bool, reason: str, message: str, now_iso: str,
              previous: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = next((c for c in previous if c.get("type") == kind), None)
    # lastTransitionTime moves only when the status flips, as Kubernetes conventions say.
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else now_iso
    return {"type": kind, "status": status, "reason": reason, "message": message[:1024],
            "lastTransitionTime": since}


def pod_status(v: PodView) -> dict[str, Any]:
    ev = v.decision.evidence
    return {
        "group": v.group,
        "workingSetBytes": ev.working_set_bytes,
        "limitBytes": ev.limit_bytes,
        "slopeBytesPerHour": None if ev.slope_bytes_per_h is None else round(ev.slope_bytes_per_h),
        "projectedOOMSeconds": None if ev.oom_outlook_s is None else round(ev.oom_outlook_s),
        "objectStorePercent": None if ev.store_fraction is None else round(ev.store_fraction * 100, 1),
        "verdict": _verdict(v),
        "lastDecision": v.decision.message[:MESSAGE_MAX],
        # A pod with no limit was judged against what the node leaves it.
        **({"judgedAgainst": "node", "nodeCeilingBytes": ev.node_ceiling_bytes}
           if ev.node_ceiling_bytes is not None else {}),
        **({"sidecarError": v.sidecar_error[:MESSAGE_MAX]} if v.sidecar_error else {}),
        **({"pollFailure": v.failure.value} if v.failure and v.sidecar_error else {}),
        **({"pressure": dict(v.pressure)} if v.pressure else {}),
    }


MAX_TEMPLATE_GROUPS = 20
MAX_TEMPLATES = 8  # per group: the newest revisions a rollout leaves side by side


def templates(pods: Sequence[PodView]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per group, per template revision: its pods with a trend and their
    median creep (which revisions leak more than others)."""
    by: dict[str, dict[str, list[float]]] = {}
    for v in pods:
        if v.template and v.creep_bytes_per_h is not None:
            by.setdefault(v.group, {}).setdefault(v.template, []).append(v.creep_bytes_per_h)
    return {g: {t: {"pods": len(c), "creepBytesPerHour": round(median(c))}
                for t, c in sorted(revs.items())[:MAX_TEMPLATES]}
            for g, revs in sorted(by.items())[:MAX_TEMPLATE_GROUPS]}


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``:
    keys ``new`` no longer has are null (else the server keeps them, and
    ``summary.verdicts`` counted verdicts no pod had: 5 pods summed to 10).
    Purely computational."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        out[k] = merge_patch(old.get(k), v) if isinstance(v, dict) else v
    return out


def _verdict(v: PodView) -> str:
    if v.sidecar_error and v.decision.reason in (Reason.NO_SAMPLES, Reason.SAMPLES_STALE):
        # Unreachable, a bad answer, another pod's, or only samples too old to use.
        return (v.failure or PollFailure.UNREACHABLE).value
    return NO_MEMORY_SOURCE if v.blind else v.decision.reason.value


def _notable(v: PodView) -> bool:
    d = v.decision
    return bool(v.sidecar_error) or v.blind or d.action is not Action.NONE or d.reason in AT_RISK


def listed(pods: Sequence[PodView], limit: int = MAX_PODS_LISTED) -> list[PodView]:
    """The pods the status lists: all of them in a small guard; in a large
    one those worth a look, rotating and nearest their harm first."""
    if len(pods) <= limit:
        return sorted(pods, key=lambda p: p.name)
    notable = [p for p in pods if _notable(p)]

    def rank(p: PodView) -> tuple[int, float, str]:
        d = p.decision
        if d.action is Action.ROTATE or d.reason is Reason.ROTATION_IN_PROGRESS:
            return (0, 0.0, p.name)
        if d.reason in AT_RISK or d.action is not Action.NONE:
            return (1, urgency(d), p.name)
        return (2, 0.0, p.name)

    return sorted(sorted(notable, key=rank)[:limit], key=lambda p: p.name)


def pods_listed(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A status's pods by name: the list this version writes, or the map
    statuses written before it hold (read until each guard's next cycle
    writes the list)."""
    pods = status.get("pods")
    if isinstance(pods, Mapping):
        return {str(k): v for k, v in pods.items() if isinstance(v, Mapping)}
    if isinstance(pods, list):
        return {str(p["name"]): p for p in pods if isinstance(p, Mapping) and p.get("name")}
    return {}


def bounded(status: dict[str, Any], pods: Sequence[PodView]) -> dict[str, Any]:
    """Fewer pods listed until the status fits in MAX_STATUS_BYTES."""
    shown = listed(pods)
    while True:
        # A list with a name field, as Kubernetes' own statuses list things
        # (a map keyed by pod name read "Raycluster - Kuberay - Worker - Abcde"
        # in kubectl describe: issue 42, 4).
        status["pods"] = [{"name": p.name, **pod_status(p)} for p in shown]
        status["summary"]["podsListed"] = len(shown)
        if len(json.dumps(status, separators=(",", ":"))) <= MAX_STATUS_BYTES or not shown:
            return status
        shown = listed(shown, len(shown) // 2)


def build(*, generation: int | None, clusters: Sequence[str], pods: Sequence[PodView], spec_error: str | None,
          missing_clusters: Sequence[str], rotations: Mapping[str, Any], last_action: str | None, now_iso: str,
          previous: Mapping[str, Any], contested: Mapping[str, str] | None = None,
          last_action_brief: str | None = None, refused: str | None = None,
          held: Mapping[str, Any] | None = None, unknown_groups: Sequence[str] = (),
          unread: str | None = None) -> dict[str, Any]:
    """The status, computed once from what the cycle found and did.
    ``refused``: why the operator will not serve this guard at all.
    ``unread``: why some clusters it selects were not read (clusters.py).
    ``held``: RayClusters whose templates are left alone, with why
    ({"reason", "message"}: kuberayrules.py), as the status keeps them."""
    prev_conds = previous.get("conditions") or []
    # A pod not running yet (or going), or made before the sidecar was
    # injected, has its own verdict and degrades nothing (issue 42, 1 and 2).
    waiting = sorted(p.name for p in pods if p.sidecar_error and p.failure in NOT_FAULTS)
    unreachable = sorted(p.name for p in pods if p.sidecar_error and p.failure not in NOT_FAULTS)
    blind = sorted(p.name for p in pods if p.blind and not p.sidecar_error)
    at_risk = sum(1 for p in pods if p.decision.reason in AT_RISK or p.decision.action is Action.ROTATE)
    if refused:
        degraded = (True, "TooManyGuards", refused)
    elif spec_error:
        degraded = (True, "InvalidSpec", spec_error)
    elif unread:
        degraded = (True, "ClustersNotRead", unread)
    elif missing_clusters:
        degraded = (True, "ClusterNotFound", f"RayCluster(s) not found: {', '.join(missing_clusters)}")
    elif contested:
        degraded = (True, "ClusterGuardedElsewhere", "; ".join(
            f"RayCluster {c} is guarded by the older MemoryGuard {g}; this guard leaves it alone"
            for c, g in sorted(contested.items())))
    elif not clusters:
        degraded = (True, "NoClusterSelected", "the clusterSelector matches no RayCluster in this namespace; "
                                               "nothing is guarded")
    elif unreachable:
        degraded = (True, "SidecarUnreachable",
                    f"{len(unreachable)} pod(s) without samples: {', '.join(unreachable[:10])}")
    elif blind:
        degraded = (True, "NoMemorySource",
                    f"{len(blind)} pod(s) whose sidecar reads no memory (no cgroup, no Ray process found), so "
                    f"nothing protects them: {', '.join(blind[:10])}")
    elif waiting:
        # Not a fault of the guard's (nothing to repair), but never "all
        # report" while some do not (issue 61, 2: both pods Pending read so).
        degraded = (False, "AsExpected", f"the running guarded pods report samples; {len(waiting)} not asked (not "
                                         f"running yet, or running without the sidecar: each pod's error says which): "
                                         f"{', '.join(waiting[:10])}")
    elif not pods:
        degraded = (False, "AsExpected", "the selected RayClusters have no pods to guard yet")
    else:
        degraded = (False, "AsExpected", "all guarded pods report samples")
    # Ready says the guard guards what its spec names (issue 42, 4: a
    # misspelled cluster, or a worker group no cluster has, read Ready).
    if refused:
        ready, ready_reason, ready_message = False, "TooManyGuards", refused
    elif spec_error:
        ready, ready_reason, ready_message = False, "InvalidSpec", spec_error
    elif unread:
        ready, ready_reason, ready_message = False, "ClustersNotRead", unread
    elif missing_clusters:
        ready, ready_reason, ready_message = False, "ClusterNotFound", (
            f"RayCluster(s) not found in this namespace: {', '.join(missing_clusters)}")
    elif not clusters:
        ready, ready_reason, ready_message = False, degraded[1], degraded[2]
    elif unknown_groups:
        ready, ready_reason, ready_message = False, "UnknownWorkerGroup", (
            f"spec.workerGroups names group(s) no selected RayCluster has: {', '.join(unknown_groups)}")
    else:
        ready, ready_reason, ready_message = True, "Guarding", (
            f"guarding {len(pods)} pod(s) in {len(clusters)} RayCluster(s)")
    verdicts = collections.Counter(_verdict(p) for p in pods)
    status = {
        "observedGeneration": generation,
        "conditions": [
            condition("Ready", ready, ready_reason, ready_message, now_iso, prev_conds),
            condition("Degraded", degraded[0], degraded[1], degraded[2], now_iso, prev_conds),
            # Positive polarity, for `kubectl get`'s REPORTING column: False
            # when a guarded pod's sidecar is unreachable or reads no memory
            # (READY says only that the guard is served).
            # A pod that reports nothing is not reporting, whatever the reason
            # (issue 61, 2): pods not running yet read NotReporting here,
            # though they degrade nothing.
            condition("Reporting", bool(pods) and not unreachable and not blind and not waiting,
                      "SidecarUnreachable" if unreachable else "NoMemorySource" if blind else
                      "NotReporting" if waiting else "AllReporting" if pods else "NoPods",
                      f"{len(pods) - len(unreachable) - len(blind) - len(waiting)} of {len(pods)} guarded pod(s) "
                      f"report memory" + (f"; {len(waiting)} not asked (not running yet, or running without the "
                                          f"sidecar): {', '.join(waiting[:10])}" if waiting else ""),
                      now_iso, prev_conds),
            _templates_condition(held or {}, now_iso, prev_conds),
        ],
        "summary": {"clusters": len(clusters), "pods": len(pods), "atRisk": at_risk,
                    "sidecarUnreachable": len(unreachable), "noMemorySource": len(blind), "notAsked": len(waiting),
                    "verdicts": dict(sorted(verdicts.items()))},
        "rotations": dict(rotations),
        "lastAction": (last_action or previous.get("lastAction") or "")[:1024] or None,
        "lastActionBrief": (last_action_brief or previous.get("lastActionBrief") or "")[:BRIEF_MAX] or None,
    }
    return bounded(status, pods)


def _templates_condition(held: Mapping[str, Any], now_iso: str,
                         previous: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """False when MemoryGuard leaves some guarded RayCluster's pod templates
    alone (no sidecar injected, no remediation applied): upgradeStrategy
    Recreate (a change would recreate the whole cluster) or a RayService's
    cluster (a change would not last). Reason: the first such cluster's.
    (Read back from the status: a value of the wrong shape reads as held,
    for a reason not known.)"""
    if not held:
        return condition("TemplatesWritable", True, "Writable", "MemoryGuard may change the guarded clusters' pod "
                         "templates (new pods get the change)", now_iso, previous)
    why = [h if isinstance(h, Mapping) else {} for _, h in sorted(held.items())]
    reason = str(why[0].get("reason") or "Held")
    message = "; ".join(str(h.get("message") or "held") for h in why)
    return condition("TemplatesWritable", False, reason, message, now_iso, previous)
