"""Scoring rotations against labelled traces, and the static baseline.

The rules are those of ``shared/traces/README.md``: a leak is caught when the
first rotation comes at least ``safety_s`` (time to drain, 600 s) before the
OOM kill; a Plasma leak when it comes before the store is 95% full; any
rotation of a healthy pod is a false rotation. Purely computational.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core.samples import Sample

SAFETY_S = 600


def baseline_first_rotation(samples: Sequence[Sample], *, ws_fraction: float = 0.90,
                            store_fraction: float = 0.95) -> float | None:
    """The plain static threshold users would otherwise set: rotate at the
    first sample with working set >= 90% of the limit or store >= 95%."""
    for s in samples:
        ws, store = s.working_set_fraction, s.store_fraction
        if (ws is not None and ws >= ws_fraction) or (store is not None and store >= store_fraction):
            return s.time_s
    return None


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    kind: str
    first_rotation_s: float | None
    outcome: str  # ok | false_rotation | caught | missed | unlabelled
    lead_s: float | None


@dataclasses.dataclass(frozen=True)
class Score:
    rows: tuple[Row, ...]

    @property
    def caught(self) -> int:
        return sum(r.outcome == "caught" for r in self.rows)

    @property
    def missed(self) -> int:
        return sum(r.outcome == "missed" for r in self.rows)

    @property
    def false_rotations(self) -> int:
        return sum(r.outcome == "false_rotation" for r in self.rows)

    @property
    def leads_s(self) -> list[float]:
        return [r.lead_s for r in self.rows if r.lead_s is not None and r.outcome == "caught"]

    def totals(self) -> dict[str, Any]:
        leads = self.leads_s
        return {
            "caught": self.caught, "missed": self.missed, "false_rotations": self.false_rotations,
            "min_lead_h": round(min(leads) / 3600, 2) if leads else None,
            "median_lead_h": round(statistics.median(leads) / 3600, 2) if leads else None,
        }


def score(labels: Mapping[str, Mapping[str, Any]], first_rotations: Mapping[str, float | None],
          *, safety_s: float = SAFETY_S) -> Score:
    rows = []
    for name in sorted(first_rotations):
        t = first_rotations[name]
        lab = labels.get(name)
        if lab is None:
            rows.append(Row(name, "?", t, "unlabelled", None))
            continue
        kind = str(lab.get("kind"))
        if kind == "healthy":
            rows.append(Row(name, kind, t, "ok" if t is None else "false_rotation", None))
            continue
        deadline = lab.get("oom_at_s") if kind == "leak" else lab.get("plasma_full_at_s")
        if deadline is None:
            rows.append(Row(name, kind, t, "unlabelled", None))
            continue
        need = float(deadline) - (safety_s if kind == "leak" else 0)
        if t is not None and t <= need:
            rows.append(Row(name, kind, t, "caught", float(deadline) - t))
        else:
            rows.append(Row(name, kind, t, "missed", None))
    return Score(tuple(rows))
