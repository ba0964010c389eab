"""A stand-in for kube-controller-manager's disruption controller (part of
the EMULATOR): a PodDisruptionBudget's status, computed as the real one does
(pkg/controller/disruption), which the eviction subresource then reads.

What it follows from the real controller (FACTS.md, "A real control plane"):
- an integer ``minAvailable`` works for any pods: expected = the matching
  pods, desired healthy = ``minAvailable``;
- ``maxUnavailable``, or a percentage ``minAvailable``, needs the pods'
  controller's ``/scale`` to know how many pods are expected. RayCluster has
  no scale subresource, so such a budget over KubeRay pods fails to sync:
  ``disruptionsAllowed: 0``, condition ``DisruptionAllowed=False`` with
  reason ``SyncFailed``, and every eviction it covers is refused (429);
- healthy = Ready, not terminating, and not just evicted (a pod in
  ``disruptedPods`` counts as gone until it is deleted, or for 2 minutes).

NOT modelled: the workload kinds that do have ``/scale`` (no Deployment or
StatefulSet lives in the emulator; their pods are counted as found),
``unhealthyPodEvictionPolicy``, the ~1 s delay of the real controller.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .selectors import selector_from_spec

# Owners whose /scale the real controller reads (apps/v1 and core/v1).
SCALABLE = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "ReplicationController"})
DISRUPTED_POD_TIMEOUT_S = 120.0


def is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _epoch(iso: str) -> float:
    try:
        return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except (TypeError, ValueError):
        return 0.0


def _controller_kind(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def budget_status(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """The status the disruption controller writes for ``pdb``. Purely
    computational; ``pods`` are the pods of the budget's namespace."""
    spec = pdb.get("spec") or {}
    match = selector_from_spec(spec.get("selector"))
    mine = [p for p in pods if match((p.get("metadata") or {}).get("labels") or {})]
    names = {p["metadata"]["name"] for p in mine}
    previous = (pdb.get("status") or {}).get("disruptedPods") or {}
    disrupted = {n: t for n, t in previous.items() if n in names and now - _epoch(t) < DISRUPTED_POD_TIMEOUT_S}
    healthy = sum(1 for p in mine if is_ready(p) and not p["metadata"].get("deletionTimestamp")
                  and p["metadata"]["name"] not in disrupted)
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    min_available = spec.get("minAvailable")
    needs_scale = "maxUnavailable" in spec or (isinstance(min_available, str) and min_available.endswith("%"))
    if needs_scale:
        owners = {_controller_kind(p) for p in mine}
        unscalable = sorted(str(k) for k in owners if k not in SCALABLE)
        if unscalable:
            kind = unscalable[0]
            message = (f"{kind.lower()}s.ray.io does not implement the scale subresource" if kind == "RayCluster"
                       else f"found no controller with a scale subresource for pods owned by {kind}")
            return {"observedGeneration": generation, "disruptionsAllowed": 0, "currentHealthy": healthy,
                    "desiredHealthy": 0, "expectedPods": 0, "disruptedPods": disrupted,
                    "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed",
                                    "message": message}]}
        expected = len(mine)
        if "maxUnavailable" in spec:
            desired = max(0, expected - _count(spec["maxUnavailable"], expected, round_up=True))
        else:
            desired = _count(str(min_available), expected, round_up=True)
    else:
        expected = len(mine)
        desired = int(min_available) if min_available is not None else 0
    allowed = max(0, healthy - desired)
    return {"observedGeneration": generation, "disruptionsAllowed": allowed, "currentHealthy": healthy,
            "desiredHealthy": desired, "expectedPods": expected, "disruptedPods": disrupted,
            "conditions": [{"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
                            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": ""}]}


def _count(value: int | str, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = total * int(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)
