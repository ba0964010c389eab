"""``simulate`` is what the operator does (issue 14): one trace through
simulate's replay and through the operator's own decision path (the guard
loop's ``judge`` and ``act``, with the API and Events stubbed and the clock at each
sample's time) gives the same rotations and remediations at the same times."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import Action, PodWindow
from memoryguard_kuberay.core.simulate import replay
from memoryguard_kuberay.core.traces import read_trace
from memoryguard_kuberay.operator.api import podinfo
from memoryguard_kuberay.operator.cycle import acting
from memoryguard_kuberay.operator.cycle.guardstate import Cycle, Guard, Memory, OperatorContext
from memoryguard_kuberay.operator.cycle.judging import PodState, judge
from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.rayclusters.clusters import Selected
from memoryguard_kuberay.operator.rayclusters.groups import Groups

from ..devworld import EXAMPLES


class SampleClock:
    """The operator's clock, set to each sample's time."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def real_seconds(self, clock_seconds: float) -> float:
        return clock_seconds


class Stub:
    """The API and the Event queue: every call is recorded, nothing is sent."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return call

    def post(self, event: Any) -> None:
        self.calls.append(f"event {event.reason}")


def _operator_decisions(trace_name: str) -> list[tuple[float, str, str]]:
    clock = SampleClock()
    shared = OperatorContext(kube=Stub(), events=Stub(), drainer=None, pods=None, clock=clock,  # type: ignore[arg-type]
                    metrics=OperatorMetrics())
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"mode": "recommend"}}})
    loop = Guard(shared, "default", "g")
    loop.memory = Memory(settings=spec.policy)
    pod = podinfo.pod_info({"metadata": {"name": "w", "uid": "u", "labels": {
        C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "workers"}},
        "status": {"phase": "Running", "podIP": "127.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}})
    rc = {"metadata": {"name": "rc"}, "spec": {"workerGroupSpecs": [{"groupName": "workers", "replicas": 1,
                                                                      "template": {"spec": {"containers": [{}]}}}]}}
    track = PodState(PodWindow(spec.policy), "workers")
    cycle = Cycle(spec, Selected([rc], [], {}), [pod], [pod], Groups.of([rc], [pod]))
    acted: list[tuple[float, str, str]] = []

    async def run() -> None:
        for sample in read_trace(EXAMPLES / f"{trace_name}.csv").samples:
            if not track.window.add(sample):
                continue
            clock.t = sample.time_s
            # The guard's own path: the policy with the guard's history, then its acting on what it decided.
            decisions = judge(spec.policy, track, acting.history_for(loop, pod, clock.t, cycle.groups), clock.t)
            await acting.act(loop, cycle, pod, track, decisions)
            acted.extend((clock.t, d.action.value, d.reason.value) for d in decisions
                         if d.action in (Action.ROTATE, Action.REMEDIATE))
            if any(a == Action.ROTATE.value for _, a, _ in acted):
                break  # the pod would be gone

    import asyncio

    asyncio.run(run())
    return acted


@pytest.mark.parametrize("trace", ["fragmentation_flattens", "leak_steady", "healthy_gc_sawtooth"])
def test_simulate_and_the_operator_decide_alike(trace: str) -> None:
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}})
    rep = replay(trace, read_trace(EXAMPLES / f"{trace}.csv").samples, spec.policy)
    simulated = [(td.t_s, td.decision.action.value, td.decision.reason.value) for td in rep.decisions
                 if td.decision.action in (Action.ROTATE, Action.REMEDIATE)]
    assert _operator_decisions(trace) == simulated
    if trace == "fragmentation_flattens":
        assert [a for _, a, _ in simulated] == ["remediate"]  # advised once, by both
