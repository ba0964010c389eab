"""The eviction subresource of the EMULATED API, as the real one: it reads
the matching PodDisruptionBudget's ``status.disruptionsAllowed`` (429 naming
the budget in ``details.causes`` when it is 0; 500 when several match),
records the pod in the budget's ``disruptedPods``, then deletes the pod
gracefully (``deleteOptions.gracePeriodSeconds`` over the pod's own);
``dryRun=All`` answers 201 and keeps the pod. A pod already
going, finished or pending ignores the budget; an unready pod is evicted
without spending it only while the budget is met (IfHealthyBudget)."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from . import disruption
from .selectors import selector_from_spec
from .wire import ApiError, now_iso, status_doc

if TYPE_CHECKING:
    from .store import ObjectStore


def evict(api: ObjectStore, ns: str, name: str, *, dry_run: bool = False,
          grace_seconds: int | None = None) -> dict[str, Any]:
    key = ("", "pods", ns, name)
    pod = api.store.get(key)
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found')
    labels = pod["metadata"].get("labels") or {}
    pdbs = [(k, o) for k, o in api.store.items()
            if k[1] == "poddisruptionbudgets" and k[2] == ns
            and selector_from_spec(o.get("spec", {}).get("selector"))(labels)]
    if len(pdbs) > 1:
        raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                             "eviction subresource does not support.")
    # As the real handler (eviction.go): a pod already going, finished or
    # not yet running ignores the budget (canIgnorePDB); an unready pod is
    # evicted without spending it only while the budget is met
    # (unhealthyPodEvictionPolicy IfHealthyBudget, the default); every other
    # eviction spends it, or is refused when none is left.
    phase = (pod.get("status") or {}).get("phase")
    ignores = bool(pod["metadata"].get("deletionTimestamp")) or phase in ("Succeeded", "Failed", "Pending")
    spends = False
    if pdbs and not ignores:
        pdb_key, pdb = pdbs[0]
        status = pdb.get("status") or {}
        healthy, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        spends = disruption.is_ready(pod) or not (desired > 0 and healthy >= desired)
    if spends and int(status.get("disruptionsAllowed") or 0) <= 0:
        raise ApiError(429, "TooManyRequests",
                       "Cannot evict pod as it would violate the pod's disruption budget.",
                       causes=[{"reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                           f"{status.get('desiredHealthy', 0)} healthy pods and has "
                                           f"{status.get('currentHealthy', 0)} currently"}])
    if dry_run:
        return status_doc(201, "", "evicted (dry run)") | {"status": "Success"}
    if spends:
        disrupted = {**(pdb.get("status") or {}).get("disruptedPods", {}), name: now_iso()}
        new_status = {**(pdb.get("status") or {}), "disruptedPods": disrupted,
                      "disruptionsAllowed": int(status["disruptionsAllowed"]) - 1}
        api.write_object(api.kind_of("poddisruptionbudgets"), pdb_key, {**pdb, "status": new_status}, pdb,
                    "MODIFIED")
    api.evictions.append((ns, name, time.time()))
    for observe in api.observers:
        observe("pods", "EVICTING", copy.deepcopy(pod))
    api.delete_object(api.kind_of("pods"), key, grace_seconds=grace_seconds)
    return status_doc(201, "", "evicted") | {"status": "Success"}
