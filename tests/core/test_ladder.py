"""The graded response (core/policy/ladder.py, issue 41): the levels from
the policy's figures with hysteresis, reclaim before shed before replace,
each step judged by its measured effect, and ``simulate``'s replay of it
with what a step would free said per trace."""

from __future__ import annotations

import re

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.core.policy.ladder import Effect, Level, Rung, level_of
from memoryguard_kuberay.core.settings import PolicySettings, SettingsError
from memoryguard_kuberay.core.simulate import StepEffects, replay
from tests.core.helpers import LIMIT, series

H = 3600.0
S = PolicySettings()


def _decision(frac: float, eta: float | None = None, action: Action = Action.NONE,
              reason: Reason = Reason.HEALTHY) -> Decision:
    return Decision(action, reason, "", Evidence(used_bytes=int(frac * LIMIT), limit_bytes=LIMIT,
                                                 projected_oom_s=eta))


@pytest.mark.parametrize("frac,eta,held,level", [
    (0.50, None, Level.NORMAL, Level.NORMAL),
    (0.81, None, Level.NORMAL, Level.ELEVATED),  # reclaimPercent (80)
    (0.78, None, Level.NORMAL, Level.NORMAL),
    (0.78, None, Level.ELEVATED, Level.ELEVATED),  # held: left only 3 points below
    (0.76, None, Level.ELEVATED, Level.NORMAL),
    (0.50, 5 * H, Level.NORMAL, Level.ELEVATED),  # the projection within reclaimHorizonSeconds (6 h)
    (0.50, 7 * H, Level.ELEVATED, Level.ELEVATED),  # held: left a quarter beyond it
    (0.50, 8 * H, Level.ELEVATED, Level.NORMAL),
    (0.91, None, Level.NORMAL, Level.HIGH),  # shedPercent (90)
    (0.60, 2 * H, Level.NORMAL, Level.HIGH),  # within shedHorizonSeconds (3 h)
])
def test_the_level_from_the_policys_figures(frac: float, eta: float | None, held: Level, level: Level) -> None:
    assert level_of(_decision(frac, eta), S, held) is level


def test_a_rotation_the_policy_wants_or_defers_is_critical() -> None:
    assert level_of(_decision(0.5, action=Action.ROTATE, reason=Reason.PROJECTED_OOM), S) is Level.CRITICAL
    assert level_of(_decision(0.5, reason=Reason.ROTATION_DEFERRED), S) is Level.CRITICAL


def _leak(per_h: float, start_h: float = 4.0, base: float = 0.5) -> list:
    return series(lambda t: base + per_h * max(0.0, t / H - start_h), hours=start_h + (1.0 - base) / per_h + 1)


def test_a_pod_held_high_without_growth_is_asked_to_reclaim_and_never_replaced() -> None:
    # A model and its cache at 85% from the start, for half a day: elevated,
    # reclaim asked and judged (the trace frees nothing: no effect), no shed
    # below 90%, no rotation.
    samples = series(lambda t: 0.85, hours=12)
    rep = replay("cache", samples, S)
    rungs = [(m.move.rung, m.move.judged.effect if m.move.judged else None) for m in rep.ladder]
    assert rungs[0] == (Rung.RECLAIM, None)
    assert (Rung.RECLAIM, Effect.NO_EFFECT) in rungs
    assert Rung.SHED not in {r for r, _ in rungs} and Rung.REPLACE not in {r for r, _ in rungs}
    assert rep.first_rotation_s is None
    assert "reclaim asked" in rep.ladder[0].move.message and "Elevated" in rep.ladder[0].move.message


def test_a_true_leak_climbs_every_rung_and_is_rotated_no_later_than_without_the_ladder() -> None:
    samples = _leak(0.04)
    with_ladder = replay("leak", samples, S)
    without = replay("leak", samples, PolicySettings(ladder_enabled=False))
    assert without.first_rotation_s is not None and not without.ladder
    assert with_ladder.first_rotation_s is not None and with_ladder.first_rotation_s <= without.first_rotation_s
    judged = [(m.move.judged.rung, m.move.judged.effect) for m in with_ladder.ladder if m.move.judged]
    assert (Rung.RECLAIM, Effect.NO_EFFECT) in judged and (Rung.SHED, Effect.NO_EFFECT) in judged
    # Why, said (issue 61, 7: "freed 12.1 GiB ... no effect" read as a mistake).
    said = [m.move.judged.message for m in with_ladder.ladder if m.move.judged]
    assert all(m.endswith("and the creep did not halve)") and "no effect (freeing needed " in m for m in said), said
    started = [m.move.rung for m in with_ladder.ladder if m.move.started]
    assert started.index(Rung.RECLAIM) < started.index(Rung.SHED)


