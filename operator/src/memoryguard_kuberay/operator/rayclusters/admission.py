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
from memoryguard_kuberay.operator.guardspec import GuardSpec, Mode, SpecError, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection, patches
from memoryguard_kuberay.operator.rayclusters.patches import RAY_CONTAINER, Op

REMEDY_KINDS = ("jemalloc", "spilling", "callsites")

RAY_NODE_TYPES = ("head", "worker")  # KubeRay's ray.io/node-type on Ray nodes (a RayJob's submitter has none)
METRICS_PORT_NAME = "metrics"  # the Ray container's port KubeRay names for the raylet's metrics


class AdmissionReason(str, enum.Enum):
    INJECTED = "Injected"
    NOT_A_RAY_NODE = "NotARayNode"
    NO_CLUSTER = "ClusterNotFound"
    NOT_SELECTED = "NoGuardSelects"
    GROUP_NOT_GUARDED = "GroupNotGuarded"
    HAS_SIDECAR = "HasSidecar"
    NOT_INJECTING = "SidecarNotInjected"  # the guard gives pods only its remediations


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
    spec: GuardSpec  # its sidecar, and what its remediations set (remedy_ops)

    @property
    def injects(self) -> bool:
        return self.spec.sidecar.inject

    @classmethod
    def of(cls, guard: Mapping[str, Any], *, sidecar_image: str, trust: Trust | None) -> Admitting | None:
        """None for a guard that gives pods nothing: an invalid spec (refused
        in its status), one being deleted, or one that neither injects the
        sidecar nor applies a remediation."""
        meta = guard.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        try:
            spec = read_guard_spec(guard.get("spec"), sidecar_image=sidecar_image, trust=trust)
        except SpecError:
            return None
        if not spec.sidecar.inject and not _remedy_kinds(spec):
            return None
        return cls(name=str(meta.get("name", "")), created=str(meta.get("creationTimestamp", "")),
                   cluster_names=spec.selection.cluster_names, cluster_labels=dict(spec.selection.cluster_labels),
                   worker_groups=spec.selection.worker_groups, include_head=spec.policy.include_head, spec=spec)

    def selects(self, cluster: Mapping[str, Any]) -> bool:
        meta = cluster.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("name") in self.cluster_names or (bool(self.cluster_labels) and all(
            labels.get(k) == v for k, v in self.cluster_labels.items()))


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


def _remedy_kinds(spec: GuardSpec) -> tuple[str, ...]:
    """The remediations the guard applies (mode auto, not a dry run)."""
    return () if spec.policy.dry_run else tuple(k for k in REMEDY_KINDS if patches.mode_of(spec, k) == Mode.AUTO)


def _choose(pod: Mapping[str, Any], cluster: Mapping[str, Any] | None,
            guards: Sequence[Admitting]) -> tuple[Admitting | None, Admission | None]:
    """The guard that has the pod, or why none does."""
    node = ray_node(pod)
    if node is None:
        return None, Admission(AdmissionReason.NOT_A_RAY_NODE, "not a Ray node's pod (no ray.io/cluster and "
                               "ray.io/node-type head or worker)")
    name, kind, group = node
    if cluster is None:
        return None, Admission(AdmissionReason.NO_CLUSTER, f"RayCluster {name} not found")
    selecting = sorted((g for g in guards if g.selects(cluster)), key=lambda g: (g.created, g.name))
    if not selecting:
        return None, Admission(AdmissionReason.NOT_SELECTED, f"no guard selects RayCluster {name}")
    guard = selecting[0]
    if kind == "head" and not guard.include_head:
        return None, Admission(AdmissionReason.GROUP_NOT_GUARDED, f"guard {guard.name} does not guard the head "
                               "(spec.includeHead)", guard.name)
    if kind == "worker" and guard.worker_groups and group not in guard.worker_groups:
        return None, Admission(AdmissionReason.GROUP_NOT_GUARDED, f"guard {guard.name} does not guard worker "
                               f"group {group} (spec.workerGroups)", guard.name)
    return guard, None


