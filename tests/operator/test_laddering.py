"""The ladder in the operator's cycle (cycle/laddering.py, issue 41), on
the middle tier's fake API and pollers: the step asked is written on the
pod once, said as an Event, shown in the status and counted; read back
after a restart, not asked again; a dry run writes nothing and says what it
would ask; a hostile annotation reads as nothing asked; the injected
templates show the annotation to the Ray container as a file; the guard's
finalizer takes back only its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import pressure
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.operator.cycle import finalizer, guarding
from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection
from memoryguard_kuberay.operator.sidecars import sidecar_client
from memoryguard_kuberay.operator.sidecars.sidecar_client import Poll
from memoryguard_kuberay.operator.status import pods_listed
from tests.operator.test_cycle_steps import (
    GIB,
    GUARD,
    NS,
    RC,
    SPEC,
    FakeKube,
    FakePods,
    FixedClock,
    _context,
    _guard,
    _pod,
)


class Kube(FakeKube):
    """The fake API, keeping what was annotated."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.annotated: list[tuple[str, dict[str, Any]]] = []
        self.pods: list[dict[str, Any]] = []

    async def patch_pod_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        await super().patch_pod_annotations(namespace, name, ann)
        self.annotated.append((name, dict(ann)))

    async def pod_pages(self, namespace: str, selector: str) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        yield self.pods, "1"


def _flat(now: float, frac: float) -> tuple[Sample, ...]:
    """40 minutes held at ``frac`` of a 4 GiB limit."""
    used = int(frac * 4 * GIB)
    return tuple(Sample(time_s=now - (160 - i) * 15, memory_current_bytes=used, memory_max_bytes=4 * GIB,
                        anon_bytes=used, file_bytes=0, inactive_file_bytes=0, shmem_bytes=0) for i in range(160))


def _run(kube: Kube, pods: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
         loop: guarding.Guard | None = None) -> guarding.Guard:
    clock = FixedClock()
    ctx = _context(kube, FakePods(pods), clock)

    async def poll(ip: str, port: int, since: float | None, **_: Any) -> Poll:
        return Poll(_flat(clock.t, 0.85), None, 0.01)

    monkeypatch.setattr(sidecar_client, "poll", poll)
    loop = loop or guarding.Guard(ctx, NS, GUARD)
    asyncio.run(guarding.cycle(loop, kube.guard))
    return loop


def test_a_pod_at_elevated_pressure_is_asked_to_reclaim_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(RC, _guard(SPEC))
    loop = _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch)
    [(name, ann)] = kube.annotated
    asked = pressure.parse(ann[C.ANN_PRESSURE])
    assert name == "w-1" and asked is not None
    assert (asked.level, asked.step, asked.guard) == ("Elevated", "Reclaim", GUARD)
    assert asked.used_bytes == int(0.85 * 4 * GIB) and asked.since and asked.effect is None
    assert ("event", "PressureStepAsked") in kube.log
    assert pods_listed(loop.mem.status)["w-1"]["pressure"] == {"level": "Elevated", "step": "Reclaim",
                                                                "since": asked.since}
    counted = loop.ctx.metrics.ladder_steps.labels(NS, GUARD, "Reclaim", "asked")._value.get()
    assert counted == 1
    # The next cycle, the same step in effect (its settle time not over): nothing written, nothing said.
    kube.log.clear()
    _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch, loop)
    assert len(kube.annotated) == 1 and not [e for e in kube.log if e[0] == "event"]


def test_after_a_restart_the_step_is_read_back_from_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(RC, _guard(SPEC))
    _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch)
    value = kube.annotated[0][1][C.ANN_PRESSURE]
    pod = _pod("w-1", "127.0.0.11")
    pod["metadata"]["annotations"] = {C.ANN_PRESSURE: value}
    again = Kube(RC, _guard(SPEC))
    _run(again, [pod], monkeypatch)  # a new loop: the operator restarted
    assert again.annotated == [] and ("event", "PressureStepAsked") not in again.log


@pytest.mark.parametrize("value", ["{", "x" * 100_000, json.dumps({"level": "Calm", "step": "Reclaim"}),
                                   json.dumps({"level": "High", "step": "Shed", "since": "1e300",
                                               "usedBytes": 1})])