def test_garbage_a_reclaim_frees_is_never_rotated() -> None:
    # The same climb, but what it gains is garbage a reclaim frees whole
    # (cyclic garbage holding ObjectRefs, freed by Ray's global GC): each
    # reclaim is judged effective, and the pod is never rotated.
    samples = _leak(0.04)
    rep = replay("garbage", samples, S, StepEffects(reclaim=1.0))
    assert rep.first_rotation_s is None
    effective = [m for m in rep.ladder if m.move.judged and m.move.judged.effect is Effect.EFFECTIVE]
    assert effective and effective[0].move.judged.rung is Rung.RECLAIM
    assert effective[0].move.judged.freed_bytes > S.ladder_min_freed_fraction * LIMIT
    assert "freed" in effective[0].move.message and "effective (freed more than its own swing)" in \
        effective[0].move.message
    assert sum(m.freed_bytes for m in rep.ladder) > 0
    assert not any(m.move.rung is Rung.SHED for m in rep.ladder)


def test_a_cache_a_shed_frees_steps_the_pod_back_down() -> None:
    # Nothing a reclaim frees, half of the growth freed by a shed.
    samples = _leak(0.04)
    rep = replay("cache", samples, S, StepEffects(shed=0.5))
    judged = [(m.move.judged.rung, m.move.judged.effect) for m in rep.ladder if m.move.judged]
    assert (Rung.RECLAIM, Effect.NO_EFFECT) in judged and (Rung.SHED, Effect.EFFECTIVE) in judged
    assert any(m.move.judged and m.move.judged.rung is Rung.SHED and m.move.rung in (Rung.RECLAIM, Rung.NONE)
               for m in rep.ladder)


def test_with_the_ladder_off_nothing_is_asked() -> None:
    rep = replay("leak", _leak(0.04), PolicySettings.from_spec({"ladder": {"enabled": False}}))
    assert rep.ladder == ()


def test_the_ladders_settings_are_read_and_checked() -> None:
    s = PolicySettings.from_spec({"ladder": {"reclaimPercent": 70, "settleSeconds": 120}})
    assert s.reclaim_fraction == pytest.approx(0.70) and s.ladder_settle_s == 120
    with pytest.raises(SettingsError, match=re.escape("ladder.reclaimPercent must not exceed shedPercent")):
        PolicySettings.from_spec({"ladder": {"reclaimPercent": 95, "shedPercent": 90}})
    with pytest.raises(SettingsError, match=re.escape("spec.ladder.reclaimPercnt: unknown setting")):
        PolicySettings.from_spec({"ladder": {"reclaimPercnt": 70}})


def test_simulate_reads_step_effects_per_trace_and_refuses_bad_ones(tmp_path) -> None:
    import io
    import json

    from memoryguard_kuberay.core import commands
    from memoryguard_kuberay.core.traces import write_trace

    trace = tmp_path / "garbage.csv"
    with open(trace, "w") as f:
        write_trace(_leak(0.04), f)
    effects = tmp_path / "effects.yaml"
    effects.write_text("'*': {reclaim: 0}\ngarbage: {reclaim: 1.0}\n")
    out = io.StringIO()
    assert commands.simulate([str(trace)], guard=None, as_json=True, plot=None, out=out, progress=io.StringIO(),
                             step_effects=str(effects)) == 0
    doc = json.loads(out.getvalue())["traces"]["garbage"]
    assert doc["first_rotation_s"] is None
    assert any(m.get("judged", {}).get("effect") == "Effective" for m in doc["ladder"])
    assert any(m.get("simulated_freed_bytes", 0) > 0 for m in doc["ladder"])
    text = io.StringIO()
    commands.simulate([str(trace)], guard=None, as_json=False, plot=None, out=text, progress=io.StringIO())
    assert "  ladder: 1 reclaim, 1 shed, 0 replace asked; 0 of 2 judged effective" in text.getvalue()
    for body, words in [("garbage: {reclaim: 2}", "garbage.reclaim: must be a share from 0 to 1"),
                        ("garbage: {gc: 1}", "garbage: must be {reclaim: share, shed: share}"),
                        ("[1, 2]", "must map trace names"), ("a: [", "not YAML")]:
        effects.write_text(body)
        with pytest.raises(commands.UsageError, match=re.escape(words)):
            commands.simulate([str(trace)], guard=None, as_json=True, plot=None, out=io.StringIO(),
                              progress=io.StringIO(), step_effects=str(effects))


