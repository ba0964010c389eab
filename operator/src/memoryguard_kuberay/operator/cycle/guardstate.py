"""What a guard's loop works with, apart from the loop itself (guarding.py):
the operator's context (made once at startup, kept in kopf's memo), one
guard as the loop keeps it between cycles (``Guard``: who it is, its
``Memory`` of the policy windows and of what it last wrote to the objects,
read back at start, and the evidence collections under way), and one
cycle's findings (``Run``, ``Cycle``: made afresh each cycle, handed from
step to step as arguments and dropped at its end).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.trust import Trust
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.api.podcache import PodCaches
from memoryguard_kuberay.operator.clock import Clock
from memoryguard_kuberay.operator.cycle import cadence, guardroster
from memoryguard_kuberay.operator.cycle.eventqueue import EventPoster
from memoryguard_kuberay.operator.cycle.judging import PodState
from memoryguard_kuberay.operator.forensics import collect as forensics
from memoryguard_kuberay.operator.forensics.evidence import Evidence
from memoryguard_kuberay.operator.guardspec import DEFAULT_SIDECAR_IMAGE, GuardSpec
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.rayclusters import clusters
from memoryguard_kuberay.operator.rayclusters.groups import Groups
from memoryguard_kuberay.operator.rayclusters.reviews import Reviews
from memoryguard_kuberay.operator.rotations.drain import Drainer
from memoryguard_kuberay.operator.rotations.ledger import Ledger
from memoryguard_kuberay.operator.rotations.remembered import Remembered
from memoryguard_kuberay.operator.sharding.shards import AllShards, ShardKeeper
from memoryguard_kuberay.operator.sidecars import podhttp

POD_CONNECTIONS = 256  # every guard's polls at once
KEPT_CONNECTIONS = 50_000  # idle connections to sidecars at most (descriptors), within the process's own limit
OTHER_DESCRIPTORS = 1024  # the API's connections and watches, the metrics server, drains, files: far fewer


def kept_connections() -> int:
    """Idle connections the pool may keep: the descriptors this process may
    open, less the polls in flight and a reserve for everything else. (Half
    of them, before: under a limit of 20,000 a replica of 20,000 pods kept
    9,744 and opened a connection for every other poll.) Past the cap a
    poll's connection is closed after it; out of descriptors, a poll fails
    and the next one tries again (podhttp.py)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(0, min(KEPT_CONNECTIONS, soft - POD_CONNECTIONS - OTHER_DESCRIPTORS))


@dataclasses.dataclass
class OperatorContext:
    """What every guard's loop uses, made once at startup (kept in kopf's memo)."""

    kube: Kube
    events: EventPoster
    drainer: Drainer
    clock: Clock
    metrics: OperatorMetrics
    pods: PodCaches  # every guard's pods, from one watch per namespace
    sidecar_image: str = DEFAULT_SIDECAR_IMAGE
    trust: Trust | None = None  # the installer's limits on guards (trust.py)
    ray_forensics: bool = True  # Ray's GCS is reachable (MEMORYGUARD_DRAIN): list objects by call site
    # The server runs native sidecars (1.29+, read once at startup): the
    # sidecar is injected as one, so a pod with restartPolicy Never (Ray's
    # autoscaler v2) restarts it (kuberayrules.py).
    native_sidecars: bool = False
    # The pod admission webhook is served (webhook.py): pods get the sidecar
    # as they are created, and no RayCluster's templates are patched for it.
    admission: bool = False
    roster: guardroster.GuardRoster = dataclasses.field(default=None)  # type: ignore[assignment]
    # Which guards this replica acts on (all, or its shards' on Leases).
    shards: AllShards | ShardKeeper = dataclasses.field(default_factory=AllShards)
    # Connections to pods at once, across every guard: each is a descriptor.
    pod_slots: asyncio.Semaphore = dataclasses.field(default_factory=lambda: asyncio.Semaphore(POD_CONNECTIONS))
    # And per namespace (a tenant): pods that hang, however many guards poll
    # them, hold at most POLL_CONCURRENCY of the POD_CONNECTIONS.
    namespace_slots: dict[str, asyncio.Semaphore] = dataclasses.field(default_factory=dict)
    pod_pool: podhttp.Pool = dataclasses.field(default_factory=lambda: podhttp.Pool(max_idle=kept_connections()))
    probe_slots: asyncio.Semaphore = dataclasses.field(
        default_factory=lambda: asyncio.Semaphore(forensics.MAX_PROBES))  # rayprobe processes at once

    def __post_init__(self) -> None:
        if self.roster is None:  # every namespace's guards, listed once for all its guards
            self.roster = guardroster.GuardRoster(self.kube)


