"""The shapes issue 59 judged detection on, each a leak and the healthy
twin a naive detector confuses with it: the kernel's own memory, spilling
that stalls, a limit lowered in place, batch peaks that grow while the
troughs stay flat. Deterministic for a seed, as traceshapes.py's."""

from __future__ import annotations

import random
from typing import Any

from memoryguard_kuberay.core.tracegen import DAY_S, Shape
from memoryguard_kuberay.core.traceshapes import LIMITS_GIB

# Issue 59, 1: the kernel's own memory. Each pair a leak and the healthy twin
# a detector of anon alone, or of memory.current, confuses with it.
KERNEL_KINDS: tuple[str, ...] = ("sock_leak", "sock_busy", "anon_leak_kernel_heavy", "kernel_heavy_steady")


def kernel_shape(kind: str, name: str, rng: random.Random, seed: int) -> Shape:
    """One pod of ``kind`` (KERNEL_KINDS), its parameters drawn from ``rng``.

    - ``sock_leak``: socket buffers (and the slab of their connections) of
      streams nobody reads grow 1-5% of the limit an hour, from 2-10 h in,
      under a steady worker whose anon stays where it was.
    - ``sock_busy``: its twin, a worker holding many connections (10-25% of
      its limit in the kernel) whose number follows the day's traffic.
    - ``anon_leak_kernel_heavy``: a slow anon leak on a small pod (2-4 GiB,
      KubeRay's sample size) with 5-10% of it in the kernel: the kill comes
      while anon + shmem read only 90-95%.
    - ``kernel_heavy_steady``: its twin, the same pod steady with 80-88%
      of it in use, the kernel's part included."""
    u = rng.uniform
    if kind in ("sock_leak", "sock_busy"):
        saw, kernel, wave = u(0.0, 0.08), u(0.1, 0.25), u(0.05, 0.15)
        common: dict[str, Any] = {"limit_gib": rng.choice([8.0, 16.0, 32.0]), "sawtooth_amp": saw,
                                  "sawtooth_period_s": u(900, 3600), "duration_s": 48 * 3600.0,
                                  "diurnal_phase_s": u(0, DAY_S)}
        if kind == "sock_leak":
            return Shape(name, "leak", base=u(0.35, 0.55), kernel_base=u(0.02, 0.08), kernel_leak_per_h=u(0.01, 0.05),
                         leak_start_s=u(2, 10) * 3600, seed=seed, **common)
        # At most 86% in use at the day's peak: busy, never near the limit.
        return Shape(name, "healthy", base=u(0.3, max(0.31, 0.86 - saw - kernel - wave)), kernel_base=kernel,
                     kernel_wave_amp=wave, seed=seed, **common)
    kernel = u(0.05, 0.1)
    common = {"limit_gib": rng.choice([2.0, 3.0, 4.0]), "kernel_base": kernel, "sawtooth_amp": u(0.0, 0.03),
              "duration_s": 60 * 3600.0}
    if kind == "anon_leak_kernel_heavy":
        return Shape(name, "leak", base=u(0.35, 0.5), leak_per_h=u(0.008, 0.03), leak_start_s=u(1, 6) * 3600,
                     seed=seed, **common)
    return Shape(name, "healthy", base=u(0.8, 0.88) - kernel - 0.03, seed=seed, **common)