def test_a_hostile_pressure_annotation_reads_as_nothing_asked(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = _pod("w-1", "127.0.0.11")
    pod["metadata"]["annotations"] = {C.ANN_PRESSURE: value}
    kube = Kube(RC, _guard(SPEC))
    _run(kube, [pod], monkeypatch)
    [(_, ann)] = kube.annotated  # asked afresh, from the bottom rung
    assert pressure.parse(ann[C.ANN_PRESSURE]).step == "Reclaim"  # type: ignore[union-attr]


def test_a_dry_run_writes_nothing_and_says_what_it_would_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(RC, _guard({**SPEC, "dryRun": True}))
    loop = _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch)
    assert kube.annotated == []
    # A step planned, never "asked" (issue 61, 7: the dry run's Event read as if it had been).
    assert ("event", "PressureStepPlanned") in kube.log and ("event", "PressureStepAsked") not in kube.log
    assert pods_listed(loop.mem.status)["w-1"]["pressure"]["step"] == "Reclaim"
    # Said once; the dry run ended, the step in effect is written (and not said again).
    kube.log.clear()
    _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch, loop)
    assert kube.annotated == [] and ("event", "PressureStepPlanned") not in kube.log
    kube.guard = _guard(SPEC, generation=2)
    _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch, loop)
    [(_, ann)] = kube.annotated
    assert pressure.parse(ann[C.ANN_PRESSURE]).step == "Reclaim"  # type: ignore[union-attr]


def test_the_ladder_off_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(RC, _guard({**SPEC, "ladder": {"enabled": False}}))
    loop = _run(kube, [_pod("w-1", "127.0.0.11")], monkeypatch)
    assert kube.annotated == [] and not [e for e in kube.log if e[0] == "event"]
    # The level is still shown: what the pod is under, with nothing asked of it.
    assert pods_listed(loop.mem.status)["w-1"]["pressure"] == {"level": "Elevated", "step": "None"}


def test_the_injected_template_shows_the_annotation_to_the_ray_container_and_removal_takes_it_back() -> None:
    rc = json.loads(json.dumps(RC))
    spec = read_guard_spec({**SPEC, "sidecar": {"inject": True}})
    ops = injection.inject_patch(rc, spec.sidecar)
    volumes = next(op["value"] for op in ops if op["path"].endswith("/spec/volumes"))
    [vol] = [v for v in volumes if v["name"] == C.PRESSURE_VOLUME]
    assert vol["downwardAPI"]["items"] == [{"path": "pressure", "fieldRef": {
        "fieldPath": f"metadata.annotations['{C.ANN_PRESSURE}']"}}]
    mounts = next(op["value"] for op in ops if op["path"].endswith("/containers/0/volumeMounts"))
    assert {"name": C.PRESSURE_VOLUME, "mountPath": "/etc/memoryguard", "readOnly": True} in mounts
    import jsonpatch  # type: ignore[import-untyped]

    injected = jsonpatch.apply_patch(rc, ops)
    back = jsonpatch.apply_patch(injected, injection.uninject_patch(injected))
    assert back == RC


def test_the_finalizer_takes_back_only_its_own_guards_pressure() -> None:
    mine, other = _pod("w-1", "127.0.0.11"), _pod("w-2", "127.0.0.12")
    mine["metadata"]["annotations"] = {C.ANN_PRESSURE: pressure.Pressure("High", "Shed", guard=GUARD).to_json()}
    other["metadata"]["annotations"] = {C.ANN_PRESSURE: pressure.Pressure("High", "Shed", guard="else").to_json()}
    kube = Kube(RC, _guard(SPEC))
    kube.pods = [mine, other]
    ctx = _context(kube, FakePods([]), FixedClock())
    asyncio.run(finalizer.unmark_pods(ctx, NS, GUARD))
    assert kube.annotated == [("w-1", {C.ANN_PRESSURE: None})]


def test_a_rotations_evidence_keeps_the_ladders_steps() -> None:
    from memoryguard_kuberay.core.policy import PodWindow
    from memoryguard_kuberay.core.policy.ladder import Effect, Level, Rung, Step
    from memoryguard_kuberay.core.settings import PolicySettings
    from memoryguard_kuberay.operator.cycle.acting import ladder_record
    from memoryguard_kuberay.operator.cycle.judging import PodState

    track = PodState(PodWindow(PolicySettings()), "workers")
    assert ladder_record(track) is None
    track.ladder = Step(Rung.SHED, Level.HIGH, 1_000_000.0, 3 * GIB, None, Effect.NO_EFFECT)
    track.ladder_judged = "shed 10 m ago: grew 300 MiB, creep +1.4 GiB/h -> +1.4 GiB/h: no effect"
    assert ladder_record(track) == {"lastJudged": track.ladder_judged, "step": "Shed", "level": "High",
                                    "since": "1970-01-12T13:46:40.000000Z", "usedBytesAtStep": 3 * GIB,
                                    "effect": "NoEffect"}


def test_a_step_asked_for_the_object_store_keeps_its_figure_on_the_pod() -> None:
    # What the store was at when the step was asked is the baseline its
    # effect is judged against: it survives the annotation, as the rest does.
    from memoryguard_kuberay.core.policy.ladder import Level, Move, Rung, Step
    from memoryguard_kuberay.operator.cycle import laddering

    step = Step(Rung.RECLAIM, Level.ELEVATED, 1_764_900_000.0, 3 * GIB, 1e8, None, 0.9612)
    written = laddering.asked_of("g", Move(Level.ELEVATED, Rung.RECLAIM, step, "", started=True), None)
    assert laddering.step_from(pressure.parse(written.to_json())) == step