def test_the_ladders_rotation_goes_through_the_policys_gates() -> None:
    from memoryguard_kuberay.core.policy import RotationHistory, decide
    from tests.core.helpers import window_of

    samples = series(lambda t: 0.6, hours=4)
    w = window_of(samples)
    now = samples[-1].time_s
    [d] = decide(settings=S, window=w, history=RotationHistory(ladder_replace=True), now_s=now)
    assert (d.action, d.reason) == (Action.ROTATE, Reason.LADDER_EXHAUSTED)
    [held] = decide(settings=PolicySettings(max_rotations_per_hour=0), window=w,
                    history=RotationHistory(ladder_replace=True), now_s=now)
    assert held.reason is Reason.ROTATION_DEFERRED and "ReclaimAndShedIneffective" in held.message
    [calm] = decide(settings=S, window=w, history=RotationHistory(), now_s=now)
    assert calm.action is Action.NONE


def test_the_pressure_file_reads_back_and_on_pressure_calls_on_each_change(tmp_path) -> None:
    import threading
    import time

    from memoryguard_kuberay import pressure

    p = pressure.Pressure("High", "Shed", "2026-12-05T10:00:00.000000Z", 5400.0, 3 * 1024**3, 1e9, None, "g")
    assert pressure.parse(p.to_json()) == pressure.Pressure("High", "Shed", "2026-12-05T10:00:00.000000Z", 5400.0,
                                                            3 * 1024**3, 1e9, None, "g")
    assert pressure.parse("") == pressure.NORMAL  # the downward API's file while the annotation is unset
    for bad in ("{", "[]", '{"level": "High", "step": "Run"}', "x" * 600, '{"level": "High", "step": "Shed",'
                ' "usedBytes": "1e400"}'):
        got = pressure.parse(bad)
        assert got is None or got.used_bytes is None
    f = tmp_path / "pressure"
    f.write_text("")
    seen: list[str] = []
    stop = threading.Event()
    t = pressure.on_pressure(lambda q: seen.append(q.step), path=str(f), interval_s=0.02, stop=stop)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    f.write_text(p.to_json())
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    t.join(2)
    assert seen == ["None", "Shed"]


def test_a_short_settle_time_judges_what_came_after_the_step() -> None:
    # A settle time shorter than the three minutes memory in use is read
    # over (the test profile's scale: a real reclaim judged 45 s on freed
    # 860 MiB and read 117): the step is judged on what came after it.
    settings = PolicySettings(ladder_settle_s=60)
    rep = replay("garbage", _leak(0.04), settings, StepEffects(reclaim=1.0))
    asked = next(m for m in rep.ladder if m.move.started and m.freed_bytes)
    judged = next(m.move.judged for m in rep.ladder if m.move.judged and m.t_s > asked.t_s)
    assert judged.effect is Effect.EFFECTIVE
    assert judged.freed_bytes >= 0.8 * asked.freed_bytes, (judged.freed_bytes, asked.freed_bytes)


# -- the object store in the levels ------------------------------------------------------
def _store_decision(store: float, eta: float | None = None, used: float = 0.4) -> Decision:
    return Decision(Action.NONE, Reason.HEALTHY, "", Evidence(used_bytes=int(used * LIMIT), limit_bytes=LIMIT,
                                                              store_fraction=store, store_projected_full_s=eta))


