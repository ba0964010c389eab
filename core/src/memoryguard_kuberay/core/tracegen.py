"""Synthetic memory traces of Ray worker containers, for the project's own
examples, tests and demo (``memoryguard-kuberay gen-traces``).

A trace is a sum of the behaviours the field reports, each a small function
of time: a baseline, a garbage collector's sawtooth, load that follows the
day, warm-up after start, a cache that fills to a bound, allocator
fragmentation that flattens out, short spikes, noise, and leaks (steady, slow,
late onset, only at peak hours) or Plasma objects never released. A leaking
trace ends on the row where the working set reaches the limit, with
``oom_kill`` = 1, as a kernel OOM kill would. Deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Any

from memoryguard_kuberay.core.samples import Sample

GIB = 1024**3
DAY_S = 86400.0


@dataclasses.dataclass(frozen=True)
class Shape:
    """Parameters of one synthetic pod. Fractions are of the memory limit."""

    name: str
    kind: str  # healthy | leak | plasma_leak
    limit_gib: float = 32.0
    duration_s: float = 24 * 3600.0
    interval_s: float = 15.0
    base: float = 0.4
    noise: float = 0.005
    sawtooth_amp: float = 0.0
    sawtooth_period_s: float = 1200.0
    diurnal_amp: float = 0.0
    diurnal_phase_s: float = 0.0
    warmup_amp: float = 0.0
    warmup_tau_s: float = 900.0
    cache_amp: float = 0.0
    cache_tau_s: float = 4 * 3600.0
    spike_amp: float = 0.0
    spike_every_s: float = 5400.0
    spike_len_s: float = 120.0
    leak_per_h: float = 0.0
    leak_start_s: float = 0.0
    leak_peak_only: bool = False  # grows only while the daily load is high
    store_capacity_frac: float = 0.25
    store_base: float = 0.2  # of store capacity
    store_leak_per_h: float = 0.0  # of store capacity
    seed: int = 0


def _leak(shape: Shape, t: float) -> float:
    """A steady leak's size at ``t`` (peak-hours leaks accumulate in ``generate``)."""
    if shape.leak_per_h <= 0 or t <= shape.leak_start_s:
        return 0.0
    return shape.leak_per_h * (t - shape.leak_start_s) / 3600.0


def generate(shape: Shape) -> Iterator[Sample]:
    rng = random.Random(shape.seed)
    limit = int(shape.limit_gib * GIB)
    cap = int(limit * shape.store_capacity_frac)
    w = 2 * math.pi / DAY_S
    leak_acc = 0.0
    t = 0.0
    while t <= shape.duration_s:
        frac = shape.base + rng.gauss(0.0, shape.noise)
        if shape.sawtooth_amp:
            frac += shape.sawtooth_amp * ((t % shape.sawtooth_period_s) / shape.sawtooth_period_s)
        if shape.diurnal_amp:
            frac += shape.diurnal_amp * (0.5 + 0.5 * math.sin(w * (t + shape.diurnal_phase_s)))
        if shape.warmup_amp:
            frac += shape.warmup_amp * (1 - math.exp(-t / shape.warmup_tau_s))
        if shape.cache_amp:
            frac += shape.cache_amp * (1 - math.exp(-t / shape.cache_tau_s))
        if shape.spike_amp and (t % shape.spike_every_s) < shape.spike_len_s:
            frac += shape.spike_amp
        if shape.leak_peak_only:
            if t > shape.leak_start_s:
                day = max(0.0, math.sin(w * (t + shape.diurnal_phase_s)))
                leak_acc += day * 2 * shape.leak_per_h * shape.interval_s / 3600
            frac += leak_acc
        else:
            frac += _leak(shape, t)
        store_frac = shape.store_base + rng.gauss(0.0, 0.01)
        if shape.store_leak_per_h and t > shape.leak_start_s:
            store_frac += shape.store_leak_per_h * (t - shape.leak_start_s) / 3600.0
        store_frac = min(1.0, max(0.0, store_frac))
        plasma = int(store_frac * cap)
        ws = int(max(0.05, frac) * limit) + plasma
        oom = ws >= limit
        ws = min(ws, limit)
        inactive = int(0.025 * limit * (1 + 0.2 * rng.random()))
        file_b = inactive + int(0.015 * limit)
        shmem = plasma + int(0.001 * limit)
        pressure = 60.0 if oom else (max(0.0, (ws / limit - 0.9) * 400) if ws / limit > 0.9 else rng.random() * 0.4)
        yield Sample(
            time_s=t, memory_current_bytes=ws + inactive, memory_max_bytes=limit,
            anon_bytes=max(0, ws - shmem - (file_b - inactive)), file_bytes=file_b, inactive_file_bytes=inactive,
            shmem_bytes=shmem, plasma_used_bytes=plasma, plasma_capacity_bytes=cap,
            psi_some_avg10_pct=round(min(100.0, pressure * 1.5), 2), psi_full_avg10_pct=round(min(100.0, pressure), 2),
            oom_kill_count=1 if oom else 0,
        )
        if oom:
            return
        t += shape.interval_s


