"""One sample from the chosen source and the object store: the sidecar's
hot path. It rediscovers its source when the Ray container's processes come
and go (a restarted container has new PIDs), and never raises."""

from __future__ import annotations

import os

from memoryguard_kuberay.core.answer import SOURCE_NONE
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.sidecar.cgroup import MemoryReading
from memoryguard_kuberay.sidecar.discovery import Source, discover, source_name
from memoryguard_kuberay.sidecar.files import PreadFile
from memoryguard_kuberay.sidecar.objectstore import StoreReading
from memoryguard_kuberay.sidecar.parsers import parse_kib

REDISCOVER_AFTER = 3  # consecutive samples without memory.current


class Sampler:
    def __init__(self, *, cgroup_root: str | None, proc_root: str, pattern: str,
                 limit_bytes: int | None) -> None:
        self.cgroup_root = cgroup_root
        self.proc_root = proc_root
        self.pattern = pattern
        self.limit_bytes = limit_bytes
        self.source: Source | None = None
        self.misses = 0
        self.discoveries = 0
        self.retired_errors: dict[str, int] = {}  # errors counted by sources since replaced
        # The node's /proc/meminfo (a container sees the node's): read only for
        # a container with no memory limit, whose ceiling is the node.
        self.meminfo = PreadFile(os.path.join(proc_root, "meminfo"))

    @property
    def source_name(self) -> str:
        return source_name(self.source) if self.source is not None else SOURCE_NONE

    def errors(self) -> dict[str, int]:
        out = dict(self.retired_errors)
        if self.source is not None:
            for k, v in self.source.errors().items():
                out[k] = out.get(k, 0) + v
        return out

    def _source_gone(self) -> bool:
        # An open descriptor outlives its file: a restarted Ray container has
        # new PIDs and a new cgroup while the old fds may still read. One
        # stat per sample tells.
        src = self.source
        return src is not None and src.pid is not None and not os.path.exists(f"{self.proc_root}/{src.pid}")

    def _retire(self) -> None:
        src = self.source
        if src is not None:
            for k, v in src.errors().items():
                self.retired_errors[k] = self.retired_errors.get(k, 0) + v
            src.close()
        self.source = None

    def _ensure_source(self) -> Source | None:
        if self.source is None or self.misses >= REDISCOVER_AFTER:
            self._retire()
            self.source = discover(cgroup_root=self.cgroup_root, proc_root=self.proc_root, pattern=self.pattern,
                                   limit_bytes=self.limit_bytes)
            self.discoveries += 1
            self.misses = 0
        return self.source

    def _last_reading(self) -> MemoryReading | None:
        """The gone container's final reading, through the descriptors still
        held: they read its cgroup until the cgroup is removed, and that
        reading is the one whose memory.events shows the OOM kill that ended
        it (the new container's counters start at 0). Then look again."""
        src = self.source
        last = src.read() if src is not None else None
        self._retire()
        return last if last is not None and last.current_bytes is not None else None

    def take(self, now_s: float, store: StoreReading) -> Sample:
        m = self._last_reading() if self._source_gone() else None
        if m is None:
            src = self._ensure_source()
            m = src.read() if src is not None else None
        if m is None or m.current_bytes is None:
            self.misses += 1
        else:
            self.misses = 0
        limit = None
        node_available = None
        if m is not None:
            # A limit file we could not read is unknown, which for the policy
            # is the same as no limit: it never projects against a guess.
            limit = m.limit_bytes if m.limit_known else None
            if m.limit_known and m.limit_bytes is None:
                node_available = mem_available(self.meminfo.read())
        return Sample(
            time_s=now_s,
            memory_current_bytes=m.current_bytes if m else None,
            memory_max_bytes=limit,
            anon_bytes=m.anon_bytes if m else None,
            file_bytes=m.file_bytes if m else None,
            inactive_file_bytes=m.inactive_file_bytes if m else None,
            shmem_bytes=m.shmem_bytes if m else None,
            plasma_used_bytes=store.used_bytes,
            plasma_capacity_bytes=store.capacity_bytes,
            plasma_spilled_bytes=store.spilled_bytes,
            psi_some_avg10_pct=m.psi_some_avg10_pct if m else None,
            psi_full_avg10_pct=m.psi_full_avg10_pct if m else None,
            oom_kill_count=m.oom_kill_count if m else None,
            memory_high_bytes=m.high_bytes if m is not None and m.high_known else None,
            high_events_count=m.high_events_count if m else None,
            max_events_count=m.max_events_count if m else None,
            node_available_bytes=node_available,
            slab_unreclaimable_bytes=m.slab_unreclaimable_bytes if m else None,
            sock_bytes=m.sock_bytes if m else None,
            kernel_stack_bytes=m.kernel_stack_bytes if m else None,
            pagetables_bytes=m.pagetables_bytes if m else None,
            percpu_bytes=m.percpu_bytes if m else None,
        )


def mem_available(data: bytes | None) -> int | None:
    """``MemAvailable`` of /proc/meminfo, in bytes (the kernel's estimate of
    what can be allocated without swapping), or None."""
    kib = parse_kib(data).get("MemAvailable")
    return None if kib is None else kib * 1024
