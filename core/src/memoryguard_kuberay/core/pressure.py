"""What a pod is asked by the ladder (policy/ladder.py), as the operator
writes it on the pod (the ``memoryguard.io/pressure`` annotation) and as
the pod's containers read it (a downward API volume shows the annotation as
the file ``/etc/memoryguard/pressure``; the kubelet refreshes it, within
about a minute, its sync period and cache's).

One JSON object, at most a few hundred bytes:

    {"guard": "my-guard", "level": "High", "step": "Shed", "since": "2026-12-05T10:00:00.000000Z",
     "projectedOOMSeconds": 5400, "usedBytes": 30064771072,
     "creepBytesPerHour": 1073741824, "effect": null, "objectStoreFraction": 0.962}

``level``: Normal, Elevated, High, Critical; ``step``: None, Reclaim, Shed,
Replace (what the workload is asked to do); ``since``: when the step was
asked; ``projectedOOMSeconds``: the policy's projection when the level or
the step last changed (null: no projection); ``effect``: the step's
measured effect once judged (Effective, NoEffect); ``objectStoreFraction``:
the object store's occupancy when the step was asked, where the store was
one of its causes (absent otherwise, and in annotations written before it
was added).

The format only, purely computational: the operator writes it, and
``memoryguard_kuberay.pressure`` (the workload's helper: ``on_pressure``,
``reclaim_ray``) reads it in the pod.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy.ladder import Effect, Level, Rung

# The words the ladder decides in, as it spells them.
LEVELS = tuple(v.value for v in Level)
STEPS = tuple(v.value for v in Rung)
EFFECTS = tuple(v.value for v in Effect)
MAX_BYTES = 512  # the operator writes about 250; more is not its writing
DEFAULT_PATH = f"{C.PRESSURE_DIR}/{C.PRESSURE_FILE}"


@dataclasses.dataclass(frozen=True)
class Pressure:
    level: str = "Normal"
    step: str = "None"
    since: str | None = None
    projected_oom_s: float | None = None
    used_bytes: int | None = None
    creep_bytes_per_h: float | None = None
    effect: str | None = None
    guard: str | None = None  # the MemoryGuard that asked (its finalizer takes the annotation back)
    store_fraction: float | None = None

    def to_json(self) -> str:
        doc: dict[str, object] = {
            "guard": self.guard, "level": self.level, "step": self.step, "since": self.since,
            "projectedOOMSeconds": _num(self.projected_oom_s), "usedBytes": self.used_bytes,
            "creepBytesPerHour": _num(self.creep_bytes_per_h), "effect": self.effect}
        if self.store_fraction is not None and math.isfinite(self.store_fraction):
            doc["objectStoreFraction"] = round(self.store_fraction, 4)
        return json.dumps(doc, separators=(",", ":"))


NORMAL = Pressure()


def _num(x: float | None) -> int | None:
    return None if x is None or not math.isfinite(x) else round(x)


def _finite(x: Any, lo: float, hi: float) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not lo <= x <= hi:
        return None
    return float(x)


def parse(text: str | None) -> Pressure | None:
    """The annotation's (or the file's) JSON; None when it is not one this
    module could have written (too long, not JSON, a level or step it does
    not know). An empty file is Normal: the annotation is not set."""
    if text is None:
        return None
    if not text.strip():
        return NORMAL
    if len(text) > MAX_BYTES:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("level") not in LEVELS or doc.get("step") not in STEPS:
        return None
    since = doc.get("since")
    effect = doc.get("effect")
    guard = doc.get("guard")
    used = _finite(doc.get("usedBytes"), 0, 2.0**62)
    return Pressure(level=doc["level"], step=doc["step"],
                    since=since if isinstance(since, str) and len(since) <= 40 else None,
                    projected_oom_s=_finite(doc.get("projectedOOMSeconds"), 0, 1e9),
                    used_bytes=None if used is None else int(used),
                    creep_bytes_per_h=_finite(doc.get("creepBytesPerHour"), -2.0**62, 2.0**62),
                    effect=effect if effect in EFFECTS else None,
                    guard=guard if isinstance(guard, str) and len(guard) <= 253 else None,
                    # Ray's fallback allocation can take a store past its capacity: up to ten times is a figure.
                    store_fraction=_finite(doc.get("objectStoreFraction"), 0, 10))


__all__ = ["DEFAULT_PATH", "NORMAL", "Pressure", "parse"]
