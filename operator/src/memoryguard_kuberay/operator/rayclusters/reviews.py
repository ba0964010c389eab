"""The reviews of a guard's applied remediations: for each (cluster, group,
kind) patched, when it was applied, the env it set (a pod carrying it runs
the remediated template), each pod's last creep on either side, and the
verdict once given (core/policy/efficacy.py judges). Kept in the guard's
status (``status.remediations``) and read back after a restart, bounded
whatever the status holds. Purely computational.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from memoryguard_kuberay.core.policy.efficacy import Review, Verdict, judge
from memoryguard_kuberay.operator.clock import iso

# The status holds them all: 20 reviews of 2 x 20 pods stay within about 40 KiB.
MAX_REVIEWS = 20
MAX_PODS = 20  # creeps kept per side of one review (a median over 20 pods says what it can)
MIB = 1024**2
REVIEWED_KINDS = frozenset({"jemalloc"})  # judged by memory creep; spilling acts on the store, call sites on nothing
_SEP = "/"
Key = tuple[str, str, str]  # (cluster, group, kind)


@dataclasses.dataclass
class Open:
    applied_at: float  # operator clock
    env: dict[str, str]
    before: dict[str, float] = dataclasses.field(default_factory=dict)  # pod uid -> creep, bytes an hour
    after: dict[str, float] = dataclasses.field(default_factory=dict)
    review: Review | None = None  # the last judgement (pending, or the verdict)
    reverted: str = ""  # "": not asked; else what the revert did

    @property
    def decided(self) -> bool:
        return self.review is not None and self.review.verdict is not Verdict.PENDING

    def observe(self, uid: str, env: Mapping[str, str], creep: float | None) -> None:
        """A pod of the group and its creep (None: no trend yet): on the
        remediated template when its env holds what the remediation set."""
        if creep is None or not math.isfinite(creep):
            return
        side = self.after if all(env.get(k) == v for k, v in self.env.items()) else self.before
        if uid in side or len(side) < MAX_PODS:
            side[uid] = creep

    def judge(self, *, now: float, noise_bytes_per_h: float, min_pods: int, after_s: float) -> Review:
        self.review = judge(list(self.before.values()), list(self.after.values()),
                            noise_bytes_per_h=noise_bytes_per_h, min_pods=min_pods,
                            watched_s=now - self.applied_at, review_after_s=after_s)
        return self.review


def _floats(raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k)[:64]: float(v) for k, v in list(raw.items())[:MAX_PODS]
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


@dataclasses.dataclass
class Reviews:
    open: dict[Key, Open] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Reviews:
        raw = status.get("remediations")
        out = cls()
        if not isinstance(raw, Mapping):
            return out
        for key, doc in list(raw.items())[:MAX_REVIEWS]:
            parts = tuple(str(key).split(_SEP))
            if len(parts) != 3 or not all(parts) or not isinstance(doc, Mapping):
                continue
            env, at = doc.get("env"), doc.get("appliedAtSeconds")
            if not isinstance(env, Mapping) or not isinstance(at, (int, float)) or isinstance(at, bool):
                continue
            o = Open(float(at), {str(k)[:128]: str(v)[:1024] for k, v in list(env.items())[:8]},
                     _floats(doc.get("before")), _floats(doc.get("after")),
                     reverted=str(doc.get("reverted") or "")[:400])
            verdict = doc.get("verdict")
            if verdict in {v.value for v in Verdict} and verdict != Verdict.PENDING.value:
                o.review = Review(Verdict(verdict), str(doc.get("message") or "")[:400])
            out.open[(parts[0], parts[1], parts[2])] = o
        return out

    def start(self, key: Key, env: Mapping[str, str], *, now: float,
              creeps: Iterable[tuple[str, float | None]]) -> None:
        """A remediation just applied: the group's pods as they were (their
        creep so far) make the "before" side."""
        if key in self.open or len(self.open) >= MAX_REVIEWS or key[2] not in REVIEWED_KINDS:
            return
        o = Open(now, dict(env))
        for uid, creep in creeps:
            if creep is not None and math.isfinite(creep) and len(o.before) < MAX_PODS:
                o.before[uid] = creep
        self.open[key] = o

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (cluster, group, kind), o in sorted(self.open.items()):
            r = o.review
            out[_SEP.join((cluster, group, kind))] = {
                "appliedAt": iso(o.applied_at), "appliedAtSeconds": round(o.applied_at, 3), "env": dict(o.env),
                # In whole MiB an hour: the status is written only when it changed.
                "before": {k: round(v / MIB) * MIB for k, v in sorted(o.before.items())},
                "after": {k: round(v / MIB) * MIB for k, v in sorted(o.after.items())},
                "verdict": (r.verdict if r else Verdict.PENDING).value, "message": r.message if r else "",
                **({"reverted": o.reverted} if o.reverted else {}),
            }
        return out
