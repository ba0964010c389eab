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

import bisect
import dataclasses
import math
import random
from collections.abc import Iterator

from memoryguard_kuberay.core.constants import KUBELET_EVICTION_MEMORY_AVAILABLE_BYTES, RAY_SPILL_THRESHOLD
from memoryguard_kuberay.core.samples import Sample

GIB = 1024**3
DAY_S = 86400.0


@dataclasses.dataclass(frozen=True)
class Shape:
    """Parameters of one synthetic pod. Fractions are of the memory limit
    (the first one, when ``limit_raise_at_s`` raises it)."""

    name: str
    kind: str  # healthy | leak | plasma_leak
    limit_gib: float = 32.0
    duration_s: float = 24 * 3600.0
    interval_s: float = 15.0
    base: float = 0.4
    noise: float = 0.005
    sawtooth_amp: float = 0.0
    sawtooth_period_s: float = 1200.0
    sawtooth_at_s: float = 0.0  # the sawtooth starts here (work begun after an idle stretch)
    diurnal_amp: float = 0.0
    diurnal_phase_s: float = 0.0
    warmup_amp: float = 0.0
    warmup_tau_s: float = 900.0
    cache_amp: float = 0.0
    cache_tau_s: float = 4 * 3600.0
    spike_amp: float = 0.0
    spike_every_s: float = 5400.0
    spike_len_s: float = 120.0
    spike_grow_per_h: float = 0.0  # the spikes grow by this (of the limit) an hour from leak_start_s; troughs stay
    leak_per_h: float = 0.0
    leak_start_s: float = 0.0
    leak_peak_only: bool = False  # grows only while the daily load is high
    store_capacity_frac: float = 0.25
    store_base: float = 0.2  # of store capacity
    store_leak_per_h: float = 0.0  # of store capacity
    # Bursts: the working set jumps to this share of the limit for
    # burst_len_s (drawn from the range) every burst_gap_s (drawn), no OOM.
    burst_to: float = 0.0
    burst_len_s: tuple[float, float] = (240.0, 480.0)
    burst_gap_s: tuple[float, float] = (1800.0, 5400.0)
    # Epochs: the working set climbs by epoch_amp through each epoch (its
    # length drawn from epoch_s) and drops back, leaving epoch_residue behind.
    epoch_amp: float = 0.0
    epoch_s: tuple[float, float] = (2400.0, 5400.0)
    epoch_residue: float = 0.0
    # Page cache that keeps memory.current at this share of the limit
    # (reclaimable: given back as anon grows), split active/inactive.
    cache_mask_to: float = 0.0
    cache_active_share: float = 0.5
    # An object store filled on purpose within store_fill_s to store_hold of
    # its capacity and held there while Ray spills the rest to disk.
    store_hold: float = 0.0
    store_fill_s: float = 3600.0
    spill_gib_per_h: float = 2.0
    # Spilling stops at spill_stall_at_s (its volume full: issue 59, 3): the
    # bytes on disk hold still from then and the store fills by
    # stall_fill_per_h (of its capacity) an hour, nothing spilled any more.
    spill_stall_at_s: float = 0.0
    stall_fill_per_h: float = 0.0
    # An in-place resize: the limit becomes limit_raise_to_gib at
    # limit_raise_at_s, and the workload grows by grow_into (of the first
    # limit) over grow_s into the new room, then holds.
    limit_raise_at_s: float = 0.0
    limit_raise_to_gib: float = 0.0
    grow_into: float = 0.0
    grow_s: float = 3600.0
    # A ramp: from ramp_at_s the working set climbs by ramp_to (of the limit)
    # over ramp_s, then holds (a cache filled, or a model loaded, hours in).
    ramp_at_s: float = 0.0
    ramp_to: float = 0.0
    ramp_s: float = 3600.0
    # A serving pod's day (issue 39): from surge_at_s into its day (give or
    # take half an hour, drawn per day) the working set climbs by surge_to
    # (of the limit) over surge_ramp_s, holds for surge_hold_s of traffic and
    # is released at night as steeply. leak_in_surge: the leak (leak_per_h)
    # grows only while the traffic flows.
    surge_to: float = 0.0
    surge_at_s: float = 8 * 3600.0
    surge_ramp_s: float = 2700.0
    surge_hold_s: float = 10 * 3600.0
    leak_in_surge: bool = False
    # cgroup v2 memory.high at this share of the limit (0: not set). Above it
    # the kernel reclaims the page cache and throttles allocations: of what
    # the workload asks past it, only high_give is charged (the rest waits,
    # stalled), so a pod lives at memory.high and a leak under it is slowed.
    memory_high: float = 0.0
    high_give: float = 0.3
    # No memory limit: the pod's fractions are of limit_gib (what it was
    # sized for), its ceiling the node's node_gib less the other pods'
    # node_others share and the kubelet's eviction threshold; the trace
    # writes no memory_max and the node's available memory instead.
    node_gib: float = 0.0
    node_others: float = 0.5
    # The kernel's own unreclaimable memory (issue 59, 1), served by a cgroup
    # v2 node's sidecar: kernel_base of the limit held (connections' socket
    # buffers, slab), kernel_leak_per_h more each hour from leak_start_s
    # (streams nobody reads), kernel_wave_amp up and down each day (the
    # connections of the day's traffic, closed at night). 0 for all three:
    # the trace has no kernel columns (as before the issue).
    kernel_base: float = 0.0
    kernel_leak_per_h: float = 0.0
    kernel_wave_amp: float = 0.0
    # Ray gives the store's use but no spilled-bytes figure.
    no_spill_metric: bool = False
    # Sidecar outages: this many gaps of 10-60 minutes with no rows.
    gaps: int = 0
    no_psi: bool = False  # a host without PSI: pressure columns empty
    no_store_metrics: bool = False  # Ray without store metrics: plasma columns empty
    seed: int = 0


