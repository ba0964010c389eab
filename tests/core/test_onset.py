"""Growth that begins after a flat stretch (issue 39, cause 6): the whole
window's trend is a blend of the flat part and the climb and lags both; the
recent half's own line says where memory is and how fast it grows. And a
pod at the limit's edge is never "Healthy"."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from memoryguard_kuberay.core.policy import Action, Reason, RotationHistory, decide, detectors, projection
from memoryguard_kuberay.core.policy.window import PodWindow
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

GIB = 1 << 30
LIMIT = 16 * GIB


def sample(t: float, used: float) -> Sample:
    u = int(used)
    return Sample(time_s=float(t), memory_current_bytes=u + GIB // 2, memory_max_bytes=LIMIT, anon_bytes=u,
                  file_bytes=GIB // 2, inactive_file_bytes=GIB // 4, shmem_bytes=0, oom_kill_count=0)


def flat_then(*, flat_h: float, growth: Callable[[float], float], end_h: float, seed: int = 1,
              throughout: Callable[[float], float] = lambda t: 0.0) -> list[Sample]:
    """Flat at 45% of the limit for ``flat_h`` hours with noise, then
    ``growth(seconds since the onset)`` bytes on top, sampled every 15 s,
    until the OOM point or ``end_h``; ``throughout(t)`` bytes (a sawtooth)
    on top from the start."""
    rnd = random.Random(seed)
    out = []
    for t in range(0, int(end_h * 3600), 15):
        used = 0.45 * LIMIT + growth(max(0.0, t - flat_h * 3600)) + throughout(t) + rnd.gauss(0, 0.004 * LIMIT)
        if used >= 0.99 * LIMIT:
            break
        out.append(sample(t, used))
    return out


def test_a_leak_after_hours_of_flat_memory_is_projected_at_its_own_pace() -> None:
    # Flat for 6 h, then a leak that reaches the OOM point 3 h later.
    rate = 0.54 * LIMIT / (3 * 3600)
    samples = flat_then(flat_h=6, growth=lambda s: rate * s, end_h=12)
    oom_at = samples[-1].time_s
    settings = PolicySettings()
    result = replay("onset", samples, settings)
    assert result.first_rotation_s is not None
    first = next(td for td in result.decisions if td.decision.action is Action.ROTATE)
    assert first.decision.reason is Reason.PROJECTED_OOM, first.decision.message
    # An hour or more ahead (the whole window's line alone gave 0.68 h here).
    assert oom_at - result.first_rotation_s >= 3600, (oom_at - result.first_rotation_s) / 3600
    # The pace it says is the leak's own, not the blend's.
    slope = first.decision.evidence.slope_bytes_per_h
    assert slope is not None and abs(slope - rate * 3600) < 0.2 * rate * 3600, (slope, rate * 3600)


def _window_until(samples: list[Sample], t: float, settings: PolicySettings) -> PodWindow:
    window = PodWindow(settings)
    for s in samples:
        if s.time_s > t:
            break
        window.add(s)
    return window


def test_the_onset_reads_the_recent_half_only_when_it_rises_steadily() -> None:
    # Where the window's line lags (flat 6 h, climbing for 1.8 h), the onset
    # projection is the recent half's; a flat window has none.
    rate = 0.54 * LIMIT / (3 * 3600)
    settings = PolicySettings()
    samples = flat_then(flat_h=6, growth=lambda s: rate * s, end_h=12)
    t_check = 6 * 3600 + 1.8 * 3600
    window = _window_until(samples, t_check, settings)
    fit = window.used.fit
    assert fit is not None and fit.recent is not None and fit.recent.tau >= projection.ONSET_MIN_TAU
    blended = projection.project(window.used, now_s=t_check, ceiling=0.99 * LIMIT, min_slope_per_s=0.0,
                                settings=settings)
    onset = projection.project(window.used, now_s=t_check, ceiling=0.99 * LIMIT, min_slope_per_s=0.0,
                              settings=settings, onset_horizon_s=settings.horizon_s)
    assert blended is not None and onset is not None
    assert blended.eta_s is not None and blended.eta_s > settings.horizon_s  # the blend: hours away
    assert onset.eta_s is not None and onset.sustained and onset.eta_s <= settings.horizon_s, onset
    # Twenty minutes earlier the same climb was within the horizon but new:
    # watched a quarter of an hour more (a ramp that levels off shows it then).
    early = _window_until(samples, t_check - 1200, settings)
    watched = projection.project(early.used, now_s=t_check - 1200, ceiling=0.99 * LIMIT, min_slope_per_s=0.0,
                                settings=settings, onset_horizon_s=settings.horizon_s)
    assert watched is not None and not watched.sustained and "new climb" in watched.why_not, watched
    flat = _window_until(flat_then(flat_h=99, growth=lambda s: 0.0, end_h=8), 8 * 3600, settings)
    assert flat.used.fit is not None
    assert projection.onset_projection(flat.used, flat.used.fit, now_s=8 * 3600, ceiling=0.99 * LIMIT,
                                       min_slope_per_s=0.0, settings=settings, min_span_s=None,
                                       horizon_s=settings.horizon_s) is None


def test_a_ramp_that_levels_off_after_a_flat_stretch_is_no_leak() -> None:
    # Flat for 6 h, a ramp of 1 or 1.5 h to 70% of the limit, then held: a
    # cache filled late, a model loaded late. While it climbs it is a leak's
    # onset to any reader; once it levels off the onset reading stops (its
    # last half hour no longer climbs), and nothing rotates it. (A ramp that
    # stops at 80-90% is rotated while it climbs, as it was before the onset
    # reading: at that height it cannot be told from a leak in time.)
    for ramp_h in (1.0, 1.5):

        def ramp(s: float, ramp_h: float = ramp_h) -> float:
            return 0.25 * LIMIT * min(1.0, s / (ramp_h * 3600))

        samples = flat_then(flat_h=6, growth=ramp, end_h=14)
        assert replay("ramp", samples, PolicySettings()).first_rotation_s is None, ramp_h


def test_a_pod_at_the_limit_s_edge_is_never_healthy() -> None:
    # 4 h at 50%, then a jump to 97% held for a minute: not long enough for
    # CriticalUsage (15 minutes), and not "Healthy" either.
    settings = PolicySettings()
    window = PodWindow(settings)
    samples = [sample(t, 0.5 * LIMIT) for t in range(0, 4 * 3600, 15)]
    samples += [sample(4 * 3600 + t, 0.97 * LIMIT) for t in range(0, 60, 15)]
    for s in samples:
        window.add(s)
    now = samples[-1].time_s
    [d] = decide(settings=settings, window=window, history=RotationHistory(), now_s=now)
    assert d.action is Action.NONE and d.reason is Reason.NEAR_LIMIT, d
    assert "97%" in d.message and "15 m" in d.message, d.message


def test_a_sudden_leak_is_rotated_half_an_hour_before_its_oom() -> None:
    # Flat for 6 h, then a leak that reaches the OOM point 45 minutes later:
    # a quarter of an hour in, the rapid window's line (half flat, half the
    # climb) read twice the time left; its recent half reads the climb.
    rate = 0.54 * LIMIT / (45 * 60)
    samples = flat_then(flat_h=6, growth=lambda s: rate * s, end_h=8, seed=3)
    oom_at = samples[-1].time_s
    result = replay("sudden", samples, PolicySettings())
    assert result.first_rotation_s is not None
    first = next(td for td in result.decisions if td.decision.action is Action.ROTATE)
    assert first.decision.reason is Reason.RAPID_GROWTH, first.decision.message
    assert oom_at - result.first_rotation_s >= 1800, (oom_at - result.first_rotation_s) / 60


@pytest.mark.parametrize("back_to, fell_far", [(0.75, True), (0.87, False)])
def test_a_climb_that_has_just_fallen_back_is_not_rapid_growth(back_to: float, fell_far: bool) -> None:
    # Three flat hours, a steady climb to 80% over 20 minutes, a burst to 97%
    # for five, then back: the line through the last half hour is still
    # steep, but nothing is climbing now. Back to 75%, far below the line,
    # the projection itself is no longer sustained (projection.fallen_back,
    # issue 59, 2); back to 87%, it is, and the climb not going on stops it.
    rnd = random.Random(5)
    out = []
    for t in range(0, 4 * 3600, 15):
        s = t - 3 * 3600
        used = (0.45 if s < 0 else 0.45 + 0.35 * min(s, 1200) / 1200 if s < 1200 else
                0.97 if s < 1500 else back_to) * LIMIT
        out.append(sample(t, used + rnd.gauss(0, 0.003 * LIMIT)))
    settings = PolicySettings()
    fell_back = 3 * 3600 + 1500 + 90
    window = _window_until(out, fell_back, settings)
    fired, p = detectors.rapid_projection(window, settings, fell_back)
    assert p is not None and p.eta_s is not None and p.eta_s <= settings.rapid_horizon_s, p
    assert p.sustained is not fell_far and ("fell back" in p.why_not) is fell_far, p
    assert not fired.fired, fired.note


def _sawtooth(amp: float, period_s: float) -> Callable[[float], float]:
    """A garbage collector's rise and fall: up ``amp`` of the limit over
    ``period_s``, then back down at once."""
    return lambda t: amp * LIMIT * ((t % period_s) / period_s)


def test_a_sudden_leak_under_a_sawtooth_is_rotated_half_an_hour_before_its_oom() -> None:
    # A 10% sawtooth every 6 minutes, then a leak that reaches the OOM point
    # an hour after its onset: the one-minute means never rise steadily
    # enough for Kendall's bar (tau 0.5-0.7 all the way; drawn sudden leaks
    # of this shape were caught at the OOM or 0.43 h before it), but their
    # peaks' envelope climbs. Without a sawtooth the same leak is caught as before.
    saw = _sawtooth(0.10, 360)
    rate = 0.44 * LIMIT / 3600
    samples = flat_then(flat_h=6, growth=lambda s: rate * s, throughout=lambda t: saw(t) - 0.05 * LIMIT,
                        end_h=8, seed=4)
    flat = flat_then(flat_h=6, growth=lambda s: rate * s, end_h=8, seed=4)
    said = {}
    for name, trace in (("sawtooth", samples), ("flat", flat)):
        oom_at = trace[-1].time_s
        result = replay(name, trace, PolicySettings())
        assert result.first_rotation_s is not None, name
        said[name] = next(td for td in result.decisions if td.decision.action is Action.ROTATE).decision.message
        assert oom_at - result.first_rotation_s >= 1800, (name, (oom_at - result.first_rotation_s) / 60, said[name])
    assert "under a sawtooth" in said["sawtooth"] and "under a sawtooth" not in said["flat"], said


def test_a_healthy_sawtooth_and_a_burst_after_its_fall_are_not_rapid_growth() -> None:
    # The same sawtooth without a leak; then a slower one (7% over 29
    # minutes) and, four minutes after a fall, a burst to 96.5% (two steps
    # of a minute, for five): the envelope of the last quarter hour holds the
    # steady rise before the fall, then jumps (seen on a drawn pod with
    # bursts, rotated as a leak before the jump was ruled out).
    rnd = random.Random(6)
    burst_at = 7 * 1740 + 240
    for saw, burst in ((_sawtooth(0.10, 360), False), (_sawtooth(0.07, 1740), True)):
        out = []
        for t in range(0, 4 * 3600, 15):
            s = t - burst_at
            used = (0.78 if s < 60 else 0.965) * LIMIT if burst and 0 <= s < 300 else 0.60 * LIMIT + saw(t)
            out.append(sample(t, used + rnd.gauss(0, 0.004 * LIMIT)))
        result = replay("healthy", out, PolicySettings())
        assert result.first_rotation_s is None, [td.decision.message for td in result.decisions
                                                 if td.decision.action is Action.ROTATE][:1]


def test_a_warm_ups_tail_on_a_slow_sawtooths_rise_is_not_read_under_a_sawtooth() -> None:
    # A model's warm-up (37% of the limit over about half an hour), a daily
    # swing, a 12% sawtooth of 50 minutes (longer than the envelope's reach)
    # and noise: a healthy pod peaking near 88%. Its envelope climbs steadily
    # through the sawtooth's slow rise; without a collection's fall in the
    # window, or at a minute that is no new high, it is not read as a climb
    # under a sawtooth (a drawn pod of this shape was rotated at 71%). The
    # means' own line rotates some of these: warm-ups that end above 75% are
    # the policy's known limit (docs/how-it-works.md), not this rule's.
    from memoryguard_kuberay.core.tracegen import Shape, generate

    for seed in range(1, 9):
        shape = Shape("warmup_on_slow_sawtooth", "healthy", limit_gib=32, base=0.25, noise=0.017, sawtooth_amp=0.12,
                      sawtooth_period_s=3000, warmup_amp=0.37, warmup_tau_s=2000, diurnal_amp=0.1,
                      diurnal_phase_s=21600, store_capacity_frac=0.25, store_base=0.15, no_store_metrics=True,
                      duration_s=6 * 3600, seed=seed)
        said = [td.decision.message for td in replay(shape.name, list(generate(shape)), PolicySettings()).decisions
                if td.decision.action is Action.ROTATE]
        assert not any("under a sawtooth" in m for m in said), (seed, said[:1])


def test_a_burst_on_a_sawtooths_rise_is_not_rapid_growth_as_it_comes_up() -> None:
    # A drawn healthy pod (`bursts`, seed 502: a 6% sawtooth of 18 minutes
    # at 74-80% of 64 GiB, bursts to 97% for 4-8 minutes) was rotated at a
    # burst's second minute, an hour and a half in: the one-minute means
    # went 0.80, 0.89, 0.97 and the recent half fitted a steep, steady line
    # ("+19.8 GiB/h, projected OOM in 32 m"). Most of that climb is two
    # minutes' step: a burst comes up and holds, a leak climbs minute by minute.
    from memoryguard_kuberay.core.tracegen import generate
    from memoryguard_kuberay.core.traceshapes import behaviour_shape

    shape = behaviour_shape("bursts", "bursts_502", random.Random(502), 502)
    result = replay(shape.name, list(generate(shape)), PolicySettings())
    assert result.first_rotation_s is None, [td.decision.message for td in result.decisions
                                             if td.decision.action is Action.ROTATE][:1]
    minutes = [0.75, 0.76, 0.78, 0.79, 0.80, 0.89, 0.97]
    assert projection.jumps([60.0 * i for i in range(7)], minutes, 60.0)
    leak = [0.75 + 0.017 * i for i in range(15)]
    assert not projection.jumps([60.0 * i for i in range(15)], leak, 60.0)
    # A sidecar's gap is no step.
    assert not projection.jumps([0, 60, 120, 720, 780], [0.5, 0.51, 0.52, 0.70, 0.71], 60.0)


def test_a_sudden_leak_under_a_slow_sawtooth_is_read_from_where_its_climb_began() -> None:
    # A drawn pod (`sudden_leak`, seed 603: an 8% sawtooth of 22 minutes, a
    # leak of 0.57 of its 24 GiB limit an hour from 49% in use, 43 minutes
    # to its OOM) was rotated 28 minutes ahead: the tooth's fall 3 minutes
    # after the onset kept the recent half's Kendall tau under 0.8 for a
    # quarter of an hour. The climb since the fall is steady from its start.
    from memoryguard_kuberay.core.tracegen import generate, labels_for
    from memoryguard_kuberay.core.traceshapes import behaviour_shape

    shape = behaviour_shape("sudden_leak", "sudden_leak_603", random.Random(603), 603)
    samples = list(generate(shape))
    oom_at = labels_for(shape, samples)["oom_at_s"]
    result = replay(shape.name, samples, PolicySettings())
    assert result.first_rotation_s is not None
    first = next(td for td in result.decisions if td.decision.action is Action.ROTATE)
    assert first.decision.reason is Reason.RAPID_GROWTH, first.decision.message
    assert oom_at - result.first_rotation_s >= 1800, (oom_at - result.first_rotation_s) / 60


def test_the_onset_climb_starts_where_the_climb_did() -> None:
    # Flat, then nine minutes of a climb of 0.6 of the limit an hour: of the
    # recent half's steady tails the steepest is the climb's own (the half
    # taken whole reads it slower), and flat noise has no steady tail.
    settings = PolicySettings()
    rnd = random.Random(5)
    rate = 0.6 * LIMIT / 3600
    climb = [sample(t, 0.45 * LIMIT + rate * max(0, t - 1560) + rnd.gauss(0, 0.002 * LIMIT))
             for t in range(0, 1560 + 540, 15)]
    window = _window_until(climb, climb[-1].time_s, settings)
    fall = projection.ENVELOPE_MIN_FALL * LIMIT
    line = projection.onset_climb(window.rapid, fall=fall)
    fit = window.rapid.fit
    assert line is not None and fit is not None and fit.recent is not None
    assert abs(line.slope - rate) < 0.15 * rate, (line.slope * 3600 / LIMIT, rate * 3600 / LIMIT)
    assert line.slope > 1.2 * fit.recent.slope, (line.slope * 3600 / LIMIT, fit.recent.slope * 3600 / LIMIT)
    flat = [sample(t, 0.45 * LIMIT + rnd.gauss(0, 0.002 * LIMIT)) for t in range(0, 2100, 15)]
    assert projection.onset_climb(_window_until(flat, flat[-1].time_s, settings).rapid, fall=fall) is None
    # Teeth of a 6-minute sawtooth, each climbing as steeply: a collection
    # within every tail of eight minutes, so none is one climb.
    saw = _sawtooth(0.10, 360)
    teeth = [sample(t, 0.45 * LIMIT + saw(t) + 0.3 * rate * t + rnd.gauss(0, 0.002 * LIMIT))
             for t in range(0, 2100, 15)]
    assert projection.onset_climb(_window_until(teeth, teeth[-1].time_s, settings).rapid, fall=fall) is None


def test_a_new_climb_watched_before_it_is_acted_on_is_shown_with_its_time_left() -> None:
    """Issue 58, 3: a new climb is acted on one tail after it is first
    projected (ONSET_TAIL); while it is watched, its time left is in the
    evidence (``watched_oom_s``, what the status and the metrics show), so an
    alert on it leads the rotation, and the decision is not changed by it."""
    rate = 0.54 * LIMIT / (3 * 3600)
    samples = flat_then(flat_h=6, growth=lambda s: rate * s, end_h=12)
    settings = PolicySettings()
    window = PodWindow(settings)
    watched: list[tuple[float, float]] = []
    rotated = None
    for s in samples:
        window.add(s)
        d = decide(settings=settings, window=window, history=RotationHistory(), now_s=s.time_s)[0]
        if d.action is Action.ROTATE:
            rotated = s.time_s
            break
        ev = d.evidence
        if ev.watched_oom_s is not None and ev.projected_oom_s is None:
            assert d.reason is Reason.HEALTHY and "a new climb" in d.message and "watched" in d.message, d.message
            assert ev.oom_outlook_s == ev.watched_oom_s and "watched_oom_s" in ev.to_dict()
            watched.append((s.time_s, ev.watched_oom_s))
    assert rotated is not None and watched, "the climb was never shown while watched"
    first_at, first_eta = watched[0]
    print(f"watched from {(first_at - 6 * 3600) / 60:.0f} min into the climb ({first_eta / 60:.0f} min left at its "
          f"pace), rotated at {(rotated - 6 * 3600) / 60:.0f} min: shown {(rotated - first_at) / 60:.0f} min ahead")
    assert first_at < rotated - 10 * 60
    # Its time left is the climb's: from the onset to the OOM point, about 3 h.
    assert abs(first_at + first_eta - samples[-1].time_s) < 0.25 * 3 * 3600


def test_a_watched_climb_that_falls_back_is_no_longer_shown() -> None:
    p = projection.Projection(slope_per_s=1.0, level=0.6 * LIMIT, eta_s=600.0, sustained=False,
                              why_not="a new climb", watching=True)
    assert projection.fallen_back(p, 0.59 * LIMIT, LIMIT) is p
    gone = projection.fallen_back(p, 0.4 * LIMIT, LIMIT)
    assert gone is not None and not gone.watching and not gone.sustained and "fell back" in gone.why_not
