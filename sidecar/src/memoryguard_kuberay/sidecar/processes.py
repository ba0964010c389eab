"""The Ray container's processes by memory, for the evidence kept before a
rotation (``GET /v1/processes``).

With ``shareProcessNamespace`` the sidecar sees the Ray container's
processes. psutil reads each one's USS and PSS from ``smaps_rollup`` (one
small file per process, not the full ``smaps``), its name and its command
line's shape (``shape``: the program, Ray's titles, scripts and modules,
flags by name; no argument's value), cut short; a process's environment is
never read. Bounded whatever the pod holds: at most ``max_scan``
processes are looked at, within ``budget_s``, and ``limit`` are kept.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from typing import Any

import psutil

CMDLINE_MAX = 200
LIMIT = 20
MAX_SCAN = 2048
BUDGET_S = 5.0


# What of a command line is served: its shape, never a value (issue 44, 7:
# a deny-list of secret-shaped names missed 18 of 27 shapes: --pass=X,
# -p X, curl -u user:X, "Authorization: Bearer X", ?X-Amz-Signature=X, ...).
# An allow-list of argument shapes: the program's name, Ray's process titles
# (ray::Actor.method: what the forensics reads), a script's or module's
# name, and flags by name alone (a one-letter flag by its letter); every
# other argument, and every value
# (after = or not), is one mark. Enough to tell processes apart and match
# them across two artifacts (forensics --diff), nothing a secret can hide in.
_PROGRAM = re.compile(r"^[\w.+-]{1,64}$")
_TITLE = re.compile(r"^ray::[\w.:<>-]{1,120}$")
_SCRIPT = re.compile(r"^[\w./-]{1,160}\.(?:py|sh)$")
_MODULE = re.compile(r"^[A-Za-z_][\w.]{0,100}$")
_FLAG = re.compile(r"^(--[A-Za-z][\w-]{0,60})(=.*)?$")
# A one-letter flag: what follows it in the same argument is a value
# (-pS3cr3t, -uroot: mysql, sshpass), served as one mark.
_SHORT_FLAG = re.compile(r"^(-[A-Za-z])(.+)?$")
_SUBCOMMAND = re.compile(r"^[a-z][a-z-]{1,30}$")  # "ray start": right after the program only
HIDDEN = "\u2026"  # one mark for an argument or a value not served


def shape(argv: list[str]) -> str:
    """The command line as served: see above. Purely computational."""
    out: list[str] = []
    after_m = False
    for i, raw in enumerate(argv):
        a = raw.strip()
        if i == 0:
            name = os.path.basename(a)
            out.append(a if _TITLE.match(a) else name if _PROGRAM.match(name) else HIDDEN)
        elif _TITLE.match(a) or (after_m and _MODULE.match(a)) or (_SCRIPT.match(a) and "=" not in a) \
                or (i == 1 and _SUBCOMMAND.match(a)):
            out.append(a)
        elif (flag := _FLAG.match(a)) is not None:
            out.append(flag.group(1) + (f"={HIDDEN}" if flag.group(2) else ""))
        elif (flag := _SHORT_FLAG.match(a)) is not None:
            out.append(flag.group(1) + (HIDDEN if flag.group(2) else ""))
        elif not out or out[-1] != HIDDEN:
            out.append(HIDDEN)
        after_m = a == "-m"
    return " ".join(out)


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
            cmd = shape(" ".join(p.cmdline()).split())
    except (psutil.Error, OSError, ValueError):
        return None  # gone, or not ours to read
    if mem.rss == 0:
        return None  # a kernel thread: no memory of its own in the container
    if len(cmd) > CMDLINE_MAX:
        cmd = cmd[:CMDLINE_MAX - 3] + "..."
    return ProcessMemory(pid, name, int(mem.uss), int(mem.pss), int(mem.rss), cmd)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def memory_cgroup_of(pid: int, proc_root: str = "/proc") -> str | None:
    """The process's memory cgroup, as /proc/<pid>/cgroup names it (v1's
    memory controller line, else v2's unified one)."""
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            return path
        if controllers == "":
            unified = path
    return unified


def in_cgroup(path: str | None, cgroup: str) -> bool:
    return path is not None and (path == cgroup or path.startswith(cgroup.rstrip("/") + "/"))


def top_processes(*, proc_root: str = "/proc", limit: int = LIMIT, max_scan: int = MAX_SCAN,
                  budget_s: float = BUDGET_S, exclude: frozenset[int] = frozenset(),
                  clock: Callable[[], float] = time.monotonic, session: int | None = None,
                  cgroup: str | None = None) -> dict[str, Any]:
    """The ``limit`` processes with the most unique memory (USS), and how
    the scan went: how many there were, how many were read, and why the scan
    stopped early if it did. ``session``: only the processes of that session
    (a simulated pod on a shared machine, where /proc is everyone's; in a
    real pod the PID namespace is the pod's). ``cgroup``: only the processes
    in that memory cgroup or below it (its path in the hierarchy: the one
    whose memory the sidecar reads, where /proc shows others too)."""
    t0 = clock()
    psutil.PROCFS_PATH = proc_root  # the sidecar has one process root
    try:
        pids = sorted(psutil.pids())
    except OSError as e:
        return {"processes": [], "total": 0, "scanned": 0, "stopped": f"cannot list {proc_root}: {e}",
                "took_s": round(clock() - t0, 3)}
    if session is None:
        exclude = exclude | {os.getpid()}
    else:
        pids = [p for p in pids if _session_of(p) == session]
    if cgroup is not None:
        pids = [p for p in pids if in_cgroup(memory_cgroup_of(p, proc_root), cgroup)]
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
