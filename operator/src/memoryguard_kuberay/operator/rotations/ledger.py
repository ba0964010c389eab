"""A guard's record of its rotations: the steps (``Phase``), how a step
ends (``Outcome``), each rotation in progress (``InFlight``), and the ledger
itself, which persists to and restores from the guard's status
(``status.rotations``) and adopts rotations a restarted operator finds only
as marks on pods. Purely computational: ``rotation.py`` acts on the API, the
guard loop writes what ``Ledger.to_status`` gives.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.clock import micro_time, parse_time
from memoryguard_kuberay.operator.decided import Say

log = logging.getLogger("memoryguard_kuberay.operator")
MAX_RECENT = 20  # finished rotations kept in status.rotations.recent
HOUR_S = 3600.0
# How far ahead of this operator's clock a time read back from the status may
# be and still be believed (another replica's clock). A time further ahead
# was written by someone else: believed, one dated 9999 counted against the
# hourly cap for ever and switched the guard off (issue 63, 2).
CLOCK_SKEW_S = 60.0


def _believable(t: float, now: float) -> bool:
    return t - now <= CLOCK_SKEW_S
MAX_EVICTIONS_KEPT = 1000  # the spec's largest maxPerHour: more in an hour is never allowed anyway


class Phase(str, enum.Enum):
    """The steps of a rotation, in order (the pod's ``rotation-phase`` mark)."""

    DRAINING = "draining"
    EVICTING = "evicting"
    REPLACING = "replacing"


class OutcomeKind(str, enum.Enum):
    GOING_ON = "going-on"  # the rotation continues (maybe at a later step)
    ROTATED = "rotated"  # a replacement is ready
    FAILED = "failed"  # given up: no replacement in time, or evictions refused past the deadline


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind = OutcomeKind.GOING_ON
    message: str = ""  # for an ended rotation, the Event's text; else a problem to log, or ""
    eviction_timed_out: bool = False  # FAILED because evictions were refused past the deadline
    says: tuple[Say, ...] = ()  # Events of the step taken (drained, evicted, refused)

    @property
    def ended(self) -> bool:
        return self.kind is not OutcomeKind.GOING_ON


@dataclasses.dataclass
class InFlight:
    """One rotation in progress, as kept in ``status.rotations.inFlight``."""

    pod: str
    uid: str
    cluster: str
    group: str
    reason: str
    requested_at: float
    phase: Phase
    evicted_at: float | None = None
    refused: int = 0  # evictions refused so far (429)
    last_attempt: float | None = None
    # Pods of the group when the pod went: a replacement is a ready pod not among them.
    peers: tuple[str, ...] = ()
    evicting_since: float | None = None  # when the first eviction was asked (the deadline counts from it)
    last_refusal: str = ""  # what the server said when it last refused (names the PDB when known)
    # When the evicted pod was first seen gone: KubeRay makes the replacement
    # only then (it counts a Terminating pod), so its wait counts from here.
    gone_at: float | None = None
    # Ray accepted the node's drain: the eviction asks only a short grace
    # period (constants.DRAINED_GRACE_SECONDS), not the pod's own.
    drained: bool = False

    @property
    def reason_code(self) -> str:
        """The policy's reason alone (``ProjectedOOM``): ``reason`` is the
        one text a rotation carries, on the pod's annotation and in status,
        as acting.rotate composes it (``<Reason>: <message>``)."""
        return self.reason.split(":", 1)[0]

    def to_status(self) -> dict[str, Any]:
        return {"pod": self.pod, "uid": self.uid, "cluster": self.cluster, "group": self.group,
                "reason": self.reason, "requestedAt": micro_time(self.requested_at), "phase": self.phase.value,
                "evictedAt": _time(self.evicted_at), "refused": self.refused, "lastAttempt": _time(self.last_attempt),
                "peers": list(self.peers), "evictingSince": _time(self.evicting_since),
                "lastRefusal": self.last_refusal, "goneAt": _time(self.gone_at),
                "drained": self.drained}

    @classmethod
    def from_status(cls, d: Mapping[str, Any]) -> InFlight | None:
        try:
            phase = Phase(d.get("phase"))
            requested_at = parse_time(d["requestedAt"])
            if requested_at is None:
                return None
            return cls(pod=str(d["pod"]), uid=str(d["uid"]), cluster=str(d["cluster"]), group=str(d["group"]),
                       reason=str(d.get("reason", "")), requested_at=requested_at,
                       phase=phase, evicted_at=parse_time(d.get("evictedAt")),
                       refused=int(d.get("refused") or 0),
                       last_attempt=parse_time(d.get("lastAttempt")),
                       peers=tuple(str(u) for u in d.get("peers") or []),
                       evicting_since=parse_time(d.get("evictingSince")),
                       last_refusal=str(d.get("lastRefusal") or "")[:512],
                       # Not finite reads as none: an infinite goneAt would hold a group's slot for ever.
                       gone_at=parse_time(d.get("goneAt")),
                       drained=d.get("drained") is True)
        except (KeyError, TypeError, ValueError):
            return None


def _time(t: float | None) -> str | None:
    """A time in the status: RFC 3339, as the Kubernetes objects beside it
    (statuses before 0.1.0 held unix seconds; both are read back)."""
    return None if t is None else micro_time(t)


@dataclasses.dataclass
class Ledger:
    inflight: dict[str, InFlight] = dataclasses.field(default_factory=dict)  # pod uid -> rotation
    recent: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # the last MAX_RECENT that ended
    total: int = 0  # rotations that ended with a ready replacement
    # When the rotations that have ended had evicted their pod, within the
    # last hour: the hourly cap counts every eviction, whatever came of it
    # (issue 23: it saw only the last 20 recorded, and not those that failed).
    evicted_at: list[float] = dataclasses.field(default_factory=list)
    # Rotations read back from the status and not yet checked against the
    # pods: whoever may patch a guard's status could have written them
    # (issue 44, 2), so none evicts before ``vet`` has passed it.
    unvetted: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Ledger:
        rot = status.get("rotations") or {}
        inflight = {}
        for d in rot.get("inFlight") or []:
            r = InFlight.from_status(d) if isinstance(d, Mapping) else None
            if r is not None:
                inflight[r.uid] = r
        recent = [r for r in rot.get("recent") or [] if isinstance(r, dict)][-MAX_RECENT:]
        try:
            total = int(rot.get("total") or 0)
        except (TypeError, ValueError):
            total = 0
        evicted: list[float] = []
        for t in (rot.get("evictedLastHour") or [])[-MAX_EVICTIONS_KEPT:] if isinstance(
                rot.get("evictedLastHour"), list) else []:
            if (at := parse_time(t)) is not None:
                evicted.append(at)
        return cls(inflight, recent, total, evicted, set(inflight))

    def vet(self, pods: Iterable[pi.PodInfo], *, guard: str, guarded: Callable[[pi.PodInfo], bool],
            max_unavailable: int) -> list[str]:
        """Rotations read back from the status, held to what the operator
        itself would have started: one before its eviction must be of a pod
        this guard guards (the head only where it includes it), carry this
        guard's marks (written on the pod before the status, always), and
        fit the group's maxUnavailable (the oldest kept). Those that do not
        are dropped; returns why, for each. A rotation past its eviction
        evicts nothing more and is kept."""
        by_uid = {p.uid: p for p in pods}
        dropped: list[str] = []
        kept: dict[tuple[str, str], int] = {}
        for uid in sorted(self.unvetted & set(self.inflight), key=lambda u: self.inflight[u].requested_at):
            rot, pod = self.inflight[uid], by_uid.get(uid)
            if rot.phase in (Phase.DRAINING, Phase.EVICTING) and pod is not None:
                why = ("it is not a pod this guard guards" if not guarded(pod) or (pod.cluster, pod.group)
                       != (rot.cluster, rot.group) else
                       "the pod does not carry this guard's rotation marks"
                       if pod.annotations.get(C.ANN_GUARD) != guard or not pod.rotation_phase else
                       f"its group has {max_unavailable} rotation(s) in flight already (maxUnavailable)"
                       if kept.get((pod.cluster, pod.group), 0) >= max_unavailable else None)
                if why:
                    del self.inflight[uid]
                    dropped.append(f"the status's rotation of {rot.pod[:253]} was dropped, never carried out: "
                                   f"{why}")
                    continue
            kept[(rot.cluster, rot.group)] = kept.get((rot.cluster, rot.group), 0) + 1
        self.unvetted.clear()
        return dropped

    def to_status(self) -> dict[str, Any]:
        last = self.recent[-1] if self.recent else {}
        return {"total": self.total, "inFlight": [r.to_status() for r in self.inflight.values()],
                "recent": self.recent[-MAX_RECENT:], "lastPod": last.get("pod"), "lastTime": last.get("finishedAt"),
                "lastReason": last.get("reason"),
                "evictedLastHour": [micro_time(t) for t in self.evicted_at[-MAX_EVICTIONS_KEPT:]]}

    def rotations_last_hour(self, now: float) -> int:
        """For the hourly cap: rotations in flight, and those ended whose pod
        was evicted within the hour (older times are dropped here)."""
        self.evicted_at = [t for t in self.evicted_at if now - t < HOUR_S and _believable(t, now)
                           ][-MAX_EVICTIONS_KEPT:]
        return len(self.inflight) + len(self.evicted_at)

    def rotating_in(self, cluster: str, group: str) -> int:
        return sum(1 for r in self.inflight.values() if (r.cluster, r.group) == (cluster, group))

    def adopt(self, pods: Iterable[pi.PodInfo], *, guard: str, max_unavailable: int, now: float) -> None:
        """A pod marked by this guard but missing from the ledger: the
        operator stopped between marking it and writing the status. Marks
        anyone with pod patch rights could have written are adopted only at
        a known step and within the group's budget, so annotations alone
        can never drive more evictions at once."""
        for p in pods:
            if p.annotations.get(C.ANN_GUARD) != guard or not p.rotation_phase or p.uid in self.inflight:
                continue
            try:
                phase = Phase(p.rotation_phase)
            except ValueError:
                phase = None
            if phase is None or self.rotating_in(p.cluster, p.group) >= max_unavailable:
                log.warning("%s: rotation marks on %s (phase %r) not adopted: unknown step or the group is at "
                            "maxUnavailable", guard, p.name, p.rotation_phase[:40])
                continue
            at = parse_time(p.annotations.get(C.ANN_REQUESTED_AT))
            self.inflight[p.uid] = InFlight(pod=p.name, uid=p.uid, cluster=p.cluster, group=p.group,
                                            reason=p.annotations.get(C.ANN_REASON, ""),
                                            requested_at=now if at is None else at, phase=phase)

    def end(self, uid: str, outcome: Outcome, *, now: float) -> InFlight:
        """Move an ended rotation from in flight to the recent ones."""
        rot = self.inflight.pop(uid)
        self.total += 1 if outcome.kind is OutcomeKind.ROTATED else 0
        if rot.evicted_at is not None:
            self.evicted_at.append(rot.evicted_at)
        self.recent.append({"pod": rot.pod, "group": rot.group, "cluster": rot.cluster,
                            "reason": rot.reason_code, "requestedAt": micro_time(rot.requested_at),
                            "finishedAt": micro_time(now), "outcome": outcome.kind.value})
        self.recent = self.recent[-MAX_RECENT:]
        return rot

    def starts(self, now: float, *, group: tuple[str, str] | None = None) -> list[float]:
        """When rotations began: those in flight and the recent ones (of one
        group), for the group's cooldown (none from the future: a start
        dated ahead would hold the cooldown for ever)."""
        out = [r.requested_at for r in self.inflight.values() if group is None or (r.cluster, r.group) == group]
        for r in self.recent:
            if group is not None and (r.get("cluster"), r.get("group")) != group:
                continue
            if (at := parse_time(r.get("requestedAt"))) is not None:
                out.append(at)
        return [t for t in out if _believable(t, now)]
