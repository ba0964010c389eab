"""Replay traces through the policy exactly as the operator would: sample by
sample, deciding after each, and stop a trace at its first rotation (the pod
would be gone). Used by ``memoryguard-kuberay simulate`` and ``memoryguard-kuberay bench``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from memoryguard_kuberay.core.policy import Action, Decision, PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.policy.efficacy import creep_bytes_per_h
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings


@dataclasses.dataclass(frozen=True)
class TimedDecision:
    t_s: float
    decision: Decision

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {"t_s": _int_if_whole(self.t_s), "action": d.action.value, "reason": d.reason.value,
                "message": d.message, "evidence": d.evidence.to_dict()}


@dataclasses.dataclass(frozen=True)
class Replay:
    name: str
    samples_replayed: int
    first_rotation_s: float | None
    decisions: tuple[TimedDecision, ...]  # only those that are not "none"
    projections: tuple[tuple[float, float | None], ...]  # (t_s, projected OOM s) for plots
    # The pod's creep where the replay ended (as the operator last saw it), and its limit.
    creep_bytes_per_h: float | None = None
    limit_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_rotation_s": None if self.first_rotation_s is None else int(self.first_rotation_s),
            "decisions": [td.to_dict() for td in self.decisions],
        }


def replay(name: str, samples: Sequence[Sample], settings: PolicySettings) -> Replay:
    window = PodWindow(settings)
    history = RotationHistory()
    acted: list[TimedDecision] = []
    projections: list[tuple[float, float | None]] = []
    first_rotation: float | None = None
    n = 0
    for sample in samples:
        n += 1
        if not window.add(sample):
            continue
        now = sample.time_s
        decisions = decide(settings=settings, window=window, history=history, now_s=now)
        projections.append((now, decisions[0].evidence.projected_oom_s))
        for dec in decisions:
            if dec.action is Action.NONE:
                continue
            acted.append(TimedDecision(now, dec))
            if dec.action is Action.REMEDIATE:
                # As the operator does (acting.act: remediation advised): the plateau is
                # advised on once (tests/operator/test_simulate_matches.py).
                history = dataclasses.replace(history, remediation_advised=True)
            if dec.action is Action.ROTATE and first_rotation is None:
                first_rotation = now
        if first_rotation is not None:
            break
    return Replay(name, n, first_rotation, tuple(acted), tuple(projections), creep_bytes_per_h(window),
                  window.limit_bytes)


def _int_if_whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
