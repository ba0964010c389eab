"""Finding the Ray container's processes and reading them through a /proc
tree (``--proc-root``, default /proc; a fixture tree in tests).

With ``shareProcessNamespace: true`` the sidecar sees the Ray container's
processes; their cgroup is reachable through ``/proc/<pid>/root``, which is
that container's own view of ``/sys/fs/cgroup``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from memoryguard_kuberay.sidecar.cgroup import MemoryReading
from memoryguard_kuberay.sidecar.files import PreadFile
from memoryguard_kuberay.sidecar.parsers import parse_keyed

# The raylet binary, Ray's worker processes ("ray::IDLE", "ray::MyActor") and
# the head's GCS: all live in the Ray container.
DEFAULT_PATTERN = r"(^|/)(raylet|gcs_server)(\s|$)|^ray::"


def cmdline(proc_root: str, pid: int) -> str | None:
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def find_ray_pids(proc_root: str, pattern: str = DEFAULT_PATTERN, exclude: frozenset[int] = frozenset()) -> list[int]:
    """PIDs whose command line matches ``pattern``, raylet first."""
    rx = re.compile(pattern)
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    found: list[tuple[int, int]] = []
    for name in entries:
        if not name.isdigit() or int(name) in exclude:
            continue
        cmd = cmdline(proc_root, int(name))
        if cmd and rx.search(cmd):
            found.append((0 if "raylet" in cmd.split(" ", 1)[0] else 1, int(name)))
    return [pid for _, pid in sorted(found)]


def cgroup_paths(proc_root: str, pid: int) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) from ``/proc/<pid>/cgroup``."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), "rb") as f:
            text = f.read(65536).decode("utf-8", "replace")
    except OSError:
        return None, None
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def cgroup_dir_candidates(proc_root: str, pid: int) -> list[tuple[str, str]]:
    """(kind, directory) to try, most specific first."""
    v2, v1 = cgroup_paths(proc_root, pid)
    base = os.path.join(proc_root, str(pid), "root", "sys", "fs", "cgroup")
    out: list[tuple[str, str]] = []
    if v2 is not None:
        out.append(("cgroup-v2", os.path.normpath(base + "/" + v2.lstrip("/"))))
    out.append(("cgroup-v2", base))  # a container with its own cgroup namespace sees itself at the root
    if v1 is not None:
        out.append(("cgroup-v1", os.path.normpath(base + "/memory/" + v1.lstrip("/"))))
    out.append(("cgroup-v1", os.path.join(base, "memory")))
    return out


class SmapsReader:
    """Last resort: the sum of ``smaps_rollup`` over the Ray container's
    processes, with the limit given by the downward API. It sees mapped
    memory only (no page cache), so inactive_file is reported as 0 and the
    working set is the processes' proportional set size."""

    kind = "smaps"

    def __init__(self, proc_root: str, pids: Callable[[], list[int]], limit_bytes: int | None) -> None:
        self.proc_root = proc_root
        self.pids = pids
        self.limit_bytes = limit_bytes
        self.files: dict[int, PreadFile] = {}
        self.pid: int | None = None  # follows the processes itself

    def usable(self) -> bool:
        return bool(self.pids())

    def errors(self) -> dict[str, int]:
        return {f"{pid}/smaps_rollup": f.errors for pid, f in self.files.items()}

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()

    def read(self) -> MemoryReading:
        pids = self.pids()
        for gone in set(self.files) - set(pids):
            self.files.pop(gone).close()
        pss = anon = file_ = shmem = 0
        seen = 0
        for pid in pids:
            f = self.files.get(pid)
            if f is None:
                f = self.files[pid] = PreadFile(os.path.join(self.proc_root, str(pid), "smaps_rollup"))
            data = f.read()
            if data is None:
                continue
            kv = parse_keyed(data.replace(b":", b" ").replace(b" kB", b""))
            if "Pss" not in kv:
                continue
            seen += 1
            pss += kv["Pss"] * 1024
            anon += kv.get("Pss_Anon", 0) * 1024
            file_ += kv.get("Pss_File", 0) * 1024
            shmem += kv.get("Pss_Shmem", 0) * 1024
        if not seen:
            return MemoryReading(limit_bytes=self.limit_bytes, limit_known=self.limit_bytes is not None)
        return MemoryReading(current_bytes=pss, limit_bytes=self.limit_bytes, limit_known=self.limit_bytes is not None,
                             anon_bytes=anon, file_bytes=file_, inactive_file_bytes=0, shmem_bytes=shmem)