def _preload(pod: Mapping[str, Any]) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    ray = containers[RAY_CONTAINER] if containers and isinstance(containers[RAY_CONTAINER], Mapping) else {}
    return next((e.get("value") for e in ray.get("env") or [] if isinstance(e, Mapping)
                 and e.get("name") == "LD_PRELOAD"), None)


def remedies(pod: Mapping[str, Any], cluster: Mapping[str, Any] | None,
             guards: Sequence[Admitting]) -> dict[str, dict[str, str]]:
    """{ConfigMap: the env it must hold} for each remediation the pod's
    guard applies to its group: the names the webhook reads (a worker's
    only; the head is never remediated)."""
    guard, _ = _choose(pod, cluster, guards)
    node = ray_node(pod)
    if guard is None or node is None or node[1] != "worker":
        return {}
    return {patches.remedy_configmap(node[0], node[2], kind): patches.wanted_env(guard.spec, kind, _preload(pod))
            for kind in _remedy_kinds(guard.spec)}


def remedy_ops(pod: Mapping[str, Any], cluster: Mapping[str, Any], wanted: Mapping[str, Mapping[str, str]],
               found: Mapping[str, Mapping[str, Any] | None]) -> list[Op]:
    """``envFrom`` entries in the Ray container for the remediations
    applied to the pod's group (``found``: the ConfigMaps as read, None
    where there is none). A ConfigMap is named only when it is the
    operator's for this RayCluster (owned by its uid) and holds exactly what
    the guard's spec sets: one planted under the name, or changed since,
    reaches no pod (issue 63, 3)."""
    uid = (cluster.get("metadata") or {}).get("uid")
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return []
    ray = dict(containers[RAY_CONTAINER])
    ops: list[Op] = []
    for name, env in sorted(wanted.items()):
        cm = found.get(name)
        if not cm:
            continue
        owners = (cm.get("metadata") or {}).get("ownerReferences") or []
        if dict(cm.get("data") or {}) != dict(env) or not any(
                isinstance(o, Mapping) and o.get("kind") == "RayCluster" and o.get("uid") == uid for o in owners):
            continue
        added = patches.env_from_ops(f"/spec/containers/{RAY_CONTAINER}", ray, name)
        ops += added
        if added:  # the next one is appended to this one
            ray["envFrom"] = [*(ray.get("envFrom") or []), added[0]["value"] if added[0]["path"].endswith("/-")
                              else added[0]["value"][0]]
    return ops


def admit(pod: Mapping[str, Any], cluster: Mapping[str, Any] | None, guards: Sequence[Admitting], *,
          native: bool, configmaps: Mapping[str, Mapping[str, Any] | None] | None = None) -> Admission:
    """The sidecar's ops for ``pod`` if a guard selects its cluster and
    group (and its remediations' envFrom, ``configmaps`` being those of
    ``remedies`` as read), else why not. ``cluster``: the pod's RayCluster
    as read (None: not found). ``guards``: the namespace's guards that give
    pods something; the oldest that selects the cluster has it, as in the
    guards' own cycles."""
    guard, refused = _choose(pod, cluster, guards)
    if refused is not None or guard is None or cluster is None:
        return refused or Admission(AdmissionReason.NOT_SELECTED, "no guard")
    name, kind, group = ray_node(pod) or ("", "", "")
    env_ops = remedy_ops(pod, cluster, remedies(pod, cluster, guards), configmaps or {})
    remedied = f"; remediation env from {len(env_ops)} ConfigMap(s)" if env_ops else ""
    ops = injection.template_ops("", pod, guard.spec.sidecar, native=native,
                                 ray_metrics_port=pod_metrics_port(pod)) if guard.injects else []
    if not ops:
        why = "the pod has the sidecar already (its template's)" if guard.injects else "the guard injects no sidecar"
        return Admission(AdmissionReason.HAS_SIDECAR if guard.injects else AdmissionReason.NOT_INJECTING,
                         why + remedied, guard.name, env_ops)
    return Admission(AdmissionReason.INJECTED, f"sidecar added for guard {guard.name} (RayCluster {name}, "
                     f"{'head' if kind == 'head' else 'group ' + group}){remedied}", guard.name, ops + env_ops)
