"""What one step of a guard's cycle decided, as a value: the Events to
post, the pieces of status to write, and whether the cycle ends here. A
step returns it and calls nothing back up; the guard's loop (guarding.py)
writes the status first and posts the Events after, so whoever reads an
Event finds its record already written. Purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.operator.events import EventReason

# A printer column's widest text (`kubectl get memoryguards -o wide`): the
# longest reason and a whole pod name (63, KubeRay's with their suffix) fit
# (at 60 KubeRay's pod names lost their suffix: issue 61, 7).
BRIEF_MAX = 100


@dataclasses.dataclass(frozen=True)
class Say:
    """One Event, on the guard and on each object in ``about`` (the pod a
    rotation is about, the RayCluster a patch changed), so that ``kubectl
    describe`` of either says what MemoryGuard did to it."""

    reason: EventReason
    message: str
    about: tuple[Mapping[str, Any], ...] = ()

    @property
    def last_action(self) -> str:
        return f"{self.reason.value}: {self.message}"[:256]

    @property
    def brief(self) -> str:
        """The printer column's text: the reason and the object acted on."""
        subject = next((str((o.get("metadata") or {}).get("name", "")) for o in self.about), "")
        return f"{self.reason.value} {subject}".strip()[:BRIEF_MAX]


def pod_ref(name: str, uid: str) -> dict[str, Any]:
    """An involvedObject for a pod (the Event lands in ``kubectl describe pod``)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "uid": uid}}


def say(reason: EventReason, message: str, *about: Mapping[str, Any]) -> Say:
    return Say(reason, message, tuple(about))


@dataclasses.dataclass(frozen=True)
class Decided:
    says: tuple[Say, ...] = ()
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # pieces to merge into the status now
    # The cycle ends after this step, the next starting this many seconds
    # later (operator clock); None: go on to the next step.
    end_in_s: float | None = None
    degraded: str | None = None  # with end_in_s: the Degraded reason for the metrics

    def __add__(self, other: Decided) -> Decided:
        return Decided(self.says + other.says, {**self.status, **other.status},
                       other.end_in_s if other.end_in_s is not None else self.end_in_s,
                       other.degraded or self.degraded)


NOTHING = Decided()