@pytest.mark.parametrize("store,eta,spilling,held,level", [
    (0.50, None, False, Level.NORMAL, Level.NORMAL),
    (0.96, None, False, Level.NORMAL, Level.ELEVATED),  # full (objectStoreFullPercent, 95): reclaim
    (0.93, None, False, Level.ELEVATED, Level.ELEVATED),  # held: left only 3 points below
    (0.91, None, False, Level.ELEVATED, Level.NORMAL),
    (0.99, None, True, Level.NORMAL, Level.NORMAL),  # Ray spills from it: a pipeline working as designed
    (0.60, 5 * H, False, Level.NORMAL, Level.ELEVATED),  # projected full within reclaimHorizonSeconds
    (0.70, 2 * H, False, Level.NORMAL, Level.HIGH),  # ... within shedHorizonSeconds: filling
    (0.70, 2 * H, True, Level.NORMAL, Level.NORMAL),
    (0.70, 3.5 * H, False, Level.HIGH, Level.HIGH),  # held: left a quarter beyond the horizon
])
def test_the_object_stores_level(store: float, eta: float | None, spilling: bool, held: Level,
                                 level: Level) -> None:
    assert level_of(_store_decision(store, eta), S, held, store_spilling=spilling) is level


def test_memory_and_the_store_the_higher_level_counts() -> None:
    assert level_of(_store_decision(0.96, used=0.92), S) is Level.HIGH
    assert level_of(_store_decision(0.70, 2 * H, used=0.82), S) is Level.HIGH


def _plasma_leak(points_per_h: float = 0.06, start_h: float = 4.0) -> list:
    # Memory in use flat at 40%; the store fills from 20% once the leak
    # starts, and Ray says nothing of spilling (an older Ray).
    from tests.core.helpers import sample

    step_s = 15.0
    hours = start_h + 0.8 / points_per_h + 1
    return [sample(i * step_s, 0.4, store=min(1.0, 0.2 + points_per_h * max(0.0, i * step_s / H - start_h)))
            for i in range(int(hours * H / step_s) + 1)]


def test_a_store_leak_is_asked_to_reclaim_before_the_policy_rotates_it_and_no_later() -> None:
    samples = _plasma_leak()
    with_ladder = replay("plasma", samples, S)
    without = replay("plasma", samples, PolicySettings(ladder_enabled=False))
    assert without.first_rotation_s is not None
    assert with_ladder.first_rotation_s == without.first_rotation_s  # the ladder never delays the policy
    asked = [m for m in with_ladder.ladder if m.move.started]
    assert asked and asked[0].move.rung is Rung.RECLAIM and asked[0].t_s < without.first_rotation_s
    assert "object store" in asked[0].move.message and asked[0].move.step.store_fraction is not None


def test_objects_a_reclaim_frees_are_never_rotated() -> None:
    # The references holding the objects were cyclic garbage (Ray's global
    # GC frees them): the store empties, the step is judged by it.
    rep = replay("plasma", _plasma_leak(), S, StepEffects(reclaim=1.0))
    assert rep.first_rotation_s is None
    judged = [m.move.judged for m in rep.ladder if m.move.judged]
    assert judged[0].rung is Rung.RECLAIM and judged[0].effect is Effect.EFFECTIVE
    assert judged[0].store_after is not None and re.search(r"object store \d+% -> \d+%", judged[0].message)
    assert sum(m.store_freed_bytes for m in rep.ladder) > 0


def test_a_memory_step_is_not_judged_by_a_store_that_moves_on_its_own() -> None:
    from memoryguard_kuberay.core.policy.ladder import Step, judge_step
    from tests.core.helpers import window_of

    samples = series(lambda t: 0.85, hours=2)
    now = samples[-1].time_s
    w = window_of(samples)
    used = int(0.85 * LIMIT)
    after = _store_decision(0.30, used=0.85)  # the store fell from 90% to 30% meanwhile
    memory_step = Step(Rung.RECLAIM, Level.ELEVATED, now - 600, used)
    assert judge_step(memory_step, after, w, S, now).effect is Effect.NO_EFFECT
    store_step = Step(Rung.RECLAIM, Level.ELEVATED, now - 600, used, store_fraction=0.90)
    assert judge_step(store_step, after, w, S, now).effect is Effect.EFFECTIVE


def test_the_pressure_file_keeps_the_stores_figure_and_reads_one_written_before_it() -> None:
    from memoryguard_kuberay import pressure

    p = pressure.Pressure("Elevated", "Reclaim", "2026-12-05T10:00:00.000000Z", None, 3 * 1024**3, None, None, "g",
                          0.9612)
    assert '"objectStoreFraction":0.9612' in p.to_json()
    assert pressure.parse(p.to_json()) == p
    old = pressure.Pressure("Elevated", "Reclaim", "2026-12-05T10:00:00.000000Z", None, 3 * 1024**3, None, None, "g")
    assert "objectStore" not in old.to_json() and pressure.parse(old.to_json()) == old
    forged = p.to_json().replace("0.9612", "1e300")
    assert pressure.parse(forged).store_fraction is None