def kernel_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` pods of each of KERNEL_KINDS."""
    rng = random.Random(seed)
    return [kernel_shape(kind, f"{kind}_{k:02d}", rng, seed * 1000 + i * 100 + k)
            for k in range(n) for i, kind in enumerate(KERNEL_KINDS)]


def spill_stall_shapes(n: int, seed: int) -> list[Shape]:
    """Issue 59, 3: ``n`` pipelines that hold the object store at 80-90%
    while Ray spills to disk, each once with its spilling stopped 4-16 h in
    (the volume full: the bytes on disk hold still, the store fills 5-20
    points an hour) and once as its healthy twin, spilling all along."""
    rng = random.Random(seed)
    u = rng.uniform
    out = []
    for k in range(n):
        cap = u(0.15, 0.3)
        common: dict[str, Any] = dict(limit_gib=rng.choice(LIMITS_GIB), noise=u(0.002, 0.01), store_capacity_frac=cap,
                                      store_base=u(0.05, 0.3), base=u(0.15, 0.8 - cap), duration_s=36 * 3600.0,
                                      store_hold=u(0.8, 0.88), store_fill_s=u(900, 3600), spill_gib_per_h=u(0.5, 5.0),
                                      diurnal_phase_s=u(0, DAY_S))
        out.append(Shape(f"spill_stalled_{k:02d}", "plasma_leak", spill_stall_at_s=u(4, 16) * 3600,
                         stall_fill_per_h=u(0.05, 0.2), seed=seed * 1000 + 2 * k, **common))
        out.append(Shape(f"spill_moving_{k:02d}", "healthy", seed=seed * 1000 + 2 * k + 1, **common))
    return out



def lowered_limit_shapes(n: int, seed: int) -> list[Shape]:
    """Issue 59, 5: ``n`` pods whose limit is lowered in place (VPA, a
    resize down) to 55-80% of what it was, 3-20 h in, each once leaking
    (from up to 2 h before the change, reaching the new limit 4-30 h after
    it) and once as its healthy twin, flat at 45-80% of the new limit."""
    rng = random.Random(seed)
    u = rng.uniform
    out = []
    for k in range(n):
        to = u(0.55, 0.8)  # the new limit, of the first
        base = to * u(0.45, 0.8)
        at = u(3, 20) * 3600
        common: dict[str, Any] = dict(limit_gib=rng.choice(LIMITS_GIB), noise=u(0.002, 0.01), base=base,
                                      sawtooth_amp=rng.choice([0.0, u(0.01, 0.04)]), limit_raise_at_s=at,
                                      diurnal_phase_s=u(0, DAY_S), duration_s=60 * 3600.0)
        common["limit_raise_to_gib"] = common["limit_gib"] * to
        leak_at = max(0.0, at - u(0, 2) * 3600)
        leak = (to - base) / (max(0.0, at - leak_at) / 3600 + u(4, 30))
        out.append(Shape(f"lowered_leak_{k:02d}", "leak", leak_start_s=leak_at, leak_per_h=leak,
                         seed=seed * 1000 + 2 * k, **common))
        out.append(Shape(f"lowered_flat_{k:02d}", "healthy", seed=seed * 1000 + 2 * k + 1, **common))
    return out


def growing_peaks_shapes(n: int, seed: int) -> list[Shape]:
    """Issue 59, 4: ``n`` batch workers whose troughs stay flat at 30-60%
    of the limit while 2-5 minute peaks every 20-90 minutes stand 10-30%
    above them, each once with its peaks growing 0.6-2% of the limit an hour
    from 0-6 h in (the kernel kills it at a peak) and once as its healthy
    twin, its peaks as high as the leak's begin or higher (up to 83% of the
    limit), steady."""
    rng = random.Random(seed)
    u = rng.uniform
    out = []
    for k in range(n):
        base, amp = u(0.3, 0.6), u(0.1, 0.3)
        common: dict[str, Any] = dict(limit_gib=rng.choice(LIMITS_GIB), noise=u(0.002, 0.01), base=base,
                                      spike_every_s=u(20, 90) * 60, spike_len_s=u(2, 5) * 60,
                                      diurnal_phase_s=u(0, DAY_S), duration_s=60 * 3600.0)
        out.append(Shape(f"peaks_growing_{k:02d}", "leak", spike_amp=amp, spike_grow_per_h=u(0.006, 0.02),
                         leak_start_s=u(0, 6) * 3600, seed=seed * 1000 + 2 * k, **common))
        # Steady peaks up to 83% of the limit (the store's pages ride on them: about 88%).
        out.append(Shape(f"peaks_steady_{k:02d}", "healthy", spike_amp=min(0.83 - base, amp + u(0, 0.2)),
                         seed=seed * 1000 + 2 * k + 1, **common))
    return out

