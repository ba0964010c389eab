"""How many pods each group of a RayCluster should have and has, for one
cycle: a value made once per cycle and passed to the steps that need it
(never kept on the long-lived guard loop). Purely computational."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.rayclusters import kuberayrules

GroupKey = tuple[str, str]  # (cluster, group)


def desired_replicas(rc: Mapping[str, Any]) -> dict[GroupKey, int]:
    """(cluster, group) -> how many pods KubeRay keeps: 1 head, and per
    worker group ``replicas`` held within ``[minReplicas, maxReplicas]``
    times ``numOfHosts``, 0 when the group is suspended (KubeRay's
    ``GetWorkerGroupDesiredReplicas``)."""
    name = str((rc.get("metadata") or {}).get("name", ""))
    raw_spec = rc.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    raw_groups = spec.get("workerGroupSpecs")
    groups: list[Any] = raw_groups if isinstance(raw_groups, list) else []
    out = {(name, C.HEAD_GROUP): 1}
    for g in groups:
        if not isinstance(g, Mapping) or not isinstance(g.get("groupName"), str):
            continue
        try:
            lo = int(g.get("minReplicas") or 0)
            hi = int(g["maxReplicas"]) if g.get("maxReplicas") is not None else 2**31 - 1
            replicas = lo if g.get("replicas") is None else int(g["replicas"])
            replicas = hi if lo > hi else min(max(replicas, lo), hi)
            n = 0 if g.get("suspend") is True else replicas * kuberayrules.hosts(g)
        except (TypeError, ValueError):
            continue
        out[(name, g["groupName"])] = max(0, n)
    return out


@dataclasses.dataclass(frozen=True)
class Groups:
    desired: Mapping[GroupKey, int]  # pods KubeRay keeps
    available: Mapping[GroupKey, tuple[str, ...]]  # uids of pods ready, running, not going, unmarked

    @classmethod
    def of(cls, clusters: Iterable[Mapping[str, Any]], pods: Iterable[pi.PodInfo]) -> Groups:
        """A pod is available when Ready; in a RayService's cluster, when its
        Ray container runs: a RayService's worker is Ready only where Serve
        has put a replica (docs/facts.md), and counting the others as
        missing held a leaking worker's rotation back ("the group is short
        of 1 ready pod") until the kernel's kill."""
        clusters = list(clusters)
        serving = {str((c.get("metadata") or {}).get("name", "")) for c in clusters
                   if kuberayrules.rayservice_owner(c) is not None}
        available: dict[GroupKey, list[str]] = {}
        for q in pods:
            up = q.ready or (q.cluster in serving and q.ray_started)
            if up and q.phase == "Running" and not q.terminating and not q.rotation_phase:
                available.setdefault((q.cluster, q.group), []).append(q.uid)
        desired = {key: n for c in clusters for key, n in desired_replicas(c).items()}
        return cls(desired, {k: tuple(v) for k, v in available.items()})

    def short(self, cluster: str, group: str, *, rotating: int, inflight: Collection[str]) -> int:
        """Ready pods the group lacks, its ``rotating`` pods aside: the
        RayCluster's replicas for the group, less its pods that are ready,
        not going and not rotating (``inflight``: uids being rotated). 0
        when the group is unknown. Looks only at the group's own pods."""
        wanted = self.desired.get((cluster, group))
        if wanted is None:
            return 0
        available = sum(1 for uid in self.available.get((cluster, group), ()) if uid not in inflight)
        return max(0, wanted - available - rotating)
