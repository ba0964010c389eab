"""``make real-leak``'s end when the kernel kills nothing (benchmarks/real_leak.py
``LimitStall``): the workload stalled when its memory in use stopped growing at
the limit, not when memory.current first reached it (the page cache is
reclaimed under it while the leak goes on)."""

from __future__ import annotations

from memoryguard_kuberay.core.samples import Sample
from tests.core.helpers import real_leak

MIB = 1024**2
LIMIT = 2048 * MIB


def _stall() -> type:
    return real_leak().LimitStall  # type: ignore[no-any-return]


def _at(t: float, in_use_mib: float) -> Sample:
    # memory.current at the limit throughout; the page cache shrinks as in use grows.
    anon = int(in_use_mib * MIB)
    return Sample(time_s=t, memory_current_bytes=LIMIT, memory_max_bytes=LIMIT, anon_bytes=anon,
                  file_bytes=LIMIT - anon, inactive_file_bytes=0, shmem_bytes=0)


def test_the_stall_starts_when_memory_in_use_stops_growing_at_the_limit() -> None:
    stall = _stall()(LIMIT)
    for t in range(0, 200, 3):
        stall.add(_at(float(t), min(1800 + 6 * t, 2010)))  # 6 MiB/s until 35 s in, then held
        if t < 90:
            assert stall.stalled_since is None, t  # at the limit, still growing (or not held long enough)
    assert stall.stalled_since is not None and 24 <= stall.stalled_since <= 36, stall.stalled_since


def test_below_the_limit_is_never_a_stall() -> None:
    stall = _stall()(LIMIT)
    for t in range(0, 300, 3):
        stall.add(Sample(time_s=float(t), memory_current_bytes=LIMIT // 2, memory_max_bytes=LIMIT,
                         anon_bytes=LIMIT // 2, file_bytes=0, inactive_file_bytes=0, shmem_bytes=0))
    assert stall.stalled_since is None