def test_a_step_is_not_credited_with_what_the_pod_swings_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # A true leak under a GC sawtooth of 6% of the limit every 20 minutes:
    # nothing a step asks frees anything, but a judgement that falls after a
    # collection reads "freed" more than minFreedPercent (2%). Judged against
    # the swing before the step, no step is effective; without it, some are.
    from memoryguard_kuberay.core.policy import ladder

    def sawtooth_leak(t: float) -> float:
        return 0.5 + 0.04 * max(0.0, t / H - 4.0) + 0.06 * ((t % 1200) / 1200)

    samples = series(sawtooth_leak, hours=4 + 0.45 / 0.04 + 1)
    judged = [m.move.judged for m in replay("sawtooth", samples, S).ladder if m.move.judged]
    assert judged and all(j.effect is Effect.NO_EFFECT for j in judged), [j.message for j in judged]
    monkeypatch.setattr(ladder, "swing_before", lambda *a: 0.0)
    judged = [m.move.judged for m in replay("sawtooth", samples, S).ladder if m.move.judged]
    assert any(j.effect is Effect.EFFECTIVE for j in judged), [j.message for j in judged]


def test_the_minute_a_step_was_asked_in_is_not_its_before() -> None:
    # Flat at 60% for two hours; a reclaim asked 5 s into a minute frees
    # half at once, then the pod grows back fast. The minute the step was
    # asked in holds mostly what came after it: read as "before", it made the
    # pod's own swing look larger than what the step freed (the demo: a
    # reclaim that freed 17.1 GiB judged no effect).
    from memoryguard_kuberay.core.policy.ladder import Step, judge_step
    from tests.core.helpers import sample, window_of

    since = 2 * H + 5

    def frac(t: float) -> float:
        return 0.6 if t < since else 0.3 + 0.3 * (t - since) / 660

    samples = [sample(i * 15.0, frac(i * 15.0)) for i in range(int((since + 600) / 15) + 1)]
    w, now = window_of(samples), samples[-1].time_s
    step = Step(Rung.RECLAIM, Level.ELEVATED, since, int(0.6 * LIMIT))
    judged = judge_step(step, _decision(frac(now)), w, S, now)
    assert judged.effect is Effect.EFFECTIVE, judged.message


def test_a_shed_judged_before_the_pod_headed_for_the_oom_asks_the_replacement_once_it_does() -> None:
    # A shed judged no effect at 85% (below shedPercent: it stays asked) on
    # a pod that keeps growing: once at 93% with the OOM within the policy's
    # horizon, the ladder asks for the replacement, as it would have at the
    # judgement had the pod been there then. A pod that stopped growing is not.
    from memoryguard_kuberay.core.policy.ladder import Step, climb
    from tests.core.helpers import sample, window_of

    since = 2 * H

    def frac(t: float) -> float:
        return 0.79 + 0.03 * t / H  # 85% at the shed, 93% 2.7 h later

    samples = [sample(i * 15.0, frac(i * 15.0)) for i in range(int((since + 2.7 * H) / 15) + 1)]
    w, now = window_of(samples), samples[-1].time_s
    shed = Step(Rung.SHED, Level.HIGH, since, int(0.85 * LIMIT), effect=Effect.NO_EFFECT)
    move = climb(settings=S, step=shed, decision=_decision(frac(now), 0.5 * S.horizon_s), window=w, now_s=now)
    assert move.rung is Rung.REPLACE and move.started and move.wants_replace, move.message
    assert "the shed did not stop it" in move.message
    # Not yet at shedPercent: the shed stays asked.
    below = climb(settings=S, step=shed, decision=_decision(0.86, 0.5 * S.horizon_s), window=w, now_s=now)
    assert below.rung is Rung.SHED and not below.started, below.message
    # At 93% but flat since the shed: no growth the workload cannot stop.
    flat = [sample(i * 15.0, min(frac(i * 15.0), 0.93)) for i in range(len(samples))]
    flat_w = window_of(flat[: int(since / 15)] + [sample(i * 15.0, 0.93) for i in range(int(since / 15), len(flat))])
    kept = climb(settings=S, step=shed, decision=_decision(0.93, 0.5 * S.horizon_s), window=flat_w, now_s=now)
    assert kept.rung is Rung.SHED, kept.message
