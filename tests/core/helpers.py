"""Builders of synthetic sample series for the policy's table tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

from memoryguard_kuberay.core.policy import PodWindow
from memoryguard_kuberay.core.policy.types import Decision
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

GIB = 1024**3
LIMIT = 32 * GIB
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module: a benchmark's pure parts are
    tested here, its runs are not (they print figures)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def real_leak() -> ModuleType:
    """``benchmarks/real_leak.py`` (``make real-leak``): its pure parts (the
    limit stall, the ladder it climbs)."""
    return benchmark("real_leak")


def cgroup_sample(t: float, used: int, limit: int, *, cache: int) -> Sample:
    """What a cgroup reads with ``used`` in anon and ``cache`` of page cache,
    half of it inactive (no store, no pressure figures)."""
    return Sample(time_s=float(t), memory_current_bytes=used + cache, memory_max_bytes=limit, anon_bytes=used,
                  file_bytes=cache, inactive_file_bytes=cache // 2, shmem_bytes=0, oom_kill_count=0)


def sample(t: float, frac: float | None, *, limit: int | None = LIMIT, psi_full: float | None = 0.1,
           store: float | None = 0.2, oom_kill: int | None = 0) -> Sample:
    ws = None if frac is None else int(frac * (limit or LIMIT))
    return Sample(
        time_s=t, memory_current_bytes=None if ws is None else ws + GIB, memory_max_bytes=limit,
        inactive_file_bytes=GIB, psi_full_avg10_pct=psi_full, psi_some_avg10_pct=psi_full,
        plasma_used_bytes=None if store is None else int(store * 8 * GIB), plasma_capacity_bytes=8 * GIB,
        oom_kill_count=oom_kill,
    )


def series(fn: Callable[[float], float | None], hours: float, step_s: float = 15.0, **kw: object) -> list[Sample]:
    n = int(hours * 3600 / step_s)
    return [sample(i * step_s, fn(i * step_s), **kw) for i in range(n + 1)]  # type: ignore[arg-type]


def run(samples: Iterable[Sample], settings: PolicySettings | None = None) -> list[tuple[float, Decision]]:
    """Replay samples as the operator would (``simulate``'s replay): every
    non-none decision up to the first rotation."""
    rep = replay("test", list(samples), settings or PolicySettings())
    return [(td.t_s, td.decision) for td in rep.decisions]


def window_of(samples: Iterable[Sample], settings: PolicySettings | None = None) -> PodWindow:
    w = PodWindow(settings or PolicySettings())
    for smp in samples:
        w.add(smp)
    return w


def first_rotation(decisions: list[tuple[float, Decision]]) -> float | None:
    return next((t for t, d in decisions if d.action.value == "rotate"), None)
