"""What a Ray pod gets at its admission: the sidecar (injection.py's, the
same container, volumes and process namespace a template gets), added to
the pod itself as the API server creates it, whoever made it (a RayCluster,
a RayService's or a RayJob's cluster, KubeRay's replacement). No KubeRay
spec is touched, so nothing KubeRay rewrites or recreates is at stake
(docs/how-it-works.md, "Admission").

Purely computational: the pod, its RayCluster and the namespace's guards
(as the index of guards keeps them: ``Admitting``) in, an ``Admission`` out,
with the ops and a sentence saying why. The handler (handlers.py) applies
the ops; a pod this says nothing for is created as it came.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.trust import Trust
from memoryguard_kuberay.operator.guardspec import SidecarInjection, SpecError, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection
from memoryguard_kuberay.operator.rayclusters.patches import RAY_CONTAINER, Op

RAY_NODE_TYPES = ("head", "worker")  # KubeRay's ray.io/node-type on Ray nodes (a RayJob's submitter has none)
METRICS_PORT_NAME = "metrics"  # the Ray container's port KubeRay names for the raylet's metrics


class AdmissionReason(str, enum.Enum):
    INJECTED = "Injected"
    NOT_A_RAY_NODE = "NotARayNode"
    NO_CLUSTER = "ClusterNotFound"
    NOT_SELECTED = "NoGuardSelects"
    GROUP_NOT_GUARDED = "GroupNotGuarded"
    HAS_SIDECAR = "HasSidecar"


@dataclasses.dataclass(frozen=True)
class Admitting:
    """What the webhook needs of one guard: kept by kopf's index of guards,
    small whatever the guard's size (its spec read once, here)."""

    name: str
    created: str  # creationTimestamp: of two guards selecting one cluster the older has it (clusters.older)
    cluster_names: tuple[str, ...]
    cluster_labels: Mapping[str, str]
    worker_groups: tuple[str, ...]
    include_head: bool
    sidecar: SidecarInjection

    @classmethod
    def of(cls, guard: Mapping[str, Any], *, sidecar_image: str, trust: Trust | None) -> Admitting | None:
        """None for a guard that injects nothing: an invalid spec (refused
        in its status), or ``sidecar.inject: false``, or one being deleted."""
        meta = guard.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        try:
            spec = read_guard_spec(guard.get("spec"), sidecar_image=sidecar_image, trust=trust)
        except SpecError:
            return None
        if not spec.sidecar.inject:
            return None
        return cls(name=str(meta.get("name", "")), created=str(meta.get("creationTimestamp", "")),
                   cluster_names=spec.selection.cluster_names, cluster_labels=dict(spec.selection.cluster_labels),
                   worker_groups=spec.selection.worker_groups, include_head=spec.policy.include_head,
                   sidecar=spec.sidecar)

    def selects(self, cluster: Mapping[str, Any]) -> bool:
        meta = cluster.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("name") in self.cluster_names or bool(self.cluster_labels) and all(
            labels.get(k) == v for k, v in self.cluster_labels.items())


@dataclasses.dataclass(frozen=True)
class Admission:
    reason: AdmissionReason
    message: str
    guard: str | None = None
    ops: list[Op] = dataclasses.field(default_factory=list)


def ray_node(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(cluster, node type, group) of a Ray node's pod, as KubeRay labels it."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    cluster, kind = labels.get(C.LABEL_CLUSTER), labels.get(C.LABEL_NODE_TYPE)
    if not isinstance(cluster, str) or not cluster or kind not in RAY_NODE_TYPES:
        return None
    return cluster, str(kind), str(labels.get(C.LABEL_GROUP, ""))


def pod_metrics_port(pod: Mapping[str, Any]) -> int:
    """Where this pod's raylet serves its metrics: the Ray container's port
    KubeRay names ``metrics`` (from the group's metrics-export-port), else
    KubeRay's default."""
    containers = (pod.get("spec") or {}).get("containers") or []
    ray = containers[RAY_CONTAINER] if containers and isinstance(containers[RAY_CONTAINER], Mapping) else {}
    for port in ray.get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") == METRICS_PORT_NAME:
            value = port.get("containerPort")
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
                return value
    return C.RAY_METRICS_PORT


def admit(pod: Mapping[str, Any], cluster: Mapping[str, Any] | None, guards: Sequence[Admitting], *,
          native: bool) -> Admission:
    """The sidecar's ops for ``pod`` if a guard selects its cluster and
    group, else why not. ``cluster``: the pod's RayCluster as read (None:
    not found). ``guards``: the namespace's guards that inject; the oldest
    that selects the cluster has it, as in the guards' own cycles."""
    node = ray_node(pod)
    if node is None:
        return Admission(AdmissionReason.NOT_A_RAY_NODE, "not a Ray node's pod (no ray.io/cluster and "
                         "ray.io/node-type head or worker)")
    name, kind, group = node
    if cluster is None:
        return Admission(AdmissionReason.NO_CLUSTER, f"RayCluster {name} not found")
    selecting = sorted((g for g in guards if g.selects(cluster)), key=lambda g: (g.created, g.name))
    if not selecting:
        return Admission(AdmissionReason.NOT_SELECTED, f"no guard that injects the sidecar selects RayCluster {name}")
    guard = selecting[0]
    if kind == "head" and not guard.include_head:
        return Admission(AdmissionReason.GROUP_NOT_GUARDED, f"guard {guard.name} does not guard the head "
                         "(spec.policy.includeHead)", guard.name)
    if kind == "worker" and guard.worker_groups and group not in guard.worker_groups:
        return Admission(AdmissionReason.GROUP_NOT_GUARDED, f"guard {guard.name} does not guard worker group "
                         f"{group} (spec.workerGroups)", guard.name)
    ops = injection.template_ops("", pod, guard.sidecar, native=native, ray_metrics_port=pod_metrics_port(pod))
    if not ops:
        return Admission(AdmissionReason.HAS_SIDECAR, "the pod has the sidecar already (its template's)", guard.name)
    return Admission(AdmissionReason.INJECTED, f"sidecar added for guard {guard.name} (RayCluster {name}, "
                     f"{'head' if kind == 'head' else 'group ' + group})", guard.name, ops)