def example_shapes(seed: int = 7) -> list[Shape]:
    """The project's own example set: one of each behaviour."""
    return [
        Shape("healthy_gc_sawtooth", "healthy", base=0.45, sawtooth_amp=0.3, sawtooth_period_s=1800, seed=seed),
        Shape("healthy_daily_load", "healthy", limit_gib=48, base=0.3, diurnal_amp=0.45, duration_s=48 * 3600,
              seed=seed + 1),
        Shape("healthy_model_warmup", "healthy", limit_gib=64, base=0.12, warmup_amp=0.6, warmup_tau_s=1200,
              seed=seed + 2),
        Shape("healthy_cache_fill", "healthy", base=0.25, cache_amp=0.5, cache_tau_s=5 * 3600, duration_s=36 * 3600,
              seed=seed + 3),
        Shape("healthy_batch_spikes", "healthy", base=0.55, spike_amp=0.38, spike_len_s=150, seed=seed + 4),
        Shape("fragmentation_flattens", "healthy", base=0.3, cache_amp=0.45, cache_tau_s=2 * 3600,
              duration_s=36 * 3600, seed=seed + 5),
        Shape("leak_steady", "leak", limit_gib=64, base=0.35, leak_per_h=0.07, sawtooth_amp=0.06, seed=seed + 6),
        Shape("leak_creeping", "leak", base=0.4, leak_per_h=0.018, diurnal_amp=0.06, duration_s=60 * 3600,
              seed=seed + 7),
        Shape("leak_after_hours", "leak", base=0.45, leak_per_h=0.1, leak_start_s=5 * 3600, seed=seed + 8),
        Shape("leak_jittery", "leak", limit_gib=64, base=0.35, leak_per_h=0.045, noise=0.03, duration_s=40 * 3600,
              seed=seed + 9),
        Shape("leak_peak_hours", "leak", limit_gib=48, base=0.35, diurnal_amp=0.1, leak_per_h=0.04,
              leak_peak_only=True, duration_s=72 * 3600, seed=seed + 10),
        Shape("plasma_never_released", "plasma_leak", limit_gib=96, base=0.2, store_capacity_frac=0.3,
              store_base=0.15, store_leak_per_h=0.06, leak_start_s=3600, seed=seed + 11),
    ]


def random_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` pods drawn from wide parameter ranges, for robustness checks on
    behaviour the policy was never shown (about a third leak)."""
    rng = random.Random(seed)
    out: list[Shape] = []
    for i in range(n):
        u = rng.uniform
        common: dict[str, Any] = dict(limit_gib=rng.choice([16.0, 32.0, 48.0, 64.0, 96.0]), seed=seed * 1000 + i,
                      noise=u(0.002, 0.02), store_base=u(0.1, 0.35), diurnal_phase_s=u(0, DAY_S))
        kind = rng.choice(["healthy", "healthy", "healthy", "leak", "leak", "plasma_leak"])
        if kind == "healthy":
            s = Shape(f"rand{i:03d}_healthy", "healthy", base=u(0.15, 0.4), duration_s=u(24, 48) * 3600,
                      sawtooth_amp=rng.choice([0.0, u(0.05, 0.3)]), sawtooth_period_s=u(300, 3600),
                      diurnal_amp=rng.choice([0.0, u(0.1, 0.4)]),
                      warmup_amp=rng.choice([0.0, u(0.1, 0.45)]), warmup_tau_s=u(300, 2400),
                      cache_amp=rng.choice([0.0, u(0.1, 0.35)]), cache_tau_s=u(1, 6) * 3600,
                      spike_amp=rng.choice([0.0, u(0.1, 0.35)]), spike_len_s=u(30, 180), **common)
            # Keep a healthy pod's peaks below the limit: it must not OOM by construction.
            peak = (s.store_base * s.store_capacity_frac + s.base + s.sawtooth_amp + s.diurnal_amp
                    + s.warmup_amp + s.cache_amp + s.spike_amp + 0.1)
            if peak > 0.97:
                scale = 0.87 / (peak - 0.1)
                s = dataclasses.replace(s, base=s.base * scale, sawtooth_amp=s.sawtooth_amp * scale,
                                        diurnal_amp=s.diurnal_amp * scale, warmup_amp=s.warmup_amp * scale,
                                        cache_amp=s.cache_amp * scale, spike_amp=s.spike_amp * scale)
        elif kind == "leak":
            s = Shape(f"rand{i:03d}_leak", "leak", base=u(0.2, 0.5), duration_s=120 * 3600,
                      leak_per_h=10 ** u(-1.8, -1.1), leak_start_s=rng.choice([0.0, u(2, 10) * 3600]),
                      leak_peak_only=rng.random() < 0.2, sawtooth_amp=rng.choice([0.0, u(0.03, 0.12)]),
                      sawtooth_period_s=u(300, 2400), diurnal_amp=rng.choice([0.0, u(0.03, 0.12)]),
                      warmup_amp=rng.choice([0.0, u(0.05, 0.2)]), **common)
        else:
            s = Shape(f"rand{i:03d}_plasma", "plasma_leak", base=u(0.15, 0.35), duration_s=48 * 3600,
                      store_leak_per_h=u(0.02, 0.12), leak_start_s=u(0, 6) * 3600, **common)
        out.append(s)
    return out


def labels_for(shape: Shape, samples: list[Sample]) -> dict[str, object]:
    """The truth about a generated trace, in shared/traces' labels.json form."""
    oom_at = next((s.time_s for s in samples if s.oom_kill_count), None)
    full_at = next((s.time_s for s in samples if (s.store_fraction or 0) >= 0.95), None)
    leaking = shape.leak_per_h > 0 or shape.store_leak_per_h > 0
    return {
        "kind": shape.kind,
        "leak_start_s": int(shape.leak_start_s) if leaking else None,
        "oom_at_s": None if oom_at is None else int(oom_at),
        "plasma_full_at_s": None if full_at is None or shape.kind != "plasma_leak" else int(full_at),
        "rows": len(samples),
    }