def _leak(shape: Shape, t: float) -> float:
    """A steady leak's size at ``t`` (peak-hours leaks accumulate in ``generate``)."""
    if shape.leak_per_h <= 0 or t <= shape.leak_start_s:
        return 0.0
    return shape.leak_per_h * (t - shape.leak_start_s) / 3600.0


def _intervals(rng: random.Random, first_s: float, gap_s: tuple[float, float], len_s: tuple[float, float],
               until_s: float) -> list[tuple[float, float]]:
    """(start, end) windows: a gap drawn from ``gap_s``, then a window of a
    length drawn from ``len_s``, again, until ``until_s``."""
    out: list[tuple[float, float]] = []
    t = first_s
    while True:
        t += rng.uniform(*gap_s)
        if t >= until_s:
            return out
        end = t + rng.uniform(*len_s)
        out.append((t, end))
        t = end


def _inside(windows: list[tuple[float, float]], t: float) -> tuple[float, float] | None:
    i = bisect.bisect_right(windows, (t, math.inf)) - 1
    return windows[i] if i >= 0 and windows[i][0] <= t < windows[i][1] else None


def _epochs(rng: random.Random, shape: Shape) -> list[float]:
    """Start times of the epochs, each of a length drawn from ``epoch_s``."""
    starts, t = [0.0], 0.0
    while t <= shape.duration_s:
        t += rng.uniform(*shape.epoch_s)
        starts.append(t)
    return starts


