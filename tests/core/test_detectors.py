"""Table tests of the policy's detectors and rules on synthetic series: the
behaviours a leak detector must see through, and the ones it must catch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest

from memoryguard_kuberay.core.policy import Action, PodWindow, Reason, RotationHistory, decide, detectors
from memoryguard_kuberay.core.policy.detectors import Observation
from memoryguard_kuberay.core.policy.types import Decision
from memoryguard_kuberay.core.policy.window import HoldTimer
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings

from .helpers import GIB, LIMIT, first_rotation, run, sample, series, window_of

H = 3600.0


@pytest.mark.parametrize(
    "values, expect_since",
    [
        # (time, value) pairs against enter=0.95 exit=0.92
        ([(0, 0.96), (10, 0.97)], 0),  # starts at first value above enter
        ([(0, 0.96), (10, 0.93), (20, 0.96)], 0),  # a dip between exit and enter keeps the run
        ([(0, 0.96), (10, 0.91), (20, 0.96)], 20),  # below exit resets
        ([(0, 0.96), (10, None), (20, 0.96)], 20),  # a missing reading never extends a run
        ([(0, 0.93), (10, 0.94)], None),  # never reached enter
        # A gap longer than max_gap (120) restarts the run: a dip may have been in it.
        ([(0, 0.96), (500, 0.96), (510, 0.97)], 500),
        ([(0, 0.96), (100, 0.96), (210, 0.97)], 0),  # gaps within max_gap keep it
    ],
)
def test_hold_timer_hysteresis(values: list[tuple[float, float | None]], expect_since: float | None) -> None:
    timer = HoldTimer()
    for t, v in values:
        timer.update(t, v, 0.95, 0.92, 120)
    assert timer.since == expect_since


def test_a_run_is_held_only_as_long_as_it_was_seen() -> None:
    timer = HoldTimer()
    for t in (0, 10, 20, 30):
        timer.update(t, 0.97, 0.95, 0.92, 120)
    assert timer.held_for(30) == 30
    # The samples stop (a sidecar down): the last reading does not hold on its own.
    assert timer.held_for(1800) == 30


CASES = [
    # name, fn(t) -> working-set fraction, hours, expected first-rotation window (h) or None
    ("flat", lambda t: 0.5, 12, None),
    # GC sawtooth 0.50 -> 0.80 every 20 min: steep within a cycle, flat over the window.
    ("sawtooth", lambda t: 0.5 + 0.3 * ((t % 1200) / 1200), 12, None),
    # Warm-up to 0.80 in about an hour, then flat.
    ("warmup", lambda t: 0.15 + 0.65 * (1 - math.exp(-t / 1200)), 12, None),
    # Cache filling to a bound over hours.
    ("cache_fill", lambda t: 0.3 + 0.5 * (1 - math.exp(-t / (3 * H))), 24, None),
    # Daily load between 0.3 and 0.8.
    ("daily", lambda t: 0.55 + 0.25 * math.sin(2 * math.pi * t / 86400), 48, None),
    # Two-minute spikes to 0.97 every 90 minutes.
    ("spikes", lambda t: 0.97 if (t % 5400) < 120 else 0.6, 12, None),
    # A steady leak of 5%/h from 0.4: OOM at 12 h; rotate about 2 h before.
    ("leak_linear", lambda t: 0.4 + 0.05 * t / H, 12, (9.0, 10.5)),
    # The same leak under a GC sawtooth.
    ("leak_sawtooth", lambda t: 0.35 + 0.05 * t / H + 0.1 * ((t % 900) / 900), 12, (8.0, 10.5)),
    # Flat for 6 h, then 8%/h: OOM at about 12.25 h.
    ("leak_late", lambda t: 0.5 if t < 6 * H else 0.5 + 0.08 * (t - 6 * H) / H, 13, (9.5, 11.8)),
]


@pytest.mark.parametrize("name, fn, hours, window", CASES, ids=[c[0] for c in CASES])
def test_behaviours(name: str, fn, hours: float, window: tuple[float, float] | None) -> None:  # type: ignore[no-untyped-def]
    samples = [s for s in series(fn, hours) if (s.working_set_fraction or 0) < 1.0]
    decisions = run(samples)
    t = first_rotation(decisions)
    if window is None:
        assert t is None, f"{name}: rotated at {t / H:.2f} h: {[d.message for _, d in decisions]}"
    else:
        assert t is not None, f"{name}: never rotated"
        assert window[0] * H <= t <= window[1] * H, f"{name}: rotated at {t / H:.2f} h"


def test_rotation_carries_reason_and_evidence() -> None:
    decisions = run(series(lambda t: 0.4 + 0.05 * t / H, 11))
    d = next(d for _, d in decisions if d.action is Action.ROTATE)
    assert d.reason is Reason.PROJECTED_OOM
    ev = d.evidence
    assert ev.limit_bytes == 32 * 1024**3
    assert ev.slope_bytes_per_h is not None and ev.slope_bytes_per_h == pytest.approx(0.05 * 32 * 1024**3, rel=0.1)
    assert ev.projected_oom_s is not None and ev.projected_oom_s <= 7200
    assert "projected OOM in" in d.message and "GiB" in d.message


def test_critical_usage_needs_duration() -> None:
    s = PolicySettings()
    # Four minutes at 97% (shorter than criticalForSeconds=300): nothing.
    short = series(lambda t: 0.97 if t >= 600 else 0.5, 840 / H)
    assert first_rotation(run(short)) is None
    longer = series(lambda t: 0.97 if t >= 600 else 0.5, 0.5)
    t = first_rotation(run(longer))
    assert t is not None and t >= 600 + s.critical_for_s


@pytest.mark.parametrize("spike_s, stale_after_s, silent_for", [
    (150, 1800, (60, 600, 1799)),  # seen in the soak (staleAfterSeconds 1800): a 2.5-min spike, a sidecar down
    (200, 120, (110, 119)),  # the defaults: 200 s seen and 110 s unseen must not make criticalForSeconds (300)
])
def test_a_short_spike_then_silence_is_not_critical_usage(spike_s: float, stale_after_s: int,
                                                          silent_for: tuple[float, ...]) -> None:
    # A healthy pod's short spike to 97%, then its sidecar silent (for less
    # than staleAfterSeconds): the last reading must not go on "holding".
    s = PolicySettings(stale_after_s=stale_after_s)
    w = window_of(series(lambda t: 0.97 if t >= 3 * H - spike_s else 0.6, 3.0), s)
    for silence in silent_for:
        d = decide(settings=s, window=w, history=RotationHistory(), now_s=3 * H + silence)[0]
        assert d.reason is not Reason.CRITICAL_USAGE and d.action is not Action.ROTATE, (silence, d)
    # The same level seen for criticalForSeconds is acted on.
    w = window_of(series(lambda t: 0.97 if t >= 3 * H - s.critical_for_s - 15 else 0.6, 3.0), s)
    d = decide(settings=s, window=w, history=RotationHistory(), now_s=3 * H + 60)[0]
    assert d.reason is Reason.CRITICAL_USAGE and d.action is Action.ROTATE


def test_missing_values_never_act() -> None:
    # Working set unknown throughout (no inactive_file): no rotation, ever.
    samples = series(lambda t: None, 6)
    assert run(samples) == []
    w = window_of(samples)
    d = decide(settings=PolicySettings(), window=w, history=RotationHistory(), now_s=samples[-1].time_s)
    assert d[0].action is Action.NONE


def test_no_limit_is_never_projected() -> None:
    samples = series(lambda t: 0.4 + 0.05 * t / H, 11, limit=None)
    decisions = run(samples)
    assert first_rotation(decisions) is None


def test_pressure_needs_high_usage() -> None:
    low = series(lambda t: 0.5, 1, psi_full=40.0)
    assert first_rotation(run(low)) is None
    high = series(lambda t: 0.9, 1, psi_full=40.0)
    decisions = run(high)
    assert decisions and decisions[0][1].reason is Reason.MEMORY_PRESSURE


def test_oom_kill_seen_rotates_but_old_kills_do_not() -> None:
    old = [sample(i * 15.0, 0.5, oom_kill=3) for i in range(100)]
    assert first_rotation(run(old)) is None
    new = [sample(i * 15.0, 0.5, oom_kill=0 if i < 50 else 1) for i in range(100)]
    decisions = run(new)
    assert decisions[0][1].reason is Reason.OOM_KILLED and decisions[0][0] == 50 * 15.0


def test_store_filling_rotates_before_full() -> None:
    samples = series(lambda t: 0.4, 14, store=None)
    samples = [
        type(s)(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                   "plasma_used_bytes": int(min(1.0, 0.2 + 0.06 * s.time_s / H) * 8 * 1024**3)})
        for s in samples
    ]
    decisions = run(samples)
    t = first_rotation(decisions)
    full_at = (0.95 - 0.2) / 0.06 * H
    assert t is not None and full_at - 3 * H <= t <= full_at
    assert next(d for _, d in decisions if d.action is Action.ROTATE).reason is Reason.OBJECT_STORE_FILLING


def test_plateau_is_remediated_never_rotated() -> None:
    fn = lambda t: 0.3 + 0.45 * (1 - math.exp(-t / (2 * H)))  # noqa: E731
    decisions = run(series(fn, 30))
    assert first_rotation(decisions) is None
    rem = [d for _, d in decisions if d.action is Action.REMEDIATE]
    assert len(rem) == 1 and rem[0].reason is Reason.GROWTH_PLATEAU and "jemalloc" in rem[0].message


def _leaking_window() -> PodWindow:
    return window_of(series(lambda t: 0.4 + 0.05 * t / H, 10.5))


@pytest.mark.parametrize(
    "settings, history, action, reason, says",
    [
        (PolicySettings(), RotationHistory(), Action.ROTATE, Reason.PROJECTED_OOM, "projected OOM"),
        (PolicySettings(dry_run=True), RotationHistory(), Action.ROTATE, Reason.PROJECTED_OOM, "projected"),
        (PolicySettings(rotation_enabled=False), RotationHistory(), Action.NONE, Reason.ROTATION_DEFERRED, "disabled"),
        (PolicySettings(), RotationHistory(is_head=True), Action.NONE, Reason.ROTATION_DEFERRED, "head"),
        (PolicySettings(include_head=True), RotationHistory(is_head=True), Action.ROTATE, Reason.PROJECTED_OOM, ""),
        (PolicySettings(), RotationHistory(group_in_flight=1), Action.NONE, Reason.ROTATION_DEFERRED,
         "maxUnavailable 1"),
        (PolicySettings(max_unavailable=2), RotationHistory(group_in_flight=1), Action.ROTATE,
         Reason.PROJECTED_OOM, ""),
        # A group KubeRay has not refilled (a failed replacement, a crashed pod) counts as unavailable.
        (PolicySettings(), RotationHistory(group_short=1), Action.NONE, Reason.ROTATION_DEFERRED,
         "short of 1 ready pod(s) (maxUnavailable 1)"),
        (PolicySettings(max_unavailable=2), RotationHistory(group_in_flight=1, group_short=1), Action.NONE,
         Reason.ROTATION_DEFERRED, "short of 1 ready pod(s) and 1 rotating"),
        (PolicySettings(max_unavailable=2), RotationHistory(group_short=1), Action.ROTATE, Reason.PROJECTED_OOM, ""),
        (PolicySettings(), RotationHistory(group_last_rotation_s=10.5 * H - 60), Action.NONE,
         Reason.ROTATION_DEFERRED, "cooling down"),
        (PolicySettings(), RotationHistory(guard_rotations_last_hour=4), Action.NONE, Reason.ROTATION_DEFERRED,
         "cap 4"),
        (PolicySettings(), RotationHistory(pod_rotation_in_flight=True), Action.NONE, Reason.ROTATION_IN_PROGRESS,
         ""),
    ],
)
def test_gates(settings: PolicySettings, history: RotationHistory, action: Action, reason: Reason, says: str) -> None:
    w = _leaking_window()
    d = decide(settings=settings, window=w, history=history, now_s=w.last.time_s)[0]  # type: ignore[union-attr]
    assert (d.action, d.reason) == (action, reason), d.message
    assert says in d.message
    assert d.dry_run == settings.dry_run


def test_stale_samples_never_act() -> None:
    w = _leaking_window()
    now = w.last.time_s + 600  # type: ignore[union-attr]
    d = decide(settings=PolicySettings(), window=w, history=RotationHistory(), now_s=now)
    assert [(x.action, x.reason) for x in d] == [(Action.NONE, Reason.SAMPLES_STALE)]


def test_user_request_rotates_a_healthy_pod_within_budgets() -> None:
    w = window_of(series(lambda t: 0.5, 1))
    d = decide(settings=PolicySettings(), window=w, history=RotationHistory(user_requested=True),
               now_s=w.last.time_s)[0]  # type: ignore[union-attr]
    assert (d.action, d.reason) == (Action.ROTATE, Reason.USER_REQUESTED)


def test_out_of_order_samples_are_rejected() -> None:
    w = PodWindow(PolicySettings())
    assert w.add(sample(100, 0.5))
    assert not w.add(sample(50, 0.9))
    assert not w.add(sample(100, 0.9))
    assert w.samples_rejected == 2 and w.last is not None and w.last.time_s == 100


def test_urgency_puts_the_nearest_harm_first() -> None:
    from memoryguard_kuberay.core.policy import Decision, Evidence, urgency

    def d(reason: Reason, eta: float | None = None, store_eta: float | None = None) -> Decision:
        return Decision(Action.ROTATE, reason, "", Evidence(projected_oom_s=eta, store_projected_full_s=store_eta))

    wanting = {"creep-3h": d(Reason.PROJECTED_OOM, 3 * H), "critical": d(Reason.CRITICAL_USAGE, 9 * H),
               "creep-1h": d(Reason.PROJECTED_OOM, 1 * H), "store-2h": d(Reason.OBJECT_STORE_FILLING, None, 2 * H),
               "oom-killed": d(Reason.OOM_KILLED)}
    order = sorted(wanting, key=lambda k: urgency(wanting[k]))
    assert order[:2] == ["critical", "oom-killed"] and order[2:] == ["creep-1h", "store-2h", "creep-3h"]
    assert urgency(None) == float("inf")


def _full_store(frac: Callable[[float], float], spilled: int | None, hours: float = 8) -> list[tuple[float, Decision]]:
    samples = [dataclasses.replace(s, plasma_spilled_bytes=spilled)
               for s in series(frac, hours, store=0.97)]
    return run(samples)


def test_a_full_store_that_ray_says_it_does_not_spill_rotates() -> None:
    rotations = [d for _, d in _full_store(lambda t: 0.4, spilled=0) if d.action is Action.ROTATE]
    assert rotations and rotations[0].reason is Reason.OBJECT_STORE_FULL
    assert "nothing spilled to disk" in rotations[0].message


def test_unknown_spilling_is_not_zero_a_full_store_alone_with_flat_memory_never_rotates() -> None:
    """Issue 27: where the raylet reports no spilled bytes at all (an older
    Ray, a failed scrape), a full store says nothing of a leak by itself."""
    decisions = _full_store(lambda t: 0.4, spilled=None)
    assert not [d for _, d in decisions if d.action is Action.ROTATE]
    assert all("nothing spilled" not in d.message for _, d in decisions)


def test_unknown_spilling_with_memory_growing_rotates_and_says_spilling_is_unknown() -> None:
    # 5% of the limit an hour from 30%: the OOM at 14 h.
    rotations = [d for _, d in _full_store(lambda t: 0.3 + 0.05 * t / 3600, spilled=None, hours=14)
                 if d.action is Action.ROTATE]
    assert rotations
    full = [d for d in rotations if d.reason is Reason.OBJECT_STORE_FULL]
    assert all("spilling unknown" in d.message for d in full)


def test_unknown_spilling_with_memory_growing_far_from_its_oom_waits_for_the_horizon() -> None:
    """Issue 39's drawn pods (a full store, no spill figure, a leak of the
    processes' own memory) were rotated by the store rule 6-15 hours before
    their OOM: growth is the trend's to time, within ``horizonSeconds``."""
    decisions = _full_store(lambda t: 0.3 + 0.05 * t / 3600, spilled=None, hours=9)  # 75% at the end
    assert not [d for _, d in decisions if d.action is Action.ROTATE], [d.message for _, d in decisions][-3:]


