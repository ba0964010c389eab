"""The Ray container's processes by memory, for the evidence kept before a
rotation (``GET /v1/processes``).

With ``shareProcessNamespace`` the sidecar sees the Ray container's
processes. psutil reads each one's USS and PSS from ``smaps_rollup`` (one
small file per process, not the full ``smaps``), its name and its command
line (cut short: a command line can carry a token). A process's environment
is never read. Bounded whatever the pod holds: at most ``max_scan``
processes are looked at, within ``budget_s``, and ``limit`` are kept.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import psutil

CMDLINE_MAX = 200
LIMIT = 20
MAX_SCAN = 2048
BUDGET_S = 5.0


@dataclasses.dataclass(frozen=True)
class ProcessMemory:
    pid: int
    name: str
    uss_bytes: int
    pss_bytes: int
    rss_bytes: int
    cmdline: str

    def to_wire(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "uss": self.uss_bytes, "pss": self.pss_bytes,
                "rss": self.rss_bytes, "cmdline": self.cmdline}


def _one(pid: int) -> ProcessMemory | None:
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            mem = p.memory_full_info()  # smaps_rollup: uss, pss; statm: rss
            name = p.name()[:64]
            # Ray's workers pad their titles with spaces: runs of them say nothing.
            cmd = " ".join(" ".join(p.cmdline()).split())
    except (psutil.Error, OSError, ValueError):
        return None  # gone, or not ours to read
    if mem.rss == 0:
        return None  # a kernel thread: no memory of its own in the container
    if len(cmd) > CMDLINE_MAX:
        cmd = cmd[:CMDLINE_MAX - 3] + "..."
    return ProcessMemory(pid, name, int(mem.uss), int(mem.pss), int(mem.rss), cmd)


def top_processes(*, proc_root: str = "/proc", limit: int = LIMIT, max_scan: int = MAX_SCAN,
                  budget_s: float = BUDGET_S, exclude: frozenset[int] = frozenset(),
                  clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The ``limit`` processes with the most unique memory (USS), and how
    the scan went: how many there were, how many were read, and why the scan
    stopped early if it did."""
    t0 = clock()
    psutil.PROCFS_PATH = proc_root  # the sidecar has one process root
    try:
        pids = sorted(psutil.pids())
    except OSError as e:
        return {"processes": [], "total": 0, "scanned": 0, "stopped": f"cannot list {proc_root}: {e}",
                "took_s": round(clock() - t0, 3)}
    exclude = exclude | {os.getpid()}
    rows: list[ProcessMemory] = []
    scanned = 0
    stopped = None
    for pid in pids:
        if pid in exclude:
            continue
        if scanned >= max_scan:
            stopped = f"read the first {max_scan} of {len(pids)} processes"
            break
        if clock() - t0 > budget_s:
            stopped = f"time budget of {budget_s:g} s spent after {scanned} processes"
            break
        scanned += 1
        row = _one(pid)
        if row is not None:
            rows.append(row)
    rows.sort(key=lambda r: (-r.uss_bytes, r.pid))
    return {"processes": [r.to_wire() for r in rows[:limit]], "total": len(pids), "scanned": scanned,
            "stopped": stopped, "took_s": round(clock() - t0, 3)}
