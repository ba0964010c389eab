"""What ``memoryguard-kuberay top`` and the demo show: every guarded pod,
nearest harm first, from the MemoryGuards' own status (what the operator
wrote: working set, limit, trend, projected OOM, verdict), and each guard's
latest actions. Purely computational: guard documents in, rich renderables
out; reading them from a cluster is top.py's part."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from memoryguard_kuberay.core.policy import Action, Reason
from memoryguard_kuberay.core.policy.decide import RULES
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration
from memoryguard_kuberay.operator import status
from memoryguard_kuberay.operator.sidecar_client import PollFailure

# Verdicts as the status names them (status._verdict), coloured by what they
# call for: read from the enums the status writes them from, never retyped.
DANGER = frozenset({r.value for r in status.AT_RISK} | {r.reason.value for r in RULES if r.action is Action.ROTATE}
                   | {Reason.USER_REQUESTED.value})
BLIND = frozenset({f.value for f in PollFailure} | {status.NO_MEMORY_SOURCE})
ACTIONS_SHOWN = 8


@dataclasses.dataclass(frozen=True)
class PodLine:
    namespace: str
    guard: str
    group: str
    pod: str
    working_set: int | None
    limit: int | None
    slope_per_h: float | None
    eta_s: float | None
    verdict: str
    decision: str

    @property
    def used(self) -> float | None:
        return self.working_set / self.limit if self.working_set is not None and self.limit else None


def _map(v: Any) -> Mapping[str, Any]:
    """A status is what its writer made it (a tenant may write anything the
    schema lets through): what is not a map reads as an empty one."""
    return v if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def pod_lines(guards: Iterable[Mapping[str, Any]]) -> list[PodLine]:
    """Every pod the guards list, nearest projected OOM first; pods without a
    projection after them, the fullest first."""
    out = []
    for g in guards:
        meta, status = _map(g.get("metadata")), _map(g.get("status"))
        for name, p in _map(status.get("pods")).items():
            if not isinstance(p, Mapping):
                continue
            ws, lim = _number(p.get("workingSetBytes")), _number(p.get("limitBytes"))
            out.append(PodLine(str(meta.get("namespace", "")), str(meta.get("name", "")), str(p.get("group", "")),
                               str(name), None if ws is None else int(ws), None if lim is None else int(lim),
                               _number(p.get("slopeBytesPerHour")), _number(p.get("projectedOOMSeconds")),
                               str(p.get("verdict", "?")), str(p.get("lastDecision", ""))))
    return sorted(out, key=lambda p: (p.eta_s is None, p.eta_s or 0.0, -(p.used or 0.0), p.namespace, p.pod))


def group_risk(guards: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """One heat-map column: per worker group ("namespace/guard group"), the
    nearest projected OOM of its pods (None: none of them is growing)."""
    out: dict[str, float | None] = {}
    for p in pod_lines(guards):
        row = f"{p.namespace}/{p.guard} {p.group}"
        if p.eta_s is not None:
            known = out.get(row)
            out[row] = p.eta_s if known is None else min(known, p.eta_s)
        else:
            out.setdefault(row, None)
    return out


def actions(guards: Iterable[Mapping[str, Any]]) -> list[tuple[float, str]]:
    """(when, what) of each guard's rotations, in flight and ended, newest
    first; ``when`` on the operator's clock (epoch seconds)."""
    out = []
    for g in guards:
        meta, rot = _map(g.get("metadata")), _map(_map(g.get("status")).get("rotations"))
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        for r in _list(rot.get("inFlight")):
            if isinstance(r, Mapping):
                out.append((_number(r.get("requestedAt")) or 0.0,
                            f"{where}: rotating {r.get('pod')} ({r.get('reason')}; {r.get('phase')})"))
        for r in _list(rot.get("recent")):
            if isinstance(r, Mapping):
                out.append((_number(r.get("finishedAt")) or 0.0,
                            f"{where}: {r.get('outcome') or 'rotated'} {r.get('pod')} ({r.get('reason')})"))
    return sorted(out, key=lambda a: a[0], reverse=True)[:ACTIONS_SHOWN]


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "?"


def _verdict(v: str) -> Text:
    style = "bold red" if v in DANGER else "yellow" if v in BLIND or v == "WarmingUp" else "green"
    return Text(v, style=style)


def screen(guards: Sequence[Mapping[str, Any]], *, title: str, note: str = "", limit: int = 40) -> RenderableType:
    """The whole view: one table of pods (at most ``limit``), then actions."""
    lines = pod_lines(guards)
    table = Table(title=title, title_justify="left", expand=False, header_style="bold")
    for col, justify in (("NAMESPACE/GUARD", "left"), ("GROUP", "left"), ("POD", "left"),
                         ("WORKING SET", "right"), ("TREND", "right"), ("OOM IN", "right"), ("VERDICT", "left")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for p in lines[:limit]:
        ws = "-" if p.working_set is None else f"{fmt_bytes(p.working_set)} / {fmt_bytes(p.limit)}" + (
            f" {p.used:4.0%}" if p.used is not None else "")
        trend = "-" if p.slope_per_h is None else f"{'+' if p.slope_per_h >= 0 else '-'}" \
                                                  f"{fmt_bytes(abs(p.slope_per_h))}/h"
        eta = "-" if p.eta_s is None else fmt_duration(p.eta_s)
        table.add_row(f"{p.namespace}/{p.guard}", p.group, p.pod, ws, trend,
                      Text(eta, style="bold red" if p.eta_s is not None and p.eta_s < 3600 else ""),
                      _verdict(p.verdict))
    parts: list[RenderableType] = [table]
    if len(lines) > limit:
        parts.append(Text(f"... and {len(lines) - limit} more pod(s), further from harm", style="dim"))
    if not lines:
        parts.append(Text("no guarded pods (no MemoryGuard here, or none has written its status yet)", style="dim"))
    done = actions(guards)
    parts.append(Text("\nlast actions:" if done else "\nlast actions: none yet", style="bold"))
    parts += [Text(f"  {when(t)}  {what}") for t, what in done]
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)
