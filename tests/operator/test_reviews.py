"""A remediation's review in the guard's cycle (reviews.py, the
``review_remediations`` step), on the fake API of test_cycle_steps: the
pods on either side of the remediated template, the verdict as an Event,
the revert when the guard asks for it; and the review's record in the
status read back whatever shape it has."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.devkit.emulator.patching import json_patch
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.cycle import guarding
from memoryguard_kuberay.operator.guardspec import Jemalloc
from memoryguard_kuberay.operator.rayclusters import patches, reviews
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import Poll
from tests.operator.test_cycle_steps import NS, RC, SPEC, FakeKube, FakePods, FixedClock, _context, _guard, _pod

GIB = 1024**3
MIB = 1024**2
ENV = patches.jemalloc_env(Jemalloc(), None)


def _creeping(now: float, per_h: float) -> tuple[Sample, ...]:
    """Four hours at 15 s, creeping ``per_h`` bytes an hour from 8 GiB of 64."""
    out = []
    for i in range(960):
        t = now - (960 - i) * 15
        cur = int(8 * GIB + per_h * (i * 15) / 3600)
        out.append(Sample(time_s=t, memory_current_bytes=cur, memory_max_bytes=64 * GIB, anon_bytes=cur,
                          file_bytes=0, inactive_file_bytes=0, shmem_bytes=0))
    return tuple(out)


def _on_template(pod: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    pod["spec"] = {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0",
                                   "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}
    return pod


def _remediated_rc() -> dict[str, Any]:
    rc = copy.deepcopy(RC)
    return json_patch(rc, patches.remediation_patch(rc, "workers", ENV, record="GrowthPlateau on w-old"))


@pytest.mark.parametrize("after_per_h,verdict,reverted", [
    (20 * MIB, "Effective", False),
    (380 * MIB, "NoEffect", True),
])
def test_the_cycle_judges_a_remediation_and_reverts_an_ineffective_one(
        monkeypatch: pytest.MonkeyPatch, after_per_h: float, verdict: str, reverted: bool) -> None:
    clock = FixedClock()
    spec = {**SPEC, "remediation": {"jemalloc": {"mode": "auto"},
                                    "review": {"afterSeconds": 3600, "minPods": 1, "revert": "ineffective"}}}
    kube = FakeKube(_remediated_rc(), _guard(spec))
    old = _on_template(_pod("w-old", "127.0.0.21"), None)
    new = _on_template(_pod("w-new", "127.0.0.22"), ENV)
    ctx = _context(kube, FakePods([old, new]), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll(_creeping(clock.t, 400 * MIB if ip == "127.0.0.21" else after_per_h), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(ctx, NS, "g")
    loop.memory = guarding.Memory()
    loop.mem.reviews.start(("rc", "workers", "jemalloc"), ENV, now=clock.t - 7200, creeps=[])
    asyncio.run(guarding.cycle(loop, kube.guard))
    review = loop.mem.status["remediations"]["rc/workers/jemalloc"]
    assert review["verdict"] == verdict, review["message"]
    assert set(review["before"]) == {"uid-w-old"} and set(review["after"]) == {"uid-w-new"}
    assert review["before"]["uid-w-old"] == pytest.approx(400 * MIB, rel=0.02)
    assert review["before"]["uid-w-old"] % MIB == 0  # whole MiB an hour: a status that changes only when they do
    events = [v for k, v in kube.log if k == "event"]
    assert events == (["RemediationIneffective", "RemediationReverted"] if reverted else ["RemediationEffective"])
    assert (("patch-raycluster", "rc") in kube.log) is reverted
    assert (review.get("reverted") == "reverted") is reverted
    # Judged once: the next cycle says nothing more.
    kube.log.clear()
    clock.t += 15
    asyncio.run(guarding.cycle(loop, kube.guard))
    assert [v for k, v in kube.log if k == "event"] == []


def test_a_pod_runs_the_remediated_template_when_its_env_holds_what_was_set() -> None:
    o = reviews.Open(0.0, dict(ENV))
    o.observe("a", pi.pod_info(_on_template(_pod("a", "127.0.0.2"), ENV)).remedy_env, 1.0)
    o.observe("b", pi.pod_info(_on_template(_pod("b", "127.0.0.3"), {"LD_PRELOAD": ENV["LD_PRELOAD"]})).remedy_env,
              2.0)
    o.observe("c", pi.pod_info(_pod("c", "127.0.0.4")).remedy_env, 3.0)
    o.observe("d", {}, None)  # no trend yet: on neither side
    assert o.after == {"a": 1.0} and o.before == {"b": 2.0, "c": 3.0}


def test_template_revisions_differ_by_what_the_template_gave_the_ray_container() -> None:
    a = pi.pod_info(_on_template(_pod("a", "127.0.0.2"), ENV))
    b = pi.pod_info(_on_template(_pod("b", "127.0.0.3"), ENV))
    c = pi.pod_info(_on_template(_pod("c", "127.0.0.4"), None))
    assert a.template == b.template != c.template and len(a.template) == 10
    assert pi.pod_info({"metadata": {"name": "x"}}).template == ""


@pytest.mark.parametrize("raw", [
    None, [], "x", {"a/b": {}}, {"a/b/c": []}, {"a/b/c": {"env": "x", "appliedAtSeconds": 1}},
    {"a/b/c": {"env": {}, "appliedAtSeconds": True}},
    {"a/b/c": {"env": {"K": "v"}, "appliedAtSeconds": 5, "before": {"u": "NaN"}, "after": [1],
               "verdict": "Maybe"}},
    {f"c/g/k{i}": {"env": {}, "appliedAtSeconds": 1} for i in range(500)},
])
def test_a_status_of_any_shape_reads_back_bounded(raw: Any) -> None:
    got = reviews.Reviews.from_status({"remediations": raw})
    assert len(got.open) <= reviews.MAX_REVIEWS
    for o in got.open.values():
        assert all(isinstance(v, float) for v in [*o.before.values(), *o.after.values()])
        assert not o.decided
    assert reviews.Reviews.from_status({"remediations": got.to_status()}).to_status() == got.to_status()


def test_a_review_round_trips_through_the_status() -> None:
    book = reviews.Reviews()
    book.start(("rc", "workers", "jemalloc"), ENV, now=1000.0, creeps=[("u1", 500.2 * MIB), ("u2", None)])
    book.start(("rc", "workers", "spilling"), {"RAY_x": "1"}, now=1000.0, creeps=[])  # not reviewed
    o = book.open[("rc", "workers", "jemalloc")]
    o.observe("u3", dict(ENV), 10 * MIB)
    o.judge(now=1000.0 + 7200, noise_bytes_per_h=1.0e6, min_pods=1, after_s=3600)
    back = reviews.Reviews.from_status({"remediations": book.to_status()})
    assert list(back.open) == [("rc", "workers", "jemalloc")]
    again = back.open[("rc", "workers", "jemalloc")]
    assert again.decided and again.review is not None and again.review.verdict.value == "Effective"
    assert again.before == {"u1": 500 * MIB} and again.after == {"u3": 10 * MIB}  # whole MiB an hour


def test_a_revert_the_api_refuses_for_now_is_tried_again_without_an_event_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryguard_kuberay.operator.api.errors import api_error

    class Refusing(FakeKube):
        refusals = 2

        async def json_patch_raycluster(self, namespace: str, name: str, ops: list[Any]) -> None:
            if self.refusals:
                self.refusals -= 1
                raise api_error(422, "Invalid", "the resourceVersion test failed")
            await super().json_patch_raycluster(namespace, name, ops)

    clock = FixedClock()
    spec = {**SPEC, "remediation": {"jemalloc": {"mode": "auto"},
                                    "review": {"afterSeconds": 3600, "minPods": 1, "revert": "ineffective"}}}
    kube = Refusing(_remediated_rc(), _guard(spec))
    pods = FakePods([_on_template(_pod("w-old", "127.0.0.21"), None), _on_template(_pod("w-new", "127.0.0.22"), ENV)])

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll(_creeping(clock.t, 400 * MIB), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = guarding.Guard(_context(kube, pods, clock), NS, "g")
    loop.memory = guarding.Memory()
    loop.mem.reviews.start(("rc", "workers", "jemalloc"), ENV, now=clock.t - 7200, creeps=[])
    for _ in range(3):
        asyncio.run(guarding.cycle(loop, kube.guard))
        clock.t += 15
    assert [v for k, v in kube.log if k == "event"] == ["RemediationIneffective", "RemediationReverted"]
    assert kube.log.count(("patch-raycluster", "rc")) == 1
    assert loop.mem.status["remediations"]["rc/workers/jemalloc"]["reverted"] == "reverted"
