"""What grew between two kept artifacts of one group (or one pod's two
rotations): the call sites whose Ray objects grew in count and bytes, the
processes whose unique memory grew, ranked: the suspects a person reads
first (issue 27, 2). Purely computational; ``forensics --diff`` prints it.

Processes are matched by command line, not PID (a rotated pod's processes
are new ones); call sites by their text (``rayprobe.readable_site``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import IO, Any

from memoryguard_kuberay.core.units import fmt_bytes

TOP = 10


@dataclasses.dataclass(frozen=True)
class Growth:
    what: str  # a call site, or a process's command line
    count_before: int
    count_after: int
    bytes_before: int
    bytes_after: int

    @property
    def bytes_grown(self) -> int:
        return self.bytes_after - self.bytes_before

    @property
    def count_grown(self) -> int:
        return self.count_after - self.count_before


@dataclasses.dataclass(frozen=True)
class Diff:
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    call_sites: list[Growth]  # grown in bytes or count, most bytes first
    processes: list[Growth]  # grown in USS, most first
    unrecorded: bool  # Ray recorded no call site in one of them: the sites say little

    @property
    def memory_grown(self) -> int | None:
        a = (self.after.get("memory") or {}).get("inUseBytes")
        b = (self.before.get("memory") or {}).get("inUseBytes")
        return a - b if isinstance(a, int) and isinstance(b, int) else None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _sites(doc: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for c in ((doc.get("rayObjects") or {}).get("callSites") or []):
        if isinstance(c, Mapping) and isinstance(c.get("callSite"), str):
            n, b = out.get(c["callSite"], (0, 0))
            out[c["callSite"]] = (n + _int(c.get("count")), b + _int(c.get("bytes")))
    return out


def _procs(doc: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """(processes, USS) per command line."""
    out: dict[str, tuple[int, int]] = {}
    for p in ((doc.get("processes") or {}).get("processes") or []):
        if isinstance(p, Mapping):
            key = str(p.get("cmdline") or p.get("name") or "?")
            n, b = out.get(key, (0, 0))
            out[key] = (n + 1, b + _int(p.get("ussBytes")))
    return out


def _grown(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]],
           *, by_count: bool) -> list[Growth]:
    rows = [Growth(k, before.get(k, (0, 0))[0], after[k][0], before.get(k, (0, 0))[1], after[k][1]) for k in after]
    rows = [g for g in rows if g.bytes_grown > 0 or (by_count and g.count_grown > 0)]
    return sorted(rows, key=lambda g: (-g.bytes_grown, -g.count_grown, g.what))


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> Diff:
    """``after`` against ``before`` (the older artifact)."""
    unrecorded = any((d.get("rayObjects") or {}).get("recordedSites") == 0 and (d.get("rayObjects") or {}).get(
        "objects") for d in (before, after))
    return Diff(before, after, _grown(_sites(before), _sites(after), by_count=True),
                _grown(_procs(before), _procs(after), by_count=False), unrecorded)


def _signed(n: int | None) -> str:
    if n is None:
        return "?"
    return ("+" if n >= 0 else "-") + fmt_bytes(abs(n))


def render(d: Diff, out: IO[str], *, names: Sequence[str] = ("before", "after"), top: int = TOP) -> None:
    w = out.write
    b, a = d.before, d.after
    w(f"What grew from {names[0]} ({b.get('pod')}, {b.get('collectedAt')}) to {names[1]} ({a.get('pod')}, "
      f"{a.get('collectedAt')}), group {a.get('group')} of {a.get('cluster')}:\n")
    w(f"  memory in use: {fmt_bytes((b.get('memory') or {}).get('inUseBytes'))} -> "
      f"{fmt_bytes((a.get('memory') or {}).get('inUseBytes'))} ({_signed(d.memory_grown)})\n")
    if d.call_sites:
        w(f"  call sites whose Ray objects grew (top {min(top, len(d.call_sites))} of {len(d.call_sites)}):\n")
        w(f"    {'+BYTES':>10}  {'+COUNT':>7}  {'NOW':>10}  CALL SITE\n")
        for g in d.call_sites[:top]:
            w(f"    {_signed(g.bytes_grown):>10}  {g.count_grown:>+7}  {fmt_bytes(g.bytes_after):>10}  {g.what}\n")
    else:
        w("  no call site's Ray objects grew\n")
    if d.unrecorded:
        w("  (Ray recorded no call site in one of them: set RAY_record_ref_creation_sites=1, or let the guard "
          "set it, spec.remediation.callSites)\n")
    if d.processes:
        w(f"  processes whose unique memory grew (top {min(top, len(d.processes))} of {len(d.processes)}):\n")
        w(f"    {'+USS':>10}  {'NOW':>10}  COMMAND\n")
        for g in d.processes[:top]:
            w(f"    {_signed(g.bytes_grown):>10}  {fmt_bytes(g.bytes_after):>10}  {g.what}\n")
    else:
        w("  no process's unique memory grew\n")
