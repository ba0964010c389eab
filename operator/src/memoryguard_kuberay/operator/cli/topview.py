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

from memoryguard_kuberay.core import specfields
from memoryguard_kuberay.core.policy import Action, Reason
from memoryguard_kuberay.core.policy.decide import RULES
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration
from memoryguard_kuberay.operator import status
from memoryguard_kuberay.operator.clock import parse_time
from memoryguard_kuberay.operator.sidecars.sidecar_client import PollFailure
from memoryguard_kuberay.operator.status import pods_listed

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
    error: str = ""  # why its sidecar brought no samples (status.pods[].sidecarError)

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
        listed = pods_listed(status)
        for name, p in listed.items():
            if not isinstance(p, Mapping):
                continue
            ws, lim = _number(p.get("workingSetBytes")), _number(p.get("limitBytes"))
            out.append(PodLine(str(meta.get("namespace", "")), str(meta.get("name", "")), str(p.get("group", "")),
                               str(name), None if ws is None else int(ws), None if lim is None else int(lim),
                               _number(p.get("slopeBytesPerHour")), _number(p.get("projectedOOMSeconds")),
                               str(p.get("verdict", "?")), str(p.get("lastDecision", "")),
                               str(p.get("sidecarError") or "")))
        # A pod being rotated stays in view after it is deleted, until its
        # rotation ends (issue 42, 6: it left the table the moment it went).
        for r in _list(_map(status.get("rotations")).get("inFlight")):
            if isinstance(r, Mapping) and str(r.get("pod", "")) not in listed:
                out.append(PodLine(str(meta.get("namespace", "")), str(meta.get("name", "")), str(r.get("group", "")),
                                   str(r.get("pod", "")), None, None, None, None,
                                   f"Rotating ({r.get('phase', '?')})", str(r.get("reason", ""))))
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
                out.append((parse_time(r.get("requestedAt")) or 0.0,
                            f"{where}: rotating {r.get('pod')} ({r.get('reason')}; {r.get('phase')})"))
        for r in _list(rot.get("recent")):
            if isinstance(r, Mapping):
                out.append((parse_time(r.get("finishedAt")) or 0.0,
                            f"{where}: {r.get('outcome') or 'rotated'} {r.get('pod')} ({r.get('reason')})"))
        # What it said last, a dry run's plans and the ladder's steps among
        # it (issue 61, 6: "none yet" stayed while a dry run planned).
        said, at = _map(g.get("status")).get("lastActionBrief"), parse_time(_map(g.get("status")).get("lastActionTime"))
        if isinstance(said, str) and said and at is not None:
            out.append((at, f"{where}: {said}"))
    return sorted(out, key=lambda a: a[0], reverse=True)[:ACTIONS_SHOWN]


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "?"


def _verdict(v: str) -> Text:
    style = "bold red" if v in DANGER else "yellow" if v in BLIND or v == "WarmingUp" else "green"
    return Text(v, style=style)


# The table's columns, in the order shown; those after the first four give
# way, last first, when the screen is too narrow for all (issue 42, 6: at
# 100 and 120 columns pod names were cut; a cut name cannot be pasted into
# kubectl). POD, WORKING SET, OOM IN and VERDICT are always shown.
COLUMNS = ("NAMESPACE/GUARD", "GROUP", "POD", "WORKING SET", "TREND", "OOM IN", "VERDICT", "WHY NO SAMPLES")
ALWAYS = frozenset({"POD", "WORKING SET", "OOM IN", "VERDICT"})
GIVE_WAY = ("WHY NO SAMPLES", "TREND", "GROUP", "NAMESPACE/GUARD")  # first dropped first
RIGHT = frozenset({"WORKING SET", "TREND", "OOM IN"})
WHY_MAX = 60  # characters of a poll's error shown (the whole of it is in the status)


def _cells(p: PodLine, *, compact: bool = False) -> dict[str, str | Text]:
    """A row's cells; ``compact``: the working set without its limit (the
    share of it says the same), where the screen is narrow."""
    used = f" {p.used:4.0%}" if p.used is not None else ""
    ws = "-" if p.working_set is None else (f"{fmt_bytes(p.working_set)}{used}" if compact else
                                            f"{fmt_bytes(p.working_set)} / {fmt_bytes(p.limit)}{used}")
    trend = "-" if p.slope_per_h is None else f"{'+' if p.slope_per_h >= 0 else '-'}" \
                                              f"{fmt_bytes(abs(p.slope_per_h))}/h"
    eta = "-" if p.eta_s is None else fmt_duration(p.eta_s)
    return {"NAMESPACE/GUARD": f"{p.namespace}/{p.guard}", "GROUP": p.group, "POD": p.pod, "WORKING SET": ws,
            "TREND": trend, "OOM IN": Text(eta, style="bold red" if p.eta_s is not None and p.eta_s < 3600 else ""),
            "VERDICT": _verdict(p.verdict), "WHY NO SAMPLES": p.error[:WHY_MAX]}


