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
from memoryguard_kuberay.sidecar.parsers import parse_kib

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
    # In a pod on cgroup v2 each container has its own cgroup namespace, and
    # the kernel writes the Ray process's path relative to the reader's
    # (``0::/../ray``): it names nothing under Ray's root, whose cgroup mount
    # shows Ray's own cgroup at the top. Only a path with no ``..`` is one.
    if v2 is not None and ".." not in v2.split("/"):
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
        """Some Ray process's smaps_rollup can be read (the kernel refuses
        it, as /proc/<pid>/root, to another uid or gid)."""
        return any(_readable(os.path.join(self.proc_root, str(pid), "smaps_rollup")) for pid in self.pids()[:8])

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
            kv = parse_kib(data)
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


def _readable(path: str) -> bool:
    """Opened and read: a /proc file's mode says r--r--r-- whoever asks
    (os.access believes it); the kernel's check is made when it is opened."""
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


def access_problem(proc_root: str, pid: int) -> str | None:
    """Why this process's files cannot be read, in a sentence, or None.
    The kernel's check (ptrace access, read mode) for /proc/<pid>/root and
    smaps_rollup: the reader has CAP_SYS_PTRACE, or it has the process's
    uid AND gid (real, effective and saved), the process is dumpable, and
    the reader's permitted capabilities include the process's. Seen on a
    real kubelet (a sidecar at 1000:1000 beside Ray's 1000:100) and on a
    real cgroup v2 kernel (a root Ray with containerd's default capabilities
    refuses a root reader with none; docs/facts.md)."""
    base = os.path.join(proc_root, str(pid))
    try:
        os.listdir(os.path.join(base, "root"))
        return None
    except PermissionError:
        pass
    except OSError:
        return None
    status = _status(base)
    uid, gid = status.get("Uid", "?"), status.get("Gid", "?")
    mine = os.getuid(), os.getgid()
    who = f"Ray's process {pid} (uid {uid}, gid {gid})"
    me = f"this sidecar (uid {mine[0]}, gid {mine[1]})"
    if uid == "0" and mine[0] != 0:
        return (f"{who} runs as root and cannot be read by {me}: the sidecar never runs as root, and the kernel "
                "lets only a reader with the same uid and gid (and the process's capabilities) or CAP_SYS_PTRACE "
                "read /proc/<pid>/root; run the Ray container as a non-root user (Ray's images use 1000:100)")
    if (uid, gid) != (str(mine[0]), str(mine[1])):  # a root reader without CAP_SYS_PTRACE is refused too
        return (f"{who} cannot be read by {me}: the kernel lets only the same uid and gid read /proc/<pid>/root; "
                "run the sidecar with the Ray container's runAsUser and runAsGroup")
    theirs, ours = _caps(status.get("CapPrm")), _caps(_status("/proc/self").get("CapPrm"))
    if theirs is not None and ours is not None and theirs & ~ours:
        return (f"{who} holds capabilities {theirs & ~ours:#x} that {me} lacks: the kernel lets a reader with the "
                "same uid and gid read /proc/<pid>/root only if it has the process's capabilities too; drop the "
                "Ray container's capabilities (securityContext.capabilities.drop: [ALL])")
    return (f"{who} cannot be read by {me} although both have the same uid and gid: the process is not "
            "dumpable (it changed its identity, or set PR_SET_DUMPABLE 0), and only CAP_SYS_PTRACE reads it then")


def _status(base: str) -> dict[str, str]:
    """The first value of each line of ``<base>/status`` (Uid's real uid)."""
    out: dict[str, str] = {}
    try:
        with open(os.path.join(base, "status"), "rb") as f:
            for line in f.read(8192).decode("utf-8", "replace").splitlines():
                key, _, value = line.partition(":")
                if value.split():
                    out[key] = value.split()[0]
    except OSError:
        pass
    return out


def _caps(value: str | None) -> int | None:
    try:
        return int(value, 16) if value else None
    except ValueError:
        return None