# A pod's start is a step (Ray's processes starting, imports, the first
# tasks), not a pace. At the test profile's time scale (15 s buckets, 2 min of
# history before a verdict, a 3 min horizon), where a leak that begins with
# the pod reaches the limit in about 4.5 minutes (issue 27: `real_leak.py
# --limit-gib 2`), the start must not read as "growth slowing down" or as a
# top it levels off at; a start followed by a cache filling to its bound must
# still never rotate.
FAST = PolicySettings(trend_bucket_s=15, trend_window_s=300, trend_min_span_s=120, horizon_s=180,
                      rapid_window_s=300, rapid_min_span_s=120, rapid_horizon_s=180, critical_for_s=30,
                      pressure_for_s=30)


def _started(rest: Callable[[float], float]) -> Callable[[float], float]:
    """0.01 at the first sample, 0.25 by 10 s in (the start), then ``rest``."""
    return lambda t: 0.01 + 0.024 * t if t < 10 else rest(t - 10)


START_CASES = [
    # name, after the start, seconds watched, earliest and latest first rotation (s)
    ("start_then_leak", lambda u: 0.25 + 0.0029 * u, 300, (100, 150)),  # OOM about 265 s in
    ("start_then_slower_leak", lambda u: 0.25 + 0.0015 * u, 600, (250, 380)),  # OOM about 500 s in
    ("start_then_flat", lambda u: 0.25, 900, None),
    ("start_then_cache_fill", lambda u: 0.25 + 0.5 * (1 - math.exp(-u / 60)), 900, None),
    ("start_then_slow_cache_fill", lambda u: 0.25 + 0.6 * (1 - math.exp(-u / 150)), 900, None),
]


