"""The kernel's own memory in "in use" (issue 59, 1): what reclaim cannot
take back is anon, shmem and the kernel's unreclaimable part (socket
buffers, unreclaimable slab, kernel stacks, page tables, per-CPU), where a
source gives it; a source that gives none (cgroup v1, old traces) reads as
it always did."""

from __future__ import annotations

import io
from pathlib import Path

from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.traces import read_trace, write_trace

MIB = 1 << 20


def test_in_use_counts_the_kernels_unreclaimable_memory() -> None:
    s = Sample(0, memory_current_bytes=1900 * MIB, memory_max_bytes=2048 * MIB, anon_bytes=1000 * MIB,
               file_bytes=100 * MIB, inactive_file_bytes=50 * MIB, shmem_bytes=100 * MIB,
               slab_unreclaimable_bytes=200 * MIB, sock_bytes=480 * MIB, kernel_stack_bytes=4 * MIB,
               pagetables_bytes=12 * MIB, percpu_bytes=4 * MIB)
    assert s.kernel_bytes == 700 * MIB
    assert s.unreclaimable_bytes == 1800 * MIB  # 88%: not "in use 54%" as anon + shmem alone read it
    assert round(s.used_fraction or 0, 2) == 0.88


def test_without_the_kernels_parts_in_use_is_anon_and_shmem() -> None:
    s = Sample(0, memory_current_bytes=1900 * MIB, memory_max_bytes=2048 * MIB, anon_bytes=1000 * MIB,
               inactive_file_bytes=50 * MIB, shmem_bytes=100 * MIB)
    assert s.kernel_bytes is None and s.unreclaimable_bytes == 1100 * MIB


def test_a_trace_keeps_the_kernel_columns_only_where_its_source_gave_them(tmp_path: Path) -> None:
    with_kernel = [Sample(t, memory_current_bytes=MIB, anon_bytes=MIB, shmem_bytes=0, sock_bytes=t * MIB)
                   for t in range(3)]
    without = [Sample(t, memory_current_bytes=MIB, anon_bytes=MIB, shmem_bytes=0) for t in range(3)]
    for samples, has in ((with_kernel, True), (without, False)):
        out = io.StringIO()
        write_trace(samples, out)
        header = out.getvalue().splitlines()[0].split(",")
        assert ("sock" in header) is has and ("slab_unreclaimable" in header) is has
        (tmp_path / "t.csv").write_text(out.getvalue())
        back = read_trace(tmp_path / "t.csv")
        assert [s.sock_bytes for s in back.samples] == [s.sock_bytes for s in samples]