def _surge(shape: Shape, day_starts: list[float], t: float) -> float:
    """The day's traffic, 0 at night to 1 while it flows: up over
    ``surge_ramp_s`` from the day's start, held, and down as steeply (a
    day's surge may run past midnight into the next)."""
    local = t + shape.diurnal_phase_s
    day = int(local // DAY_S)
    flow = 0.0
    for d in (day - 1, day):
        if d >= 0:
            into = local - (d * DAY_S + day_starts[d])
            left = shape.surge_hold_s + 2 * shape.surge_ramp_s - into
            flow = max(flow, min(1.0, into / shape.surge_ramp_s, left / shape.surge_ramp_s))
    return flow


def generate(shape: Shape) -> Iterator[Sample]:
    rng = random.Random(shape.seed)
    # The behaviours of issue 13 draw from their own generator, so the
    # examples made before them stay byte for byte what they were.
    extra = random.Random(shape.seed * 7919 + 13)
    limit0 = int(shape.limit_gib * GIB)
    cap = int(limit0 * shape.store_capacity_frac)
    w = 2 * math.pi / DAY_S
    bursts = _intervals(extra, 600.0, shape.burst_gap_s, shape.burst_len_s, shape.duration_s) if shape.burst_to else []
    outages = (_intervals(extra, 3600.0, (shape.duration_s / (shape.gaps + 1) * 0.5,
                                          shape.duration_s / (shape.gaps + 1)), (600.0, 3600.0), shape.duration_s)
               [:shape.gaps] if shape.gaps else [])
    epochs = _epochs(extra, shape) if shape.epoch_amp or shape.epoch_residue else []
    # Issue 39's shapes draw from a generator of their own (the same reason).
    field = random.Random(shape.seed * 104729 + 39)
    days = int((shape.duration_s + shape.diurnal_phase_s) // DAY_S) + 2
    day_starts = [shape.surge_at_s + field.uniform(-1800, 1800) for _ in range(days)] if shape.surge_to else []
    node = int(shape.node_gib * GIB)
    kernel_on = bool(shape.kernel_base or shape.kernel_leak_per_h or shape.kernel_wave_amp)
    knoise = random.Random(shape.seed * 15485863 + 59)  # its own: traces without kernel columns stay as they were
    high_events = 0
    spilled = 0.0
    leak_acc = 0.0
    t = 0.0
    while t <= shape.duration_s:
        raised = shape.limit_raise_at_s and t >= shape.limit_raise_at_s
        limit = int(shape.limit_raise_to_gib * GIB) if raised else limit0
        if node:  # no limit: the pod's ceiling is what the node has left it
            others = int((shape.node_others + field.gauss(0.0, 0.002)) * node)
            limit = node - others - KUBELET_EVICTION_MEMORY_AVAILABLE_BYTES
        flow = _surge(shape, day_starts, t) if day_starts else 0.0
        frac_surge = shape.surge_to * flow
        frac = shape.base + rng.gauss(0.0, shape.noise)
        if shape.sawtooth_amp and t >= shape.sawtooth_at_s:
            frac += shape.sawtooth_amp * (((t - shape.sawtooth_at_s) % shape.sawtooth_period_s)
                                          / shape.sawtooth_period_s)
        if shape.diurnal_amp:
            frac += shape.diurnal_amp * (0.5 + 0.5 * math.sin(w * (t + shape.diurnal_phase_s)))
        if shape.warmup_amp:
            frac += shape.warmup_amp * (1 - math.exp(-t / shape.warmup_tau_s))
        if shape.cache_amp:
            frac += shape.cache_amp * (1 - math.exp(-t / shape.cache_tau_s))
        if shape.ramp_to and t > shape.ramp_at_s:
            frac += shape.ramp_to * min(1.0, (t - shape.ramp_at_s) / shape.ramp_s)
        if shape.spike_amp and (t % shape.spike_every_s) < shape.spike_len_s:
            frac += shape.spike_amp + shape.spike_grow_per_h * max(0.0, t - shape.leak_start_s) / 3600.0
        frac += frac_surge
        if shape.leak_in_surge:
            if t > shape.leak_start_s and flow >= 0.5:
                leak_acc += shape.leak_per_h * shape.interval_s / 3600
            frac += leak_acc
        elif shape.leak_peak_only:
            if t > shape.leak_start_s:
                day = max(0.0, math.sin(w * (t + shape.diurnal_phase_s)))
                leak_acc += day * 2 * shape.leak_per_h * shape.interval_s / 3600
            frac += leak_acc
        else:
            frac += _leak(shape, t)
        if epochs:
            k = bisect.bisect_right(epochs, t) - 1
            frac += shape.epoch_amp * (t - epochs[k]) / (epochs[k + 1] - epochs[k]) + shape.epoch_residue * k
        if raised:
            frac += shape.grow_into * min(1.0, (t - shape.limit_raise_at_s) / shape.grow_s)
        store_frac = shape.store_base + rng.gauss(0.0, 0.01)
        if shape.store_leak_per_h and t > shape.leak_start_s:
            store_frac += shape.store_leak_per_h * (t - shape.leak_start_s) / 3600.0
        if shape.store_hold:
            fill = min(1.0, t / shape.store_fill_s)
            store_frac += (shape.store_hold - shape.store_base) * fill + extra.gauss(0.0, 0.015)
            stalled = bool(shape.spill_stall_at_s) and t >= shape.spill_stall_at_s
            if stalled:
                store_frac += shape.stall_fill_per_h * (t - shape.spill_stall_at_s) / 3600.0
            if store_frac >= RAY_SPILL_THRESHOLD and not stalled:
                # Spilled objects come and go as the pipeline consumes them.
                spilled = max(0.0, spilled + extra.gauss(0.6, 1.0) * shape.spill_gib_per_h * GIB
                              * shape.interval_s / 3600.0)
        store_frac = min(1.0, max(0.0, store_frac))
        plasma = int(store_frac * cap)
        ws = int(max(0.05, frac) * limit0) + plasma
        burst = _inside(bursts, t)
        if burst is not None:
            # Up in about a minute, held, down again: never past the limit.
            ramp = min(1.0, (t - burst[0]) / 60.0, (burst[1] - t) / 60.0)
            peak = int((shape.burst_to + extra.uniform(-0.004, 0.004)) * limit)
            ws = max(ws, int(ws + (peak - ws) * max(0.0, ramp)))
        # ws so far is what cannot be reclaimed (anon + shmem). The kernel's
        # own memory rides on it; page cache fills the rest up to the limit
        # and is reclaimed, inactive first, as the unreclaimable part grows:
        # the OOM killer comes when nothing is left to reclaim.
        kernel = int(0.004 * limit0)
        if kernel_on:
            grown = shape.kernel_leak_per_h * max(0.0, t - shape.leak_start_s) / 3600.0
            wave = shape.kernel_wave_amp * (0.5 + 0.5 * math.sin(w * (t + shape.diurnal_phase_s)))
            kernel += int(max(0.0, shape.kernel_base + grown + wave + knoise.gauss(0.0, 0.002)) * limit0)
        high = int(shape.memory_high * limit) if shape.memory_high else None
        over_high = 0
        if high is not None and ws + kernel > high:
            # Throttled: only a share of what is asked past memory.high is charged.
            over_high = ws + kernel - high
            ws = high - kernel + int(over_high * shape.high_give)
            high_events += 1 + int(over_high * 64 // limit0)
        oom = ws + kernel >= limit
        ws = min(ws, limit - kernel)
        inactive_want = int(0.025 * limit0 * (1 + 0.2 * rng.random()))
        active_want = int(0.015 * limit0)
        if shape.cache_mask_to:
            want = max(0, int((shape.cache_mask_to + extra.uniform(-0.01, 0.01)) * limit) - ws - kernel)
            active_want += int(want * shape.cache_active_share)
            inactive_want += want - int(want * shape.cache_active_share)
        room = limit - ws - kernel
        if high is not None:  # the kernel reclaims the page cache down to memory.high
            room = max(0, min(room, high - ws - kernel))
        active = min(active_want, room)
        inactive = min(inactive_want, room - active)
        shmem = min(plasma + int(0.001 * limit0), ws)
        anon = ws - shmem
        file_b = active + inactive
        current = ws + kernel + file_b
        ws = current - inactive  # the working set as kubelet computes it
        # Reclaim stalls (PSI) once little is left to reclaim.
        tight = 1 - room / limit
        pressure = 60.0 if oom else ((tight - 0.9) * 400 if tight > 0.9 else rng.random() * 0.4)
        if over_high:  # stalled on the throttle: 12-60% of the time, the more the further past
            pressure = max(pressure, min(60.0, 12.0 + 48.0 * over_high / (0.1 * limit0)) + field.gauss(0.0, 2.0))
        if _inside(outages, t) is None or oom:
            yield Sample(
                time_s=t, memory_current_bytes=current, memory_max_bytes=None if node else limit,
                anon_bytes=anon, file_bytes=file_b, inactive_file_bytes=inactive, shmem_bytes=shmem,
                plasma_used_bytes=None if shape.no_store_metrics else plasma,
                plasma_capacity_bytes=None if shape.no_store_metrics else cap,
                plasma_spilled_bytes=(None if shape.no_store_metrics or shape.no_spill_metric or not shape.store_hold
                                      else int(spilled)),
                psi_some_avg10_pct=None if shape.no_psi else round(min(100.0, pressure * 1.5), 2),
                psi_full_avg10_pct=None if shape.no_psi else round(min(100.0, pressure), 2),
                oom_kill_count=1 if oom else 0,
                memory_high_bytes=high, high_events_count=None if high is None else high_events,
                max_events_count=None if high is None else int(oom),
                node_available_bytes=max(0, node - others - (current - file_b)) if node else None,
                **(_kernel_parts(kernel, limit0) if kernel_on else {}),
            )
        if oom:
            return
        t += shape.interval_s


def _kernel_parts(kernel: int, limit0: int) -> dict[str, int]:
    """The kernel's memory as memory.stat splits it: stacks, page tables
    and per-CPU memory small and steady, the rest socket buffers and
    unreclaimable slab (two to one)."""
    small = int(0.004 * limit0)
    stack, tables = small // 8, small // 2
    percpu = small - stack - tables
    rest = max(0, kernel - small)
    return {"kernel_stack_bytes": stack, "pagetables_bytes": tables, "percpu_bytes": percpu,
            "sock_bytes": rest * 2 // 3, "slab_unreclaimable_bytes": rest - rest * 2 // 3}


def labels_for(shape: Shape, samples: list[Sample]) -> dict[str, object]:
    """The truth about a generated trace, in shared/traces' labels.json form."""
    oom_at = next((s.time_s for s in samples if s.oom_kill_count), None)
    full_at = next((s.time_s for s in samples if (s.store_fraction or 0) >= 0.95
                    and s.time_s >= shape.spill_stall_at_s), None)
    leaking = (shape.leak_per_h > 0 or shape.store_leak_per_h > 0 or shape.kernel_leak_per_h > 0
               or shape.spill_stall_at_s > 0)
    return {
        "kind": shape.kind,
        "leak_start_s": (int(shape.spill_stall_at_s or shape.leak_start_s)) if leaking else None,
        "oom_at_s": None if oom_at is None else int(oom_at),
        "plasma_full_at_s": None if full_at is None or shape.kind != "plasma_leak" else int(full_at),
        "rows": len(samples),
    }