class PodTable:
    """The pods' table, laid out for the width it is drawn at: every column
    as wide as its widest cell, none cut; where they do not all fit, the
    least needed are left out (and said)."""

    def __init__(self, lines: Sequence[PodLine], title: str) -> None:
        self.lines, self.title = list(lines), title

    @staticmethod
    def _fits(widths: Mapping[str, int], shown: Sequence[str], room: int) -> bool:
        return sum(widths[k] + 3 for k in shown) + 1 <= room  # each column: its cells, padding and a border

    def __rich_console__(self, console: Any, options: Any) -> Any:
        rows = [_cells(p) for p in self.lines]
        widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in COLUMNS}
        shown = [c for c in COLUMNS if c != "WHY NO SAMPLES" or any(r[c] for r in rows)]
        dropped = []
        for c in GIVE_WAY:
            if self._fits(widths, shown, options.max_width):
                break
            if c in shown:
                shown.remove(c)
                dropped.append(c)
        if not self._fits(widths, shown, options.max_width):
            rows = [_cells(p, compact=True) for p in self.lines]
            widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in COLUMNS}
        if not self._fits(widths, shown, options.max_width):
            # Still too narrow (80 columns and KubeRay's long pod names): a
            # pod a line, its verdict and figures under it, none cut (issue
            # 61, 6: VERDICT read "PodNotRu", "Proj").
            yield Text(self.title, style="bold")
            for r in rows:
                yield Text(str(r["POD"]))
                pad = " " * (widths["VERDICT"] - len(str(r["VERDICT"])))
                yield Text.assemble("    ", r["VERDICT"], pad, f"  OOM in {r['OOM IN']!s:>{widths['OOM IN']}}  ",
                                    str(r["WORKING SET"]))
            yield Text("(a pod a line at this width; a wider screen shows the table)", style="dim")
            return
        table = Table(title=self.title, title_justify="left", expand=False, header_style="bold")
        for c in shown:
            table.add_column(c, justify="right" if c in RIGHT else "left", no_wrap=True, min_width=widths[c])
        for r in rows:
            table.add_row(*(r[c] for c in shown))
        yield table
        if dropped:
            yield Text(f"(left out at this width: {', '.join(reversed(dropped))}; a wider screen shows them)",
                       style="dim")


def unguarded(guards: Iterable[Mapping[str, Any]], now: float) -> dict[tuple[str, str], float | None]:
    """The guards no operator has run a cycle of for longer than it would
    while guarding them (status.lastCycleTime; issue 61, 2), with how long
    (None: never), by (namespace, name)."""
    out: dict[tuple[str, str], float | None] = {}
    for g in guards:
        meta = _map(g.get("metadata"))
        interval = (_number(_map(_map(g.get("spec")).get("sampling")).get("intervalSeconds"))
                    or float(specfields.default("sampling.intervalSeconds")))  # where a guard's cannot be read
        beat = parse_time(_map(g.get("status")).get("lastCycleTime"))
        if beat is None or now - beat > status.stale_after_s(interval):
            out[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = None if beat is None else now - beat
    return out


def podless(guards: Iterable[Mapping[str, Any]], lines: Sequence[PodLine]) -> list[tuple[str, str]]:
    """The guards with no pod in view, and why, as their conditions say (a
    cluster not found, a spec refused): they were not listed at all (issue
    61, 6)."""
    seen = {(p.namespace, p.guard) for p in lines}
    out = []
    for g in guards:
        meta = _map(g.get("metadata"))
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if key in seen:
            continue
        conds = [c for c in _list(_map(g.get("status")).get("conditions")) if isinstance(c, Mapping)]
        false = [c for c in conds if c.get("type") in ("Ready", "Reporting") and c.get("status") != "True"]
        why = f"{false[0].get('reason', '?')}: {false[0].get('message', '')}" if false else "no status written yet"
        out.append((f"{key[0]}/{key[1]}", why[:200]))
    return out


def screen(guards: Sequence[Mapping[str, Any]], *, title: str, note: str = "", limit: int = 40,
           now: float | None = None) -> RenderableType:
    """The whole view: one table of pods (at most ``limit``), then actions.
    With ``now`` (the operator's clock), the pods of a guard no operator
    guards read verdict ``Unknown``, and a line says since when."""
    lines = pod_lines(guards)
    stale = unguarded(guards, now) if now is not None else {}
    lines = [dataclasses.replace(p, verdict="Unknown", decision=f"(as it was; last said: {p.verdict}) {p.decision}")
             if (p.namespace, p.guard) in stale else p for p in lines]
    table = PodTable(lines[:limit], title)
    parts: list[RenderableType] = [table]
    for (ns, name), age in sorted(stale.items()):
        parts.append(Text(f"NOT GUARDED: {ns}/{name}: no operator has run its cycle "
                          + ("yet" if age is None else f"for {fmt_duration(age)}")
                          + ": its figures are as they were then (is the operator running?)", style="bold red"))
    if len(lines) > limit:
        parts.append(Text(f"... and {len(lines) - limit} more pod(s), further from harm", style="dim"))
    if not lines:
        parts.append(Text("no guarded pods (no MemoryGuard here, or none has written its status yet)", style="dim"))
    for g, why in podless(guards, lines):
        parts.append(Text(f"{g}: no pods guarded: {why}", style="yellow"))
    done = actions(guards)
    parts.append(Text("\nlast actions:" if done else "\nlast actions: none yet", style="bold"))
    parts += [Text(f"  {when(t)}  {what}") for t, what in done]
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)
