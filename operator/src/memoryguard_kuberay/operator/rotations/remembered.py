"""What a guard remembers of what it has said and done, besides its
rotations (ledger.py): kept in its status (``status.remembered``) and read
back when the operator starts, so a restart posts no Event twice and feeds
the policy the same inputs (issue 23: these lived only in memory).

- ``planned``: pods a dry run already reported as ones it would rotate;
- ``remediated``: (cluster, group, kind) already patched or recommended;
- ``advised``: (cluster, group) whose plateau the policy already advised on
  (a policy input: it advises once per group, as ``simulate`` once per trace);
- ``ignored``: pods whose ``memoryguard.io/rotate`` value the operator does
  not take, already told so (a Warning once a pod).

Bounded whatever the status holds. Purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

MAX_ITEMS = 1000
_SEP = "/"  # cluster and group names are DNS labels and label values: no '/'


def _strings(raw: Any, parts: int) -> set[tuple[str, ...]]:
    if not isinstance(raw, list):
        return set()
    out: set[tuple[str, ...]] = set()
    for item in raw[:MAX_ITEMS]:
        if isinstance(item, str) and len(item) <= 256:
            split = tuple(item.split(_SEP))
            if len(split) == parts and all(split):
                out.add(split)
    return out


@dataclasses.dataclass
class Remembered:
    planned: set[str] = dataclasses.field(default_factory=set)  # pod uids
    remediated: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    advised: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    ignored: set[str] = dataclasses.field(default_factory=set)  # pod uids

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Remembered:
        raw = status.get("remembered")
        raw = raw if isinstance(raw, Mapping) else {}
        return cls(planned={p for (p,) in _strings(raw.get("plannedPods"), 1)},
                   remediated={(c, g, k) for c, g, k in _strings(raw.get("remediated"), 3)},
                   advised={(c, g) for c, g in _strings(raw.get("advised"), 2)},
                   ignored={p for (p,) in _strings(raw.get("ignoredAsks"), 1)})

    def to_status(self) -> dict[str, Any]:
        return {"plannedPods": sorted(self.planned)[:MAX_ITEMS],
                "remediated": sorted(_SEP.join(k) for k in self.remediated)[:MAX_ITEMS],
                "advised": sorted(_SEP.join(k) for k in self.advised)[:MAX_ITEMS],
                "ignoredAsks": sorted(self.ignored)[:MAX_ITEMS]}

    def forget_pods_except(self, live_uids: Collection[str]) -> None:
        """A pod that is gone is never planned again: forget it."""
        live = set(live_uids)
        self.planned &= live
        self.ignored &= live
