"""The catalogue of trace shapes (tracegen.py makes the samples): the
project's named examples, one shape per behaviour the field reports with
its parameters drawn from wide ranges, and random mixes of them. Each is
deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from memoryguard_kuberay.core.tracegen import DAY_S, GIB, Shape


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
        # Issue 13's behaviours, one of each, then outages and missing columns.
        *(behaviour_shape(b, name, random.Random(seed * 100 + k), seed + 20 + k)
          for k, (b, name) in enumerate(zip(BEHAVIOURS, EXAMPLE_NAMES))),
        Shape("fragmentation_with_gaps", "healthy", base=0.3, cache_amp=0.45, cache_tau_s=2 * 3600,
              duration_s=36 * 3600, gaps=5, seed=seed + 40),
        Shape("leak_with_gaps", "leak", base=0.4, leak_per_h=0.03, sawtooth_amp=0.08, gaps=5,
              duration_s=60 * 3600, seed=seed + 41),
        Shape("leak_no_psi_no_store", "leak", limit_gib=24, base=0.3, leak_per_h=0.05, no_psi=True,
              no_store_metrics=True, duration_s=60 * 3600, seed=seed + 42),
        # Issue 39: growth that begins after half a day flat (the whole
        # window's trend lags it), and its healthy twin, a ramp that holds.
        Shape("leak_after_flat_day", "leak", base=0.45, leak_per_h=0.18, leak_start_s=12 * 3600,
              duration_s=18 * 3600, seed=seed + 43),
        Shape("healthy_ramp_after_flat_day", "healthy", base=0.45, ramp_at_s=12 * 3600, ramp_to=0.25,
              ramp_s=3600, duration_s=24 * 3600, seed=seed + 44),
    ]


EXAMPLE_NAMES = ("healthy_store_held_full", "healthy_bursts", "healthy_daily_peak", "leak_sudden",
                 "leak_epoch_residue", "leak_multiday_slow", "leak_cache_masked", "healthy_cache_full",
                 "healthy_limit_raised", "leak_limit_raised", "healthy_epochs")


MIB = 1024**2
LIMITS_GIB = (16.0, 24.0, 32.0, 48.0, 64.0, 96.0)


def behaviour_shape(behaviour: str, name: str, rng: random.Random, seed: int) -> Shape:
    """One pod showing a behaviour the field reports (issue 13), with its
    parameters drawn from wide ranges. ``BEHAVIOURS`` lists them."""
    u = rng.uniform
    limit = rng.choice(LIMITS_GIB)
    cap = u(0.15, 0.3)
    store_base = u(0.05, 0.3)
    store = cap * store_base  # the store's share of the limit, charged as shmem
    common: dict[str, Any] = dict(limit_gib=limit, seed=seed, noise=u(0.002, 0.012), store_capacity_frac=cap,
                                  store_base=store_base, diurnal_phase_s=u(0, DAY_S))
    if behaviour == "store_held_full":
        # A pipeline keeps Plasma 90-100% full for a day and Ray spills the rest: no leak.
        return Shape(name, "healthy", base=u(0.15, 0.85 - cap), duration_s=u(24, 36) * 3600,
                     store_hold=u(0.9, 1.02), store_fill_s=u(900, 3600), spill_gib_per_h=u(0.5, 5.0),
                     sawtooth_amp=rng.choice([0.0, u(0.02, 0.06)]), sawtooth_period_s=u(300, 1800), **common)
    if behaviour == "bursts":
        return Shape(name, "healthy", base=u(0.3, 0.75) - store, duration_s=u(24, 48) * 3600,
                     burst_to=u(0.96, 0.99), burst_len_s=(240.0, 480.0), burst_gap_s=(1800.0, 5400.0),
                     sawtooth_amp=rng.choice([0.0, u(0.02, 0.08)]), sawtooth_period_s=u(300, 1800), **common)
    if behaviour == "daily_peak":
        peak, amp = u(0.87, 0.92), u(0.35, 0.7)
        return Shape(name, "healthy", base=peak - amp - store - 0.01, diurnal_amp=amp,
                     duration_s=u(48, 72) * 3600, **common)
    if behaviour == "sudden_leak":
        base = u(0.25, 0.6) - store
        saw = rng.choice([0.0, u(0.02, 0.1)])
        to_oom_h = u(45, 70) / 60
        return Shape(name, "leak", base=base, sawtooth_amp=saw, sawtooth_period_s=u(300, 1800),
                     leak_start_s=u(3, 30) * 3600, leak_per_h=(1 - base - store - saw / 2) / to_oom_h,
                     duration_s=40 * 3600, **common)
    if behaviour == "epoch_residue":
        amp = u(0.1, 0.3)
        residue = u(210, 390) * MIB / (limit * GIB)
        epoch = (u(2400, 3000), u(4800, 5400))
        per_h = residue * 3600 / ((epoch[0] + epoch[1]) / 2)
        base = max(0.05, 1 - store - amp - per_h * u(30, 50))
        return Shape(name, "leak", base=base, epoch_amp=amp, epoch_s=epoch, epoch_residue=residue,
                     duration_s=150 * 3600, **common)
    if behaviour == "epochs_healthy":
        # Training epochs that climb and give it all back, peaking high.
        amp = u(0.1, 0.35)
        return Shape(name, "healthy", base=u(0.8, 0.92) - amp - store, epoch_amp=amp,
                     epoch_s=(u(2400, 3000), u(4800, 5400)), duration_s=u(36, 60) * 3600, **common)
    if behaviour == "multiday_slow":
        per_h = u(100, 200) * MIB / (limit * GIB)
        swing = rng.choice([0.0, u(0.02, 0.08)])
        base = max(0.05, 1 - store - swing - per_h * u(60, 90))
        return Shape(name, "leak", base=base, leak_per_h=per_h, diurnal_amp=swing, sawtooth_amp=u(0.0, 0.04),
                     sawtooth_period_s=u(300, 1800), duration_s=200 * 3600, **common)
    if behaviour == "cache_masked_leak":
        base = u(0.15, 0.45) - store
        return Shape(name, "leak", base=base, leak_per_h=(1 - base - store) / u(10, 60), cache_mask_to=u(0.96, 0.99),
                     cache_active_share=u(0.0, 0.9), duration_s=100 * 3600, **common)
    if behaviour == "cache_full_healthy":
        return Shape(name, "healthy", base=u(0.2, 0.6) - store, cache_mask_to=u(0.96, 0.99),
                     cache_active_share=u(0.0, 0.9), sawtooth_amp=rng.choice([0.0, u(0.02, 0.1)]),
                     duration_s=u(24, 48) * 3600, **common)
    if behaviour in ("limit_raised", "limit_raised_leak"):
        base = u(0.4, 0.7) - store
        to = limit * u(1.25, 2.0)
        room = to / limit - (base + store)  # the new room, in units of the first limit
        grow = room * u(0.4, 0.8) if behaviour == "limit_raised" else 0.0
        raise_at = u(3, 20) * 3600
        # The leak starts up to 2 h before the resize and carries on into the new room.
        leak_at = max(0.0, raise_at - u(0, 2) * 3600)
        leak = 0.0 if behaviour == "limit_raised" else (room + 1 - base - store) / u(8, 30)
        return Shape(name, "healthy" if behaviour == "limit_raised" else "leak", base=base, leak_start_s=leak_at,
                     limit_raise_at_s=raise_at, limit_raise_to_gib=to, grow_into=grow, grow_s=u(0.5, 4) * 3600,
                     leak_per_h=leak, sawtooth_amp=rng.choice([0.0, u(0.02, 0.06)]), duration_s=60 * 3600, **common)
    if behaviour in FIELD_BEHAVIOURS:
        return _field_shape(behaviour, name, rng, common, store)
    raise ValueError(f"unknown behaviour {behaviour!r}")


def _field_shape(behaviour: str, name: str, rng: random.Random, common: dict[str, Any], store: float) -> Shape:
    """Issue 39's shapes, each a leak and its healthy twin: a full store
    with no spill figure, a serving pod's day, memory.high, no limit."""
    u = rng.uniform
    if behaviour in ("store_full_unspilled", "store_full_unspilled_leak"):
        # A pipeline fills Plasma and holds it full (its shmem climbing
        # 2-17 GiB/h while it fills); Ray gives no spilled-bytes figure.
        hold = u(0.9, 1.02)
        full = common["store_capacity_frac"] * min(1.0, hold)
        base = u(0.15, 0.5)
        saw = rng.choice([0.0, u(0.02, 0.06)])
        leak = behaviour.endswith("_leak")
        to_oom_h = u(3, 20)
        return Shape(name, "leak" if leak else "healthy", base=base, store_hold=hold, store_fill_s=u(900, 3600),
                     no_spill_metric=True, sawtooth_amp=saw, sawtooth_period_s=u(300, 1800),
                     leak_start_s=u(2, 10) * 3600 if leak else 0.0,
                     leak_per_h=(1 - base - full - saw) / to_oom_h if leak else 0.0,
                     duration_s=u(30, 40) * 3600, **common)
    if behaviour in ("morning_surge", "traffic_leak"):
        # Traffic from a morning hour, ramped up in 30-60 minutes, held for
        # the day, released at night. Healthy: 86-93% at the peak, every day
        # alike. The leak grows only while traffic flows (none at night).
        base = u(0.15, 0.4)
        hold_h = u(8, 14)
        leak = behaviour == "traffic_leak"
        peak = u(0.6, 0.8) if leak else u(0.86, 0.93)
        days_to_oom = u(2, 5)
        return Shape(name, "leak" if leak else "healthy", base=base, surge_to=peak - base - store,
                     surge_at_s=u(6, 10) * 3600, surge_ramp_s=u(1800, 3600), surge_hold_s=hold_h * 3600,
                     leak_in_surge=leak, leak_per_h=(1 - peak) / (days_to_oom * (hold_h + 1)) if leak else 0.0,
                     duration_s=(days_to_oom + 3) * 24 * 3600 if leak else u(72, 96) * 3600, **common)
    if behaviour in ("memory_high_held", "memory_high_leak"):
        # memory.high below the limit (MemoryQoS's request + 90% of the way
        # to the limit, or set by hand): the pod lives there, its page cache
        # reclaimed and its allocations past it throttled at peak hours.
        high = u(0.75, 0.95)
        give = u(0.15, 0.5)
        if behaviour == "memory_high_held":
            past = u(0.02, 0.12)  # asked past memory.high at the day's peak
            give = min(give, 0.5 * (1 - high) / past)
            amp = u(0.1, 0.3)
            return Shape(name, "healthy", base=high + past - amp - store, diurnal_amp=amp, memory_high=high,
                         high_give=give, cache_mask_to=u(0.9, 0.99), cache_active_share=u(0.2, 0.8),
                         duration_s=u(48, 72) * 3600, **common)
        # A leak under it: slowed by the throttle, it still meets the limit.
        per_h = (1 - high) / give / u(4, 20)
        return Shape(name, "leak", base=max(0.1, high - store - per_h * u(2, 8)), leak_per_h=per_h,
                     memory_high=high, high_give=give, cache_mask_to=u(0.9, 0.99),
                     diurnal_amp=rng.choice([0.0, u(0.02, 0.05)]), duration_s=60 * 3600, **common)
    # No memory limit: the pod could take 1.2-3 times what it was sized for
    # before the node (its other pods at 30-60%) runs out.
    others = u(0.3, 0.6)
    room = u(1.2, 3.0)
    node = dict(node_gib=common["limit_gib"] * room / (1 - others), node_others=others)
    base = u(0.3, 0.6)
    if behaviour == "no_limit_daily":
        amp = min(u(0.1, 0.4), 0.8 * room - base - store)
        return Shape(name, "healthy", base=base, diurnal_amp=amp, cache_mask_to=u(0.0, 0.5),
                     duration_s=u(48, 72) * 3600, **node, **common)
    return Shape(name, "leak", base=base, leak_start_s=u(0, 10) * 3600, leak_per_h=(room - base - store) / u(5, 40),
                 diurnal_amp=rng.choice([0.0, u(0.02, 0.1)]), duration_s=60 * 3600, **node, **common)


