"""What a real KubeRay does with the changes MemoryGuard makes, and so what
MemoryGuard may change. Purely computational: given a RayCluster as read,
each function says what KubeRay would do, with a sentence a person can
read. Every rule here was seen with KubeRay's released controller (v1.5.1
and v1.7.0, tests/realk8s/test_kuberay.py; docs/facts.md, "A real
KubeRay"), not only read in its source.

- ``spec.upgradeStrategy.type: Recreate`` (v1.6+): the head carries a hash
  of the whole spec but replicas/minReplicas/maxReplicas/workersToDelete;
  any other change (a template's containers, env, volumes, annotations)
  makes KubeRay delete every pod of the cluster, head included. MemoryGuard
  changes no template of such a cluster unless its guard says
  ``kuberay.allowRecreate: true``.
- A RayCluster owned by a RayService is rewritten from the RayService by
  KubeRay (spec, labels, annotations), and a change of the RayService's
  cluster config makes a new RayCluster: a template change made on the
  RayCluster does not last. MemoryGuard changes none there and says where
  the change belongs.
- ``numOfHosts > 1``: once one host of a replica is gone, KubeRay deletes
  the replica's other hosts with a plain delete (no Eviction API, no
  PodDisruptionBudget): a host is rotated only with its replica, as one
  unit of ``numOfHosts`` pods.
- Autoscaler v2 sets ``restartPolicy: Never`` on every Ray pod: a plain
  sidecar container that exits stays dead; a native sidecar (an init
  container with ``restartPolicy: Always``) is restarted whatever the pod's
  policy.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

UPGRADE_RECREATE = "Recreate"
RAYSERVICE_KIND = "RayService"
# Servers whose pods take native sidecars (SidecarContainers: beta and on
# by default from 1.29, stable in 1.33).
NATIVE_SIDECAR_MINOR = 29


class TemplateHold(str, enum.Enum):
    """Why MemoryGuard leaves a RayCluster's pod templates as they are."""

    RECREATE = "UpgradeStrategyRecreate"
    RAYSERVICE = "OwnedByRayService"
    TOO_MANY_GROUPS = "TooManyWorkerGroups"


# The most worker groups of one RayCluster whose templates MemoryGuard
# patches and whose groups it guards (KubeRay sets no bound; real clusters
# have a handful, a few dozen at most). One of 5,000 groups (829 KB) made a
# patch of 30,000 ops and 11.9 MB, refused 413 every cycle after a 7.1 s
# stall of the event loop (issue 63, 4).
MAX_WORKER_GROUPS = 100


@dataclasses.dataclass(frozen=True)
class Held:
    cluster: str
    why: TemplateHold
    message: str


def _obj(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def upgrade_strategy(rc: Mapping[str, Any]) -> str | None:
    return _obj(_obj(rc.get("spec")).get("upgradeStrategy")).get("type")


def rayservice_owner(rc: Mapping[str, Any]) -> str | None:
    """The RayService that owns the RayCluster, by name; None if none does."""
    refs = _obj(rc.get("metadata")).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        ref = _obj(ref)
        if ref.get("kind") == RAYSERVICE_KIND and str(ref.get("apiVersion", "")).startswith("ray.io/"):
            return str(ref.get("name", ""))
    return None


def template_hold(rc: Mapping[str, Any], *, allow_recreate: bool, admission: bool = False) -> Held | None:
    """Whether MemoryGuard must leave this RayCluster's pod templates alone
    (no sidecar injected or removed, no remediation applied or reverted),
    and why; None when a template change reaches only new pods, as KubeRay
    otherwise does. ``admission``: the sidecar and a remediation's env
    reach pods as they are created (webhook.py) instead, and the message
    says so."""
    name = str(_obj(rc.get("metadata")).get("name", ""))
    groups = _obj(rc.get("spec")).get("workerGroupSpecs")
    if isinstance(groups, list) and len(groups) > MAX_WORKER_GROUPS:
        return Held(name, TemplateHold.TOO_MANY_GROUPS, (
            f"RayCluster {name} declares {len(groups)} worker groups, more than MemoryGuard patches or guards "
            f"({MAX_WORKER_GROUPS}): its pod templates are left as they are, no budget is kept, and only its first "
            f"{MAX_WORKER_GROUPS} groups are guarded; split it into several RayClusters"))
    owner = rayservice_owner(rc)
    if owner is not None:
        if admission:
            return Held(name, TemplateHold.RAYSERVICE, (
                f"RayCluster {name} belongs to RayService {owner}: KubeRay rewrites its spec from the RayService, so "
                f"MemoryGuard changes none of its pod templates: its pods get the sidecar, and a remediation's "
                f"env, as they are created (admission)"))
        return Held(name, TemplateHold.RAYSERVICE, (
            f"RayCluster {name} belongs to RayService {owner}: KubeRay rewrites its spec from the RayService, so "
            f"a change to its pod templates would not last; put the sidecar (and any remediation) in the "
            f"RayService's rayClusterConfig instead. MemoryGuard still watches and rotates its workers"))
    if upgrade_strategy(rc) == UPGRADE_RECREATE and not allow_recreate and admission:
        return Held(name, TemplateHold.RECREATE, (
            f"RayCluster {name} has upgradeStrategy Recreate: KubeRay deletes every pod of it, head included, on "
            f"any change to a pod template, so MemoryGuard changes none: its pods get the sidecar, and a "
            f"remediation's env, as they are created (admission)"))
    if upgrade_strategy(rc) == UPGRADE_RECREATE and not allow_recreate:
        return Held(name, TemplateHold.RECREATE, (
            f"RayCluster {name} has upgradeStrategy Recreate: KubeRay deletes every pod of it, head included, on "
            f"any change to a pod template, so MemoryGuard changes none (no sidecar injected or removed, no "
            f"remediation applied or reverted); add the sidecar to the templates yourself, or set the guard's "
            f"kuberay.allowRecreate to accept a recreation of the whole cluster on each change"))
    return None


def hosts(group: Mapping[str, Any]) -> int:
    """A worker group spec's ``numOfHosts``: the pods of one replica (1 for
    a value absent or under 1; a value of the wrong shape raises TypeError
    or ValueError). groups.desired_replicas counts a group's pods with it."""
    return max(1, int(group.get("numOfHosts") or 1))


def hosts_per_replica(rc: Mapping[str, Any] | None, group: str) -> int:
    """``hosts`` of a RayCluster's worker group (1 for the head, a group it
    does not have, or a value of the wrong shape)."""
    groups = _obj(_obj(rc).get("spec")).get("workerGroupSpecs") if rc else None
    for g in groups if isinstance(groups, list) else []:
        g = _obj(g)
        if g.get("groupName") == group:
            try:
                return hosts(g)
            except (TypeError, ValueError):
                return 1
    return 1


def native_sidecars(server_minor: int | None) -> bool:
    """Whether the server runs native sidecars (``None``: not known, so no)."""
    return server_minor is not None and server_minor >= NATIVE_SIDECAR_MINOR
