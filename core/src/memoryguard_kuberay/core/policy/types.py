"""Decision types: actions, the closed set of reasons, evidence, and what was
done to a pod and its group before (the history the caller supplies)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Action(str, enum.Enum):
    NONE = "none"
    REMEDIATE = "remediate"
    ROTATE = "rotate"


class Reason(str, enum.Enum):
    # Nothing to do.
    HEALTHY = "Healthy"
    WARMING_UP = "WarmingUp"
    NO_LIMIT = "NoMemoryLimit"
    NO_SAMPLES = "NoSamples"
    SAMPLES_STALE = "SamplesStale"
    ROTATION_DEFERRED = "RotationDeferred"
    ROTATION_IN_PROGRESS = "RotationInProgress"
    NEAR_LIMIT = "NearLimit"  # at criticalPercent, not held long enough yet: never "Healthy"
    # Rotate.
    OOM_KILLED = "OOMKillSeen"
    RAPID_GROWTH = "RapidGrowth"
    CRITICAL_USAGE = "CriticalUsage"
    MEMORY_PRESSURE = "MemoryPressure"
    PROJECTED_OOM = "ProjectedOOM"
    NODE_MEMORY_RUNNING_OUT = "NodeMemoryRunningOut"  # no limit: the node's available memory
    OBJECT_STORE_FILLING = "ObjectStoreFilling"
    OBJECT_STORE_FULL = "ObjectStoreFull"
    USER_REQUESTED = "UserRequested"
    LADDER_EXHAUSTED = "ReclaimAndShedIneffective"  # the ladder's last rung (ladder.py)
    # Remediate.
    GROWTH_PLATEAU = "GrowthPlateau"


@dataclasses.dataclass(frozen=True, slots=True)  # a pod's last one is kept: one a pod
class Evidence:
    """The numbers behind a decision. Every field may be unknown (None)."""

    used_bytes: int | None = None  # anon + shmem + the kernel's unreclaimable part: what reclaim cannot free
    working_set_bytes: int | None = None  # memory.current - inactive_file
    limit_bytes: int | None = None
    slope_bytes_per_h: float | None = None
    projected_oom_s: float | None = None  # seconds from now until the limit
    store_fraction: float | None = None
    store_projected_full_s: float | None = None
    spilled_bytes: int | None = None
    psi_some_avg10_pct: float | None = None
    psi_full_avg10_pct: float | None = None
    oom_kills_seen: int | None = None
    held_for_s: float | None = None
    # No limit: the ceiling the verdict was judged against instead (in use
    # plus the node's available memory); left out of the dict when None.
    node_ceiling_bytes: int | None = None
    # A new climb's projected OOM while the policy watches it, one tail
    # before acting on it (projection.onset_projection): not acted on, but
    # what the status and the metrics show while ``projected_oom_s`` is
    # unknown, so that an alert on them leads the rotation (issue 58, 3).
    # Left out of the dict when None.
    watched_oom_s: float | None = None

    @property
    def oom_outlook_s(self) -> float | None:
        """The projection acted on, else the one watched: what users are shown."""
        return self.projected_oom_s if self.projected_oom_s is not None else self.watched_oom_s

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()
                if k not in _OMITTED_WHEN_NONE or v is not None}


_OMITTED_WHEN_NONE = ("node_ceiling_bytes", "watched_oom_s")


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason
    message: str
    evidence: Evidence
    dry_run: bool = False  # a rotation the caller must only report

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "reason": self.reason.value,
            "message": self.message,
            "evidence": self.evidence.to_dict(),
            "dry_run": self.dry_run,
        }


@dataclasses.dataclass(frozen=True)
class RotationHistory:
    """What was done before, as the caller knows it (from annotations and
    status). Times in the same clock as the samples."""

    is_head: bool = False
    pod_rotation_in_flight: bool = False
    group_in_flight: int = 0  # pods of this group rotating now
    # Pods the group is short of, rotations aside: missing (not yet replaced)
    # or not ready. They count against maxUnavailable like rotations do, so a
    # group KubeRay has not refilled is not thinned further.
    group_short: int = 0
    group_last_rotation_s: float | None = None
    guard_rotations_last_hour: int = 0
    remediation_advised: bool = False  # a plateau was already reported
    user_requested: bool = False  # memoryguard.io/rotate=now
    # The ladder's reclaim and shed did not move a pod heading for its limit
    # (ladder.py): a rotation wanted, through the same gates.
    ladder_replace: bool = False
    # Pods that go with this one: the hosts of its multi-host replica
    # (KubeRay deletes a replica's other hosts once one is gone), 1 alone.
    hosts_per_replica: int = 1