# Issue 39's shapes, each pair a leak and its healthy twin; drawn apart from
# BEHAVIOURS so the random sets drawn before them stay what they were.
FIELD_BEHAVIOURS: tuple[str, ...] = ("store_full_unspilled", "store_full_unspilled_leak", "morning_surge",
                                     "traffic_leak", "memory_high_held", "memory_high_leak", "no_limit_daily",
                                     "no_limit_leak")


BEHAVIOURS: tuple[str, ...] = ("store_held_full", "bursts", "daily_peak", "sudden_leak", "epoch_residue",
                               "multiday_slow", "cache_masked_leak", "cache_full_healthy", "limit_raised",
                               "limit_raised_leak", "epochs_healthy")


def _legacy_shape(i: int, rng: random.Random, seed: int) -> Shape:
    """The behaviours of the first examples, drawn from wide ranges."""
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
        return s
    if kind == "leak":
        return Shape(f"rand{i:03d}_leak", "leak", base=u(0.2, 0.5), duration_s=120 * 3600,
                     leak_per_h=10 ** u(-1.8, -1.1), leak_start_s=rng.choice([0.0, u(2, 10) * 3600]),
                     leak_peak_only=rng.random() < 0.2, sawtooth_amp=rng.choice([0.0, u(0.03, 0.12)]),
                     sawtooth_period_s=u(300, 2400), diurnal_amp=rng.choice([0.0, u(0.03, 0.12)]),
                     warmup_amp=rng.choice([0.0, u(0.05, 0.2)]), **common)
    return Shape(f"rand{i:03d}_plasma", "plasma_leak", base=u(0.15, 0.35), duration_s=48 * 3600,
                 store_leak_per_h=u(0.02, 0.12), leak_start_s=u(0, 6) * 3600, **common)


