"""Choosing where to read the Ray container's memory, in the documented order:

1. ``--cgroup-root DIR``: that cgroup directory (v2 files, else v1 files);
2. the Ray container's processes, found by command line through
   ``--proc-root``: their cgroup through ``/proc/<pid>/root/sys/fs/cgroup``,
   v2 where it exists, else v1;
3. the sum of ``smaps_rollup`` of those processes, with the limit from the
   downward API (``--memory-limit-bytes``).

The chosen source's name (``cgroup-v2:/proc/42/root/sys/fs/cgroup``) is
served with every sample, so nobody has to guess what was measured.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

from memoryguard_kuberay.sidecar.cgroup import CgroupV1Reader, CgroupV2Reader, MemoryReading
from memoryguard_kuberay.sidecar.procfs import SmapsReader, access_problem, cgroup_dir_candidates, find_ray_pids

log = logging.getLogger("memoryguard_kuberay.sidecar")
_said: set[str] = set()  # each access problem is logged once per process, not every discovery


class Source(Protocol):
    kind: str
    pid: int | None  # the process it was found through: when it is gone, look again

    def read(self) -> MemoryReading: ...

    def usable(self) -> bool: ...

    def errors(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def source_name(src: Source) -> str:
    where = getattr(src, "directory", None) or getattr(src, "proc_root", "")
    return f"{src.kind}:{where}"


def discover(*, cgroup_root: str | None, proc_root: str, pattern: str, limit_bytes: int | None,
             exclude_pids: frozenset[int] = frozenset()) -> Source | None:
    """The first usable source, or None (the caller retries later)."""
    if cgroup_root:
        for explicit in (CgroupV2Reader(cgroup_root), CgroupV1Reader(cgroup_root)):
            if explicit.usable():
                return explicit
            explicit.close()
        return None
    exclude = exclude_pids | {os.getpid()}
    pids = find_ray_pids(proc_root, pattern, exclude)
    for pid in pids[:1]:
        for kind, directory in cgroup_dir_candidates(proc_root, pid):
            reader: CgroupV2Reader | CgroupV1Reader = (
                CgroupV2Reader(directory) if kind == "cgroup-v2" else CgroupV1Reader(directory)
            )
            if reader.usable():
                reader.pid = pid
                return reader
            reader.close()
    if pids:
        smaps = SmapsReader(proc_root, lambda: find_ray_pids(proc_root, pattern, exclude), limit_bytes)
        if smaps.usable():
            return smaps
        problem = access_problem(proc_root, pids[0])
        if problem and problem not in _said:
            _said.add(problem)
            log.warning("%s", problem)
    return None
