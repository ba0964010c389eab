"""Readers of a cgroup's memory files, v2 and v1, each rooted at the cgroup's
directory so tests point them at fixture trees.

``read()`` returns a ``MemoryReading`` whose fields are None where a file is
missing or unreadable; the per-file error counts feed the sidecar's
``memoryguard_sidecar_read_errors_total`` metric. A reader never raises.
"""

from __future__ import annotations

import dataclasses
import os

from memoryguard_kuberay.sidecar import parsers
from memoryguard_kuberay.sidecar.files import PreadFile


@dataclasses.dataclass(frozen=True)
class MemoryReading:
    current_bytes: int | None = None
    limit_bytes: int | None = None
    limit_known: bool = False  # False: the limit file was unreadable (not "no limit")
    anon_bytes: int | None = None
    file_bytes: int | None = None
    inactive_file_bytes: int | None = None
    shmem_bytes: int | None = None
    psi_some_avg10_pct: float | None = None
    psi_full_avg10_pct: float | None = None
    oom_kill_count: int | None = None
    # cgroup v2 only: memory.high (None: "max" or unreadable, as high_known
    # tells) and memory.events' "high" (allocations throttled above it) and
    # "max" (charges that hit memory.max: seconds before an OOM kill).
    high_bytes: int | None = None
    high_known: bool = False
    high_events_count: int | None = None
    max_events_count: int | None = None
    # cgroup v2's memory.stat: the kernel's unreclaimable part (samples.py).
    slab_unreclaimable_bytes: int | None = None
    sock_bytes: int | None = None
    kernel_stack_bytes: int | None = None
    pagetables_bytes: int | None = None
    percpu_bytes: int | None = None


class CgroupReader:
    kind = "cgroup"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pid: int | None = None
        self.files: dict[str, PreadFile] = {}

    def _file(self, name: str) -> PreadFile:
        f = self.files.get(name)
        if f is None:
            f = self.files[name] = PreadFile(os.path.join(self.directory, name))
        return f

    def errors(self) -> dict[str, int]:
        return {name: f.errors for name, f in self.files.items()}

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def usable(self) -> bool:
        raise NotImplementedError

    def read(self) -> MemoryReading:
        raise NotImplementedError


class CgroupV2Reader(CgroupReader):
    """``memory.current``, ``memory.max``, ``memory.high``, ``memory.stat``,
    ``memory.events``, ``memory.pressure`` of one cgroup v2 directory.

    ``memory.events`` ``oom_kill`` is served as the kernel counts it: it went
    up means an OOM kill, not how many (under ``memory.oom.group=1``, the
    kubelet's default since 1.28, one kill counted 2 for one process and 3
    for two on a real 6.1 kernel; docs/facts.md)."""

    kind = "cgroup-v2"

    def usable(self) -> bool:
        return parsers.parse_int(self._file("memory.current").read()) is not None

    def read(self) -> MemoryReading:
        known, limit = parsers.parse_limit(self._file("memory.max").read())
        high_known, high = parsers.parse_limit(self._file("memory.high").read())
        stat = parsers.parse_keyed(self._file("memory.stat").read())
        events = parsers.parse_keyed(self._file("memory.events").read())
        psi = parsers.parse_psi(self._file("memory.pressure").read()) if self._has_pressure() else {}
        return MemoryReading(
            current_bytes=parsers.parse_int(self._file("memory.current").read()),
            limit_bytes=limit, limit_known=known,
            anon_bytes=stat.get("anon"), file_bytes=stat.get("file"),
            inactive_file_bytes=stat.get("inactive_file"), shmem_bytes=stat.get("shmem"),
            psi_some_avg10_pct=psi.get("some_avg10"), psi_full_avg10_pct=psi.get("full_avg10"),
            oom_kill_count=events.get("oom_kill"),
            high_bytes=high, high_known=high_known,
            high_events_count=events.get("high"), max_events_count=events.get("max"),
            slab_unreclaimable_bytes=stat.get("slab_unreclaimable"), sock_bytes=stat.get("sock"),
            kernel_stack_bytes=stat.get("kernel_stack"), pagetables_bytes=stat.get("pagetables"),
            percpu_bytes=stat.get("percpu"),
        )

    def _has_pressure(self) -> bool:
        # Kernels without PSI (or with psi=0) have no memory.pressure: that is
        # "unknown", not an error to count on every sample.
        return self._file("memory.pressure").exists()


class CgroupV1Reader(CgroupReader):
    """``memory.usage_in_bytes``, ``memory.limit_in_bytes``, ``memory.stat``
    (hierarchical ``total_*`` counters), ``memory.oom_control``. v1's
    memory.stat has no kernel breakdown (its kernel memory is one counter,
    ``memory.kmem.usage_in_bytes``, reclaimable slab and all): the kernel's
    unreclaimable part is not served here (docs/facts.md)."""

    kind = "cgroup-v1"

    def usable(self) -> bool:
        return parsers.parse_int(self._file("memory.usage_in_bytes").read()) is not None

    def read(self) -> MemoryReading:
        known, limit = parsers.parse_limit(self._file("memory.limit_in_bytes").read())
        stat = parsers.parse_keyed(self._file("memory.stat").read())
        oom = parsers.parse_keyed(self._file("memory.oom_control").read())

        def total(key: str) -> int | None:
            return stat.get(f"total_{key}", stat.get(key))

        return MemoryReading(
            current_bytes=parsers.parse_int(self._file("memory.usage_in_bytes").read()),
            limit_bytes=limit, limit_known=known,
            anon_bytes=total("rss"), file_bytes=total("cache"),
            inactive_file_bytes=total("inactive_file"), shmem_bytes=total("shmem"),
            oom_kill_count=oom.get("oom_kill"),
        )
