"""Per-pod state the policy keeps between samples: bucketed history for the
trend, hysteresis timers, OOM-kill counts and the last sample.

``add`` costs O(1) per sample; when a bucket closes the trend is refitted
over the buckets in the window (O(buckets^2), about 48 buckets by default),
so the amortised cost stays small however long the pod lives. Purely
computational: time comes from the samples.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from memoryguard_kuberay.core.constants import KUBELET_EVICTION_MEMORY_AVAILABLE_BYTES, RAY_SPILL_THRESHOLD
from memoryguard_kuberay.core.policy.trend import (
    Line,
    concave_top,
    deepest_fall,
    median,
    theil_sen,
    theil_sen_with_halves,
)
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings

RAPID_BUCKET_S = 60.0  # the rapid-growth series: one-minute means
TAIL_MIN_BUCKETS = 8  # a climb's tail (Series.tails): eight one-minute means for the rapid rule
# The floor: the lowest reading of each two hours (an epoch, a batch cycle or
# a sawtooth of up to two hours has its trough in every bucket), over a day and
# a bit, so that a daily swing is seen whole.
FLOOR_BUCKET_S = 7200.0
FLOOR_WINDOW_S = 28 * 3600.0
FLOOR_WARMUP_S = 3600.0


@dataclasses.dataclass(slots=True)
class Bucket:
    """The bucket being filled (one per series)."""

    start_s: float
    n: int = 0
    total: float = 0.0
    peak: float = 0.0
    low: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.peak = value if self.n == 1 else max(self.peak, value)
        self.low = value if self.n == 1 else min(self.low, value)

    @property
    def mean(self) -> float:
        return self.total / self.n


class Closed(NamedTuple):
    """A closed bucket, as the rules read it (made when read: stored in a
    ring of doubles). A series keeps the mean or the low, the one it fits
    (``Series.on_lows``); the other reads NaN."""

    start_s: float
    mean: float
    peak: float
    low: float


NAN = float("nan")


class Buckets:
    """The closed buckets of a series, oldest first, at most ``maxlen``: one
    ring of doubles, three per bucket (start, the fitted value, peak), sized
    once. A pod keeps about 140 buckets at steady state; as objects they were
    most of its 37 KiB of policy state (issue 25), as four growing columns
    10.7 KiB; as one ring 24 bytes each and no slack. The values are the same
    doubles either way, so every rule reads what it read."""

    __slots__ = ("head", "maxlen", "on_lows", "ring", "size")

    def __init__(self, maxlen: int, *, on_lows: bool = False) -> None:
        self.maxlen, self.on_lows = maxlen, on_lows
        self.ring = array("d", bytes(24 * maxlen))
        self.head = self.size = 0  # the oldest bucket's slot; how many are held

    def __len__(self) -> int:
        return self.size

    def _at(self, i: int) -> int:
        if not -self.size <= i < self.size:
            raise IndexError("bucket index out of range")
        return 3 * ((self.head + (i % self.size)) % self.maxlen)

    def __getitem__(self, i: int) -> Closed:
        j, r = self._at(i), self.ring
        if self.on_lows:
            return Closed(r[j], NAN, r[j + 2], r[j + 1])
        return Closed(r[j], r[j + 1], r[j + 2], NAN)

    def __iter__(self) -> Iterator[Closed]:
        return (self[i] for i in range(self.size))

    def column(self, k: int) -> list[float]:
        """One field of every bucket, oldest first: 0 starts, 1 the fitted value, 2 peaks."""
        r, m, h = self.ring, self.maxlen, self.head
        return [r[3 * ((h + i) % m) + k] for i in range(self.size)]

    def first_start(self) -> float:
        return self.ring[3 * self.head]

    def append(self, b: Bucket) -> None:
        if self.size >= self.maxlen:
            self.popleft()
        j = 3 * ((self.head + self.size) % self.maxlen)
        self.ring[j], self.ring[j + 1], self.ring[j + 2] = b.start_s, b.low if self.on_lows else b.mean, b.peak
        self.size += 1

    def popleft(self) -> None:
        if self.size:
            self.head = (self.head + 1) % self.maxlen
            self.size -= 1


@dataclasses.dataclass(frozen=True, slots=True)
class TrendFit:
    """A trend over the window's buckets, in the series' own units."""

    line: Line  # whole window
    # The recent half's line (its slope the pace; all of it the onset of
    # growth after a flat stretch) and the early half's slope alone.
    recent: Line | None
    early_slope: float | None
    span_s: float  # time covered by the fitted buckets
    peak_offset: float  # median of (bucket peak - line): how far peaks ride above the trend
    peak_max_offset: float  # the highest of them
    top: tuple[float, float] | None = None  # (time, height) where a bending-down fit tops out

    def level_at(self, t: float) -> float:
        return self.line.at(t)


class HoldTimer:
    """"Above X for D seconds" with hysteresis: the run starts when the value
    reaches ``enter`` and only ends when it falls below ``exit``, the reading
    goes missing (an unknown value never extends a run), or the samples have
    a gap longer than ``max_gap_s``: a dip nobody saw may have been in it, so
    a run is never claimed across time that was not watched."""

    __slots__ = ("last_t", "since")

    def __init__(self) -> None:
        self.since: float | None = None
        self.last_t: float | None = None

    def update(self, t: float, value: float | None, enter: float, exit: float, max_gap_s: float) -> None:
        if self.last_t is not None and t - self.last_t > max_gap_s:
            self.since = None
        self.last_t = t
        if value is None or value < exit:
            self.since = None
        elif value >= enter and self.since is None:
            self.since = t

    def held_for(self, now_s: float) -> float:
        """How long the run has been seen: up to the last sample, never up to
        ``now_s`` beyond it (while a sidecar is silent, its last reading must
        not keep "holding" on its own)."""
        if self.since is None or self.last_t is None:
            return 0.0
        return max(0.0, min(now_s, self.last_t) - self.since)


class Tail(NamedTuple):
    """A series' climb from one bucket to the newest (Series.tails)."""

    line: Line
    fall: float  # the deepest fall within it, below the highest before


