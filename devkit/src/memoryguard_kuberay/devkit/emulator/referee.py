"""The referee of the fault tests: watches every change the emulated API
makes and counts breaches of the rules a guard must keep whatever fails.

It judges from the API's side only (what was written, evicted, deleted)
and from ground truth the test knows (which pods leak, when each pod's
sidecar last gave a good answer), never from what the operator says it did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.status import MAX_RECENT

from .api import EmulatedApi
from .disruption import is_ready

PHASE = C.ANN_PHASE  # the rotation's phase, as the operator writes it


@dataclasses.dataclass
class Referee:
    api: EmulatedApi
    clock: Callable[[], float]
    max_unavailable: int
    stale_after_s: float
    last_good: Callable[[str], float | None]  # pod name -> clock time of its sidecar's last good answer
    include_head: bool = False
    leaking: set[str] = dataclasses.field(default_factory=set)  # pod names replaying a leak
    violations: list[str] = dataclasses.field(default_factory=list)
    started: dict[str, str] = dataclasses.field(default_factory=dict)  # uid -> pod name, rotation started
    evicted: dict[str, str] = dataclasses.field(default_factory=dict)  # uid -> pod name

    def attach(self) -> Referee:
        self.api.observers.append(self.observe)
        return self

    def violate(self, rule: str, detail: str) -> None:
        self.violations.append(f"{rule}: {detail}")

    # -- as it happens ----------------------------------------------------------
    def observe(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        if plural != "pods":
            return
        meta = obj["metadata"]
        uid, name = meta["uid"], meta["name"]
        labels = meta.get("labels") or {}
        if event in ("ADDED", "MODIFIED") and (meta.get("annotations") or {}).get(PHASE) and uid not in self.started:
            self.started[uid] = name
            self.on_rotation_started(name, uid, labels)
        elif event == "EVICTING":
            if uid not in self.started:
                self.violate("eviction without a rotation", f"{name} evicted but never marked for rotation")
            if uid in self.evicted:
                self.violate("two evictions", f"{name} evicted twice")
            self.evicted[uid] = name
            short = self.desired(labels) - self.ready_peers(labels, uid)
            if short > self.max_unavailable:
                self.violate("maxUnavailable", f"evicting {name} leaves its group {short} ready pod(s) short "
                                               f"(maxUnavailable {self.max_unavailable})")

    def on_rotation_started(self, name: str, uid: str, labels: dict[str, str]) -> None:
        if labels.get(C.LABEL_NODE_TYPE) == "head" and not self.include_head:
            self.violate("head", f"rotation of the head pod {name}")
        good, now = self.last_good(name), self.clock()
        if good is None:
            self.violate("missing samples", f"rotation of {name} started before its sidecar ever answered")
        elif now - good > self.stale_after_s:
            self.violate("stale samples", f"rotation of {name} started {now - good:.0f} s (clock) after its "
                                          f"sidecar last answered (staleAfterSeconds {self.stale_after_s:.0f})")
        # Pods of the group that will not serve once this one goes.
        unavailable = self.desired(labels) - self.ready_peers(labels, uid)
        if unavailable > self.max_unavailable:
            self.violate("maxUnavailable", f"rotation of {name} started with {unavailable} pod(s) of its group "
                                           f"unavailable or rotating (maxUnavailable {self.max_unavailable})")

    def ready_peers(self, labels: dict[str, str], uid: str) -> int:
        """Ready pods of the group, other than ``uid``, neither going nor marked for rotation."""
        return sum(1 for p in self.api.objects("pods") if p["metadata"]["uid"] != uid
                   and (p["metadata"].get("labels") or {}).get(C.LABEL_CLUSTER) == labels.get(C.LABEL_CLUSTER)
                   and (p["metadata"].get("labels") or {}).get(C.LABEL_GROUP) == labels.get(C.LABEL_GROUP)
                   and is_ready(p) and not p["metadata"].get("deletionTimestamp")
                   and not (p["metadata"].get("annotations") or {}).get(PHASE))

    def desired(self, labels: dict[str, str]) -> int:
        if labels.get(C.LABEL_NODE_TYPE) == "head":
            return 1
        rc = self.api.get("rayclusters", "default", labels.get(C.LABEL_CLUSTER, ""))
        for g in ((rc or {}).get("spec") or {}).get("workerGroupSpecs") or []:
            if g.get("groupName") == labels.get(C.LABEL_GROUP):
                return int(g.get("replicas", 0))
        return 0

    # -- at the end ---------------------------------------------------------------
    def finish(self, guards: tuple[str, ...] = ("leak-guard",)) -> dict[str, Any]:
        """Checks on the final state; returns the run's figures."""
        plain = [d for d in self.api.deletes if d[0] == "pods"]
        for d in plain:
            self.violate("plain delete", f"pod {d[2]} deleted without the Eviction API")
        # The guard's own record (each rotation Event is also posted on its pod).
        events = [e for e in self.api.objects("events") if e["involvedObject"].get("kind") == "MemoryGuard"]
        rotated = [e for e in events if e["reason"] == "WorkerRotated"]
        failed = [e for e in events if e["reason"] == "WorkerRotationFailed"]
        inflight: set[str] = set()
        recent: list[dict[str, Any]] = []
        total, complete = 0, True
        for guard in guards:
            rots = ((self.api.get("memoryguards", "default", guard) or {}).get("status") or {}).get("rotations") or {}
            inflight |= {str(r.get("uid")) for r in rots.get("inFlight") or []}
            recent += rots.get("recent") or []
            total += int(rots.get("total") or 0)
            complete = complete and len(rots.get("recent") or []) < MAX_RECENT  # status keeps the last MAX_RECENT
        for uid, name in self.started.items():
            said = [e for e in rotated + failed if name in e.get("message", "")]
            kept = [r for r in recent if r.get("pod") == name]
            if uid in inflight:
                continue  # still going when the run ended: the status says so
            if complete and not kept:
                self.violate("unreported", f"rotation of {name} neither finished, failed nor in flight in status")
            if not said:
                self.violate("no Event", f"rotation of {name} ended without a WorkerRotated/Failed Event")
            if any(r.get("outcome") == "failed" for r in kept) and not any(
                    any(why in e.get("message", "") for why in ("no replacement", "failed", "not evicted"))
                    for e in failed):
                self.violate("no reason", f"failed rotation of {name} reported without a reason")
        if total != len(rotated):
            self.violate("status", f"rotations.total {total} but {len(rotated)} WorkerRotated Events")
        false = sorted(n for n in self.started.values() if n not in self.leaking)
        return {"started": len(self.started), "evictions": len(self.evicted), "rotated": len(rotated),
                "failed": len(failed), "false": len(false), "in_flight": len(inflight),
                "violations": len(self.violations)}