@pytest.mark.parametrize("name, rest, seconds, window", START_CASES, ids=[c[0] for c in START_CASES])
def test_a_pods_start_is_a_step_not_a_pace(name: str, rest: Callable[[float], float], seconds: float,
                                           window: tuple[float, float] | None) -> None:
    fn = _started(rest)
    samples = [s for s in series(fn, seconds / H, step_s=2.0) if (s.working_set_fraction or 0) < 0.99]
    t = first_rotation(run(samples, FAST))
    if window is None:
        assert t is None, f"{name}: rotated at {t:.0f} s"
    else:
        assert t is not None, f"{name}: never rotated"
        assert window[0] <= t <= window[1], f"{name}: rotated at {t:.0f} s"


def _store_full_with_shmem(anon_per_h: float, hours: float = 8) -> list[Sample]:
    """A store held 97% full, spilling unknown, its pages (shmem) rising
    2 GiB/h as Plasma touches more of its mapping; anon as given."""
    out = []
    for s in series(lambda t: 0.3, hours, store=0.97):
        shmem = int(min(8 * GIB, 2 * GIB * s.time_s / 3600))
        anon = int(0.25 * LIMIT + anon_per_h * LIMIT * s.time_s / 3600)
        out.append(dataclasses.replace(s, anon_bytes=anon, shmem_bytes=shmem, file_bytes=GIB,
                                       memory_current_bytes=anon + shmem + GIB, plasma_spilled_bytes=None))
    return out