def field_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` pods of each of issue 39's shapes (``FIELD_BEHAVIOURS``), drawn
    from wide ranges."""
    rng = random.Random(seed)
    return [behaviour_shape(b, f"{b}_{k:02d}", random.Random(rng.random()), seed * 1000 + i)
            for k in range(n) for i, b in enumerate(FIELD_BEHAVIOURS, k * len(FIELD_BEHAVIOURS))]


# The known limit (docs/how-it-works.md): healthy pods whose first climb
# after a flat stretch goes at a leak's pace. Until such a climb stops or
# falls it is a sudden leak's, and some are rotated; a change to the rules
# shows on these what it costs them (make detection-sets).


def ramp_after_flat_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` ramps after 2-12 h flat, by 15-35% of the limit over half an
    hour to two, then held (a cache filled, a model loaded)."""
    rng = random.Random(seed)
    u = rng.uniform
    out = []
    for k in range(n):
        at = u(2, 12) * 3600
        out.append(Shape(f"ramp_after_flat_{k:02d}", "healthy", base=0.45, ramp_at_s=at, ramp_to=u(0.15, 0.35),
                         ramp_s=u(0.5, 2) * 3600, duration_s=at + 8 * 3600, seed=seed * 1000 + k))
    return out


def sawtooth_after_flat_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` sawtooths begun after 1-8 h flat at 30-60% of the limit (work
    started on an idle worker): teeth of 8-40 minutes, each climbing by 5%
    of the limit or more, up to 88% at most."""
    rng = random.Random(seed)
    u = rng.uniform
    out = []
    for k in range(n):
        base, period, at = u(0.3, 0.6), u(480, 2400), u(1, 8) * 3600
        out.append(Shape(f"sawtooth_after_flat_{k:02d}", "healthy", base=base, sawtooth_amp=u(0.05, 0.88 - base),
                         sawtooth_period_s=period, sawtooth_at_s=at, interval_s=rng.choice([5.0, 15.0, 60.0]),
                         duration_s=at + 6 * 3600, seed=seed * 1000 + k))
    return out


def random_shapes(n: int, seed: int) -> list[Shape]:
    """``n`` pods drawn from wide parameter ranges, for robustness checks on
    behaviour the policy was never shown: half the first examples' kinds,
    half the behaviours of ``BEHAVIOURS``; any of them may have sidecar
    outages, no PSI, or no object-store metrics."""
    rng = random.Random(seed)
    out: list[Shape] = []
    for i in range(n):
        if rng.random() < 0.5:
            s = _legacy_shape(i, rng, seed)
        else:
            b = rng.choice(BEHAVIOURS)
            s = behaviour_shape(b, f"rand{i:03d}_{b}", rng, seed * 1000 + i)
        # (A Plasma leak keeps its store metrics: without them it is not labelled.)
        s = dataclasses.replace(s, gaps=rng.choice([0, 0, 0, rng.randint(1, 6)]), no_psi=rng.random() < 0.15,
                                no_store_metrics=s.kind != "plasma_leak" and rng.random() < 0.15)
        out.append(s)
    return out
