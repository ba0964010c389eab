"""The PodDisruptionBudget a guard keeps per worker group: what it should
be, and the patch that makes an existing one so. Purely computational.

Why an integer ``minAvailable`` and never ``maxUnavailable``: the real
disruption controller turns ``maxUnavailable`` (or any percentage) into a
count through the pods' controller's ``/scale`` subresource, which
RayCluster does not have. Such a budget never syncs (``SyncFailed``,
``disruptionsAllowed: 0``) and refuses every eviction, our own rotations
included. An integer ``minAvailable`` needs no controller; the operator
keeps it at the group's desired pods (KubeRay's replicas within the
autoscaler's bounds, times ``numOfHosts``) less ``maxUnavailable``, and
follows every change of those.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C

MANAGED_BY = {"app.kubernetes.io/managed-by": "memoryguard"}


def pdb_name(cluster: str, group: str) -> str:
    return f"memoryguard-{cluster}-{group}"[:253]


def min_available(desired_pods: int, max_unavailable: int) -> int:
    """Pods that must stay healthy: never negative, so an empty or
    scaled-to-zero group blocks nothing."""
    return max(0, desired_pods - max_unavailable)


def wanted_pdb(*, namespace: str, cluster: str, group: str, desired_pods: int, max_unavailable: int,
               owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": pdb_name(cluster, group), "namespace": namespace, "ownerReferences": [dict(owner)],
                     "labels": dict(MANAGED_BY)},
        "spec": {"minAvailable": min_available(desired_pods, max_unavailable),
                 "selector": {"matchLabels": {C.LABEL_CLUSTER: cluster, C.LABEL_GROUP: group}}},
    }


def pdb_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch bringing ``current`` to ``wanted``'s spec, or None when
    nothing differs. A budget from an older version (``maxUnavailable``)
    loses that field: a budget may have only one of the two."""
    spec = current.get("spec") or {}
    want = wanted["spec"]
    if (spec.get("minAvailable") == want["minAvailable"] and "maxUnavailable" not in spec
            and spec.get("selector") == want["selector"]):
        return None
    return {"spec": {"minAvailable": want["minAvailable"], "maxUnavailable": None, "selector": want["selector"]}}


def selector() -> str:
    """The label selector of MemoryGuard's budgets (a user's are never touched)."""
    return ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