def test_a_store_filling_its_own_pages_is_not_the_process_growing() -> None:
    """Issue 39: memory in use counts the store's shmem; with spilling unknown
    a healthy pod whose store touches more pages was rotated as if it grew."""
    assert not [d for _, d in run(_store_full_with_shmem(anon_per_h=0.0)) if d.action is Action.ROTATE]
    # The processes growing 6% of the limit an hour: beside the store's
    # pages (a quarter of the limit) the OOM comes at about 8.3 h. The pod is
    # rotated before it; and the store rule, read where the OOM is within
    # the horizon (7 h), reads anon and says so, and not for the flat pod.
    grown = _store_full_with_shmem(anon_per_h=0.06, hours=10)
    rotation = first_rotation(run(grown))
    assert rotation is not None and rotation < 7.8 * 3600, rotation
    at = next(i for i, smp in enumerate(grown) if smp.time_s >= 7 * 3600)
    verdict = detectors.store_full(Observation.at(window_of(grown[: at + 1]), PolicySettings(), 7 * 3600))
    assert verdict.fired and "anon" in verdict.note and "projected OOM in" in verdict.note, verdict
    flat = _store_full_with_shmem(anon_per_h=0.0, hours=10)
    assert not detectors.store_full(Observation.at(window_of(flat[: at + 1]), PolicySettings(), 7 * 3600)).fired