@dataclasses.dataclass(frozen=True)
class Cycle:
    """What the cycle found of the guard's clusters and pods."""

    spec: GuardSpec
    selected: clusters.Selected
    pods: list[pi.PodInfo]  # every pod of the selected clusters
    guarded: list[pi.PodInfo]  # those this guard judges
    groups: Groups
    guard_uid: str = ""  # the guard's own uid: its evidence's ConfigMaps are owned by it

    @functools.cached_property
    def by_name(self) -> dict[str, Mapping[str, Any]]:
        """The selected RayClusters by name (looked up once per pod), as
        the server last answered: where the cycle patched one, its answer
        (``saw``)."""
        return {c["metadata"]["name"]: c for c in self.selected.clusters}

    def saw(self, name: str, rc: Mapping[str, Any]) -> None:
        """The server's answer to the cycle's own patch of a RayCluster: the
        rest of the cycle patches from it (its resourceVersion, the
        template as now written). The one thing a cycle's findings take
        in after they are made."""
        self.by_name[name] = rc

    def gcs_address(self, cluster: str) -> str | None:
        """Its head's GCS, found when asked: it scans the pods, so only for
        the clusters a rotation or a forensic probe is in."""
        rc = self.by_name.get(cluster)
        return clusters.gcs_address(rc, self.pods) if rc is not None else None


@dataclasses.dataclass(frozen=True)
class Run:
    """What a cycle starts from: the guard as kopf handed it, and the time
    it began (operator clock). What the steps find is not kept here: each
    observing step returns it and the cycle passes it on (guarding.py)."""

    body: Mapping[str, Any]
    now: float

    @property
    def generation(self) -> int | None:
        return (self.body.get("metadata") or {}).get("generation")

    @property
    def uid(self) -> str:
        return str((self.body.get("metadata") or {}).get("uid", ""))


@dataclasses.dataclass
class Memory:
    """What a guard keeps between cycles: the policy windows, and what it
    last wrote to the objects (read back from the guard's status on the
    first cycle, so a restarted operator goes on where it was)."""

    tracks: dict[str, PodState] = dataclasses.field(default_factory=dict)
    settings: PolicySettings | None = None  # the windows' settings: new ones start new windows
    ledger: Ledger = dataclasses.field(default_factory=Ledger)
    remembered: Remembered = dataclasses.field(default_factory=Remembered)
    reviews: Reviews = dataclasses.field(default_factory=Reviews)  # applied remediations, judged
    status: dict[str, Any] = dataclasses.field(default_factory=dict)  # as last written
    invalid_generation: int | None = None  # the spec generation already reported invalid

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Memory:
        return cls(ledger=Ledger.from_status(status), remembered=Remembered.from_status(status),
                   reviews=Reviews.from_status(status), status=json.loads(json.dumps(status)))


@dataclasses.dataclass
class Guard:
    """One MemoryGuard as its loop keeps it between cycles (one per guard
    this replica holds; dropped when its shard moves or it is deleted):
    nothing of one cycle is kept on it."""

    ctx: OperatorContext
    namespace: str
    name: str
    memory: Memory | None = None  # read back from the guard's status on the first cycle
    evidence: Evidence = dataclasses.field(default_factory=Evidence)  # collections under way (evidence.py)

    @functools.cached_property
    def phase(self) -> float:
        """Its place within the sampling interval (cadence.py): from its name alone."""
        return cadence.phase_of(self.namespace, self.name)

    @property
    def mem(self) -> Memory:
        assert self.memory is not None, "the cycle reads the memory back first"
        return self.memory
