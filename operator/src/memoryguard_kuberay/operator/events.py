"""The closed set of Event reasons the operator posts, in pairs where an
action can succeed or fail (as KubeRay does)."""

from __future__ import annotations

import enum


class EventReason(str, enum.Enum):
    ROTATION_STARTED = "WorkerRotationStarted"
    ROTATION_PLANNED = "WorkerRotationPlanned"  # dry run: what would have happened
    DRAINED = "WorkerDrained"
    DRAIN_FAILED = "WorkerDrainFailed"
    EVICTED = "WorkerEvicted"
    EVICTION_REFUSED = "WorkerEvictionRefused"
    ROTATED = "WorkerRotated"
    ROTATION_FAILED = "WorkerRotationFailed"
    REMEDIATION_APPLIED = "RemediationApplied"
    REMEDIATION_FAILED = "RemediationFailed"
    REMEDIATION_RECOMMENDED = "RemediationRecommended"
    REMEDIATION_EFFECTIVE = "RemediationEffective"
    REMEDIATION_INEFFECTIVE = "RemediationIneffective"  # no effect, or worse
    REMEDIATION_REVERTED = "RemediationReverted"
    REMEDIATION_REVERT_FAILED = "RemediationRevertFailed"
    SIDECAR_INJECTED = "SidecarInjected"
    SIDECAR_INJECTION_FAILED = "SidecarInjectionFailed"
    SIDECAR_REMOVED = "SidecarRemoved"
    SIDECAR_REMOVAL_FAILED = "SidecarRemovalFailed"
    # A RayCluster whose templates MemoryGuard leaves alone (kuberayrules.py):
    # upgradeStrategy Recreate, or owned by a RayService.
    TEMPLATES_HELD = "TemplateChangesWithheld"
    # What was read back from a guard's status (or a RayCluster's records)
    # and refused: it did not meet what the operator itself would have done.
    STATUS_RECORD_DROPPED = "StatusRecordDropped"
    ASK_IGNORED = "RotateAnnotationIgnored"  # a memoryguard.io/rotate value not taken
    INVALID_SPEC = "InvalidSpec"
    # spec.clusterSelector.names names a RayCluster the namespace does not
    # have: said once each time the missing set changes, with the nearest
    # names the namespace has (a typo is the usual cause).
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    # The ladder before a rotation (cycle/laddering.py): a step asked of a
    # pod, its measured effect, and the pressure gone.
    PRESSURE_STEP = "PressureStepAsked"
    PRESSURE_STEP_PLANNED = "PressureStepPlanned"  # dry run: what would have been asked (issue 61, 7)
    PRESSURE_STEP_JUDGED = "PressureStepJudged"
    PRESSURE_EASED = "PressureEased"
    FORENSICS_KEPT = "ForensicsKept"
    FORENSICS_FAILED = "ForensicsFailed"

    @property
    def warning(self) -> bool:
        return self in WARNINGS


WARNINGS = frozenset({EventReason.DRAIN_FAILED, EventReason.EVICTION_REFUSED, EventReason.ROTATION_FAILED,
                      EventReason.REMEDIATION_FAILED, EventReason.REMEDIATION_INEFFECTIVE,
                      EventReason.REMEDIATION_REVERT_FAILED, EventReason.SIDECAR_INJECTION_FAILED,
                      EventReason.SIDECAR_REMOVAL_FAILED, EventReason.INVALID_SPEC,
                      EventReason.TEMPLATES_HELD, EventReason.STATUS_RECORD_DROPPED, EventReason.ASK_IGNORED,
                      EventReason.FORENSICS_FAILED, EventReason.CLUSTER_NOT_FOUND})