class Series:
    """One bucketed series (memory in use, or store occupancy) with its
    cached trend fit. The window is a span of time, not a count of buckets:
    after an outage of the sidecar, buckets older than the window leave it,
    so a fit never spans more than ``window_s`` of the pod's life."""

    # Four a pod, kept for its life: slots, not a dict each (as PodWindow).
    __slots__ = ("_fit", "_stale", "_tails", "bucket_s", "buckets", "first_bucket_s", "on_lows", "open", "window_s")

    def __init__(self, bucket_s: float, window_s: float, *, on_lows: bool = False) -> None:
        self.bucket_s = bucket_s
        self.window_s = window_s
        # Fit the buckets' lows instead of their means: the floor a workload
        # returns to between epochs, batches or days.
        self.on_lows = on_lows
        self.buckets = Buckets(max(2, int(window_s // bucket_s)), on_lows=on_lows)
        self.open: Bucket | None = None
        self._fit: TrendFit | None = None
        self._stale = False  # buckets closed since the fit was made
        self._tails: tuple[Tail, ...] | None = None  # made when first read after a bucket closed
        self.first_bucket_s: float | None = None  # the series' first bucket ever: the pod's start

    def add(self, t: float, value: float | None) -> Bucket | None:
        """Fold a value in; returns the bucket that closed, if any."""
        closed = None
        if self.open is not None and t >= self.open.start_s + self.bucket_s:
            if self.open.n:
                self.buckets.append(self.open)
                closed = self.open
                oldest = closed.start_s + self.bucket_s - self.window_s
                while self.buckets.first_start() < oldest:
                    self.buckets.popleft()
                self._stale, self._tails = True, None
            self.open = None
        if value is None:
            return closed
        if self.open is None:
            self.open = Bucket(start_s=t - (t % self.bucket_s))
            if self.first_bucket_s is None:
                self.first_bucket_s = self.open.start_s
        self.open.add(value)
        return closed

    @property
    def fit(self) -> TrendFit | None:
        """The trend over the buckets in the window, fitted when first read
        after a bucket closed: a poll that brings hours of backlog (a first
        poll, a takeover) closes a hundred buckets and is fitted once, not
        a hundred times (each fit is O(buckets^2)); the rules read the same
        fit of the same buckets either way."""
        if self._stale:
            self._fit, self._stale = self._refit(), False
        return self._fit

    @property
    def tails(self) -> tuple[Tail, ...]:
        """The recent half's tails of at least ``TAIL_MIN_BUCKETS`` buckets
        (each from a later bucket to the newest): each one's line and the
        deepest fall within it. Made when first read after a bucket closed:
        the rapid rule reads them at every sample of a climbing pod, and
        they change only when a bucket closes (eight fits a sample cost the
        policy a tenth of its time)."""
        if self._tails is None:
            ts = self._mid_times(self.buckets.column(0))
            ys = self.buckets.column(1)
            tails = []
            for i in range(len(ys) // 2, len(ys) - TAIL_MIN_BUCKETS + 1):
                line = theil_sen(ts[i:], ys[i:])
                if line is not None:
                    tails.append(Tail(line, deepest_fall(ys[i:])))
            self._tails = tuple(tails)
        return self._tails

    def _mid_times(self, starts: list[float]) -> list[float]:
        """Each bucket's middle, where its mean is fitted."""
        half = self.bucket_s / 2
        return [start + half for start in starts]

    def _refit(self) -> TrendFit | None:
        bs = self.buckets
        if len(bs) < 3:
            return None
        starts = bs.column(0)
        ts = self._mid_times(starts)
        ys = bs.column(1)  # the means, or the lows for a series on lows
        k = len(bs) // 2
        # The first bucket of a series holds the pod's start (Ray's processes
        # starting, imports, the first tasks): a step, not a pace. While the
        # window still holds it, the shape of the growth (is it slowing down,
        # does it top out) is read without it: a leak that begins with the
        # pod looked like growth slowing after its start.
        s0 = 1 if starts[0] == self.first_bucket_s else 0
        # The whole window, its recent half and its early half (less the start).
        line, recent, early = theil_sen_with_halves(ts, ys, k=k, s0=s0)
        if line is None:
            return None
        offsets = [peak - line.at(t) for peak, t in zip(bs.column(2), ts)]
        return TrendFit(line=line, recent=recent, early_slope=early, span_s=ts[-1] - ts[0] + self.bucket_s,
                        peak_offset=max(0.0, median(offsets)), peak_max_offset=max(0.0, *offsets),
                        top=concave_top(ts[s0:], ys[s0:]))


# How far the store must climb past the last spill, above Ray's spilling
# threshold (constants.RAY_SPILL_THRESHOLD), nothing more on disk, for
# spilling to count as stopped.
STALL_RISE = 0.03


class PodWindow:
    """Everything the policy remembers about one pod."""

    # One a pod, 20,000 a replica: slots, not a dict each (issue 25's RSS).
    __slots__ = ("_first_oom_kills", "_spilled", "_store_at_spill", "anon", "baseline_used_bytes", "critical",
                 "first_s", "floor", "last", "last_spill_known_s", "last_spill_s", "limit_bytes", "node_ceiling_bytes",
                 "oom_kills_seen", "pressure", "rapid", "regime_s", "samples_rejected", "samples_seen", "settings",
                 "store", "store_full", "used")

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.first_s: float | None = None
        self.last: Sample | None = None
        self.samples_seen = self.samples_rejected = 0
        self._first_oom_kills: int | None = None
        self.oom_kills_seen = 0  # kernel OOM kills observed since we started watching
        self.store = Series(settings.trend_bucket_s, settings.trend_window_s)
        self.store_full, self.pressure = HoldTimer(), HoldTimer()
        # Newest sample whose spilled bytes moved (Ray spilling objects to disk,
        # or deleting spilled ones): Ray's figure is a level, bytes on disk
        # now, so a level that holds still says spilling has stopped (its
        # volume full), whatever its size (issue 59, 3).
        self.last_spill_s: float | None = None
        self._spilled: int | None = None  # the last spilled level read
        self._store_at_spill: float | None = None  # the store's occupancy when it last moved
        self.last_spill_known_s: float | None = None  # newest sample that said how much is spilled (0 included)
        # No limit: what it could reach now (in use plus the node's available, less the kubelet's threshold).
        self.node_ceiling_bytes: float | None = None
        self._start_regime(None, None)

    def _start_regime(self, t: float | None, limit: int | None) -> None:
        """Memory history that is judged against one limit. An in-place resize
        raising it (Kubernetes 1.33+; not lowering: ``add``) starts a new one: the workload may
        grow into the new room, so like a fresh pod it gets a warm-up before
        any trend verdict, and no run above a threshold spans two limits."""
        s = self.settings
        self.regime_s = t
        self.limit_bytes = limit
        # Unreclaimable memory (anon + shmem), the series every memory rule reads.
        self.used = Series(s.trend_bucket_s, s.trend_window_s)
        self.rapid = Series(RAPID_BUCKET_S, s.rapid_window_s)
        # The processes' own memory (anon alone): "memory in use" counts the
        # object store's pages (shmem), which a store filling makes rise.
        # Kept from the first time the store is (nearly) full, the only rule
        # that reads it: a pod whose store never fills does not pay for it
        # (issue 25's 8 KiB a pod).
        self.anon: Series | None = None
        self.floor = Series(FLOOR_BUCKET_S, FLOOR_WINDOW_S, on_lows=True)
        self.critical = HoldTimer()
        self.baseline_used_bytes: float | None = None  # level once warm-up is over

    def add(self, sample: Sample) -> bool:
        """Fold one sample in. Samples that are not newer than the last one
        (duplicates, out of order, a clock gone backwards) are rejected and
        counted: returns False."""
        if self.last is not None and sample.time_s <= self.last.time_s:
            self.samples_rejected += 1
            return False
        s = self.settings
        t = sample.time_s
        if self.first_s is None:
            self.first_s = t
        limit = sample.memory_max_bytes
        old = self.limit_bytes
        changed = bool(limit and old and abs(limit - old) > 0.01 * limit)
        if self.regime_s is None or (changed and (limit or 0) > (old or 0)):
            self._start_regime(t, limit)
        elif changed:  # lowered (issue 59, 5): no room to grow into, its history judged against it at once
            self.limit_bytes, self.critical = limit, HoldTimer()
        elif limit and not old:
            self.limit_bytes = limit
        self.last = sample
        self.samples_seen += 1

        used = sample.unreclaimable_bytes
        self.node_ceiling_bytes = None
        if limit is None and used is not None and sample.node_available_bytes is not None:
            reachable = sample.node_available_bytes - KUBELET_EVICTION_MEMORY_AVAILABLE_BYTES
            self.node_ceiling_bytes = float(used + max(0, reachable))
        closed = self.used.add(t, float(used) if used is not None else None)
        self.rapid.add(t, float(used) if used is not None else None)
        store = sample.store_fraction
        if self.anon is None and store is not None and store >= s.store_full_fraction - s.hysteresis_fraction:
            self.anon = Series(s.trend_bucket_s, s.trend_window_s)
        if self.anon is not None:
            self.anon.add(t, float(sample.anon_bytes) if sample.anon_bytes is not None else None)
        if t - self.regime_start_s >= FLOOR_WARMUP_S:
            # The floor starts after the first hour: a model loading is not a
            # floor that rises (a cache filling for hours slows down, which
            # the deceleration check sees).
            self.floor.add(t, float(used) if used is not None else None)
        warm = t - self.regime_start_s >= s.trend_min_span_s / 2
        if closed is not None and self.baseline_used_bytes is None and warm:
            self.baseline_used_bytes = closed.mean
        self.store.add(t, sample.store_fraction)
        spilled = sample.plasma_spilled_bytes
        if spilled is not None:
            if spilled and spilled != self._spilled:
                self.last_spill_s = t
                self._store_at_spill = sample.store_fraction
            self._spilled = spilled
            self.last_spill_known_s = t

        gap = s.stale_after_s  # samples further apart than this do not make one run
        holds = s.memory_high_holds and throttled_at_high(sample)
        used_fraction = sample.used_fraction
        if used_fraction is not None and holds and held_at_high(sample):
            # The kernel holds the pod at memory.high (issue 39: MemoryQoS sets
            # it to 95% of the limit and more where requests are low): usage
            # there is where the kernel keeps it, not a step from the OOM.
            used_fraction = 0.0
        self.critical.update(t, used_fraction, s.critical_fraction, s.critical_fraction - s.hysteresis_fraction, gap)
        full_psi = sample.psi_full_avg10_pct
        if full_psi is not None and holds:
            # Stalls above memory.high are the kernel holding the pod there by
            # design (it reclaims and throttles; it never OOM-kills at
            # memory.high): no risk of an OOM kill in themselves. A leak under
            # memory.high still grows, slowly, toward memory.max, where the
            # trend and critical usage judge it.
            full_psi = 0.0
        self.pressure.update(t, full_psi, s.pressure_full_pct, s.pressure_full_pct / 2, gap)
        self.store_full.update(t, sample.store_fraction, s.store_full_fraction,
                               s.store_full_fraction - s.hysteresis_fraction, gap)

        kills = sample.oom_kill_count
        if kills is not None:
            if self._first_oom_kills is None or kills < self._first_oom_kills:
                # First reading, or the counter was reset (a new container).
                self._first_oom_kills = kills
            self.oom_kills_seen = kills - self._first_oom_kills
        return True

    @property
    def resized(self) -> bool:
        """The limit changed while this pod was watched (an in-place resize)."""
        return self.regime_s is not None and self.regime_s != self.first_s

    @property
    def regime_start_s(self) -> float:
        return self.regime_s if self.regime_s is not None else 0.0

    def spilling(self, now_s: float) -> bool:
        """Ray's spilling is moving: objects went to disk (or spilled ones
        were deleted) within the time a store must stay full to be judged
        (``objectStoreFullForSeconds``): the store is full because the
        workload fills it, and Ray is coping. Spilled bytes that hold still
        that long mean spilling has stopped (its volume full, or objects
        pinned), and a full store then is the emergency it is (issue 59, 3:
        one spilled byte used to switch the store's rules off for the whole
        trend window)."""
        return self.last_spill_s is not None and now_s - self.last_spill_s <= max(
            self.settings.store_full_for_s, self.settings.trend_bucket_s)

    def spill_stalled(self, now_s: float) -> tuple[float, float] | None:
        """(minutes since Ray last spilled, the store's rise since) when Ray
        spilled before and has not for ``objectStoreFullForSeconds`` while
        the store, above Ray's spilling threshold, kept filling by
        STALL_RISE or more: Ray spills once the store passes its threshold,
        so a store that climbs there with nothing more on disk has lost its
        spilling (its volume full). None otherwise."""
        store = self.last.store_fraction if self.last is not None else None
        if self.last_spill_s is None or self._store_at_spill is None or store is None:
            return None
        quiet = now_s - self.last_spill_s
        rise = store - self._store_at_spill
        if quiet < self.settings.store_full_for_s or store < RAY_SPILL_THRESHOLD or rise < STALL_RISE:
            return None
        return quiet, rise

    def spill_known(self, now_s: float) -> bool:
        """Ray said how much it has spilled (0 is an answer) within the trend
        window: an older Ray, or a scrape that failed, says nothing, and
        unknown is not zero."""
        return self.last_spill_known_s is not None and now_s - self.last_spill_known_s <= self.settings.trend_window_s

    @property
    def age_s(self) -> float:
        """How long the current regime (the pod, or since its last resize) has been watched."""
        if self.regime_s is None or self.last is None:
            return 0.0
        return self.last.time_s - self.regime_s


HIGH_NEAR_FRACTION = 0.95  # memory.current this close to memory.high: the kernel is throttling there


def throttled_at_high(sample: Sample) -> bool:
    """The cgroup sits at its memory.high (cgroup v2; set below memory.max
    by Kubernetes' MemoryQoS or by hand), where PSI comes from throttling."""
    high, current, limit = sample.memory_high_bytes, sample.memory_current_bytes, sample.memory_max_bytes
    if high is None or current is None or (limit is not None and high >= limit):
        return False
    return current >= HIGH_NEAR_FRACTION * high


def held_at_high(sample: Sample) -> bool:
    """At memory.high and no further than halfway on to memory.max: where
    the kernel's throttling holds a pod. Past halfway it is escaping it."""
    high, current, limit = sample.memory_high_bytes, sample.memory_current_bytes, sample.memory_max_bytes
    if not throttled_at_high(sample) or high is None or current is None:
        return False
    return limit is None or current <= high + (limit - high) / 2
