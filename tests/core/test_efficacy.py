"""A remediation's review (core/policy/efficacy.py): the verdict on a table
of creeps, the creep estimator on synthetic pods, and ``simulate --before
--after`` on the example traces giving the verdict the same function gives."""

from __future__ import annotations

import io
import json

import pytest

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.policy.efficacy import Verdict, creep_bytes_per_h, judge
from tests.core.helpers import GIB, LIMIT, series, window_of

MIB = 1024**2
NOISE = 0.001 * LIMIT  # the policy's default floor of growth on a 32 GiB limit: about 33 MiB/h
DAY = 86400.0


@pytest.mark.parametrize("before,after,verdict", [
    ([450 * MIB] * 6, [30 * MIB] * 6, Verdict.EFFECTIVE),
    ([450 * MIB, 500 * MIB, 20 * MIB], [30 * MIB, 25 * MIB], Verdict.EFFECTIVE),  # medians, not means
    ([450 * MIB] * 3, [400 * MIB] * 3, Verdict.NO_EFFECT),
    ([450 * MIB] * 3, [250 * MIB] * 3, Verdict.NO_EFFECT),  # less, but not halved
    ([30 * MIB] * 3, [5 * MIB] * 3, Verdict.NO_EFFECT),  # halved, but within the floor of growth
    ([450 * MIB] * 3, [900 * MIB] * 3, Verdict.WORSE),
    ([0.0] * 3, [60 * MIB] * 3, Verdict.WORSE),  # from flat to a creep over the floor
    ([0.0] * 3, [20 * MIB] * 3, Verdict.NO_EFFECT),  # from flat to a creep under it
])
def test_the_verdict_on_a_table_of_creeps(before: list[float], after: list[float], verdict: Verdict) -> None:
    r = judge(before, after, noise_bytes_per_h=NOISE, min_pods=2, watched_s=DAY, review_after_s=3600)
    assert r.verdict is verdict, r.message
    assert r.message.endswith({Verdict.EFFECTIVE: "effective", Verdict.NO_EFFECT: "no effect",
                               Verdict.WORSE: "worse"}[verdict])
    assert f"over {len(after)} pod(s) on the new template ({len(before)} before)" in r.message


def test_a_review_waits_and_says_for_what() -> None:
    early = judge([450 * MIB], [30 * MIB] * 3, noise_bytes_per_h=NOISE, min_pods=2, watched_s=1800,
                  review_after_s=6 * 3600)
    assert early.verdict is Verdict.PENDING
    assert early.message == "waiting: 3 of 2 pod(s) on the new template with a trend, and 6 h 00 m since it was applied"
    few = judge([450 * MIB], [30 * MIB], noise_bytes_per_h=NOISE, min_pods=2, watched_s=DAY, review_after_s=60)
    assert few.verdict is Verdict.PENDING and few.message.startswith("waiting: 1 of 2 pod(s)")
    nothing_before = judge([], [30 * MIB] * 3, noise_bytes_per_h=NOISE, min_pods=1, watched_s=DAY, review_after_s=0)
    assert nothing_before.verdict is Verdict.PENDING and "no pod before" in nothing_before.message


def test_a_pods_creep_is_its_trend_once_it_spans_the_policys_minimum() -> None:
    # 1 GiB an hour from 20% of the limit, sampled every 15 s.
    leak = series(lambda t: 0.2 + (GIB / LIMIT) * t / 3600, hours=5)
    assert creep_bytes_per_h(window_of(leak)) == pytest.approx(GIB, rel=0.02)
    # Two hours are under the default trendMinSpanSeconds (3 h): no creep yet, not zero.
    assert creep_bytes_per_h(window_of(leak[: 2 * 240])) is None
    flat = series(lambda t: 0.4, hours=5)
    assert creep_bytes_per_h(window_of(flat)) == pytest.approx(0.0, abs=MIB)


def test_simulate_before_after_gives_the_operators_verdict() -> None:
    ex = commands.examples_dir()
    out = io.StringIO()
    commands.compare([str(ex / "leak_steady.csv"), str(ex / "leak_creeping.csv")],
                     [str(ex / "healthy_gc_sawtooth.csv"), str(ex / "healthy_epochs.csv")], guard=None, as_json=True,
                     out=out)
    doc = json.loads(out.getvalue())
    assert doc["verdict"] == "Effective", doc["message"]
    pods = doc["pods"]
    expected = judge([pods["before"]["leak_steady"], pods["before"]["leak_creeping"]],
                     [pods["after"]["healthy_gc_sawtooth"], pods["after"]["healthy_epochs"]],
                     noise_bytes_per_h=0.001 * 64 * GIB, min_pods=2, watched_s=DAY * 10, review_after_s=21600)
    assert expected.verdict.value == doc["verdict"]
    out = io.StringIO()
    commands.compare([str(ex / "leak_steady.csv")], [str(ex / "leak_jittery.csv"), str(ex / "leak_steady.csv")],
                     guard=None, as_json=False, out=out)
    assert out.getvalue().splitlines()[-1].startswith("NoEffect: creep ")
