"""Replay traces through the policy exactly as the operator would: sample by
sample, deciding after each, the ladder climbed after each decision as the
operator climbs it (policy/ladder.py), and stop a trace at its first
rotation (the pod would be gone). Used by ``memoryguard-kuberay simulate``
and ``memoryguard-kuberay bench``.

A trace is what a pod did when nobody asked it anything, so what a reclaim
or a shed would have freed is the caller's to say (``StepEffects``: a
share of the memory in use the pod gained since its first sample, and the
same share of what its object store gained). From the step on, every later
sample reads that much less: the garbage or the cache (and the objects its
references held) is gone and the growth goes on from there, and the trace's later OOM kills
are not counted (they were the kernel's answer to memory the steps freed;
the pod, reading less, has not reached its limit when the trace does). With
no effects said, a step
frees nothing, and the ladder can only ask for a rotation sooner."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from memoryguard_kuberay.core.policy import Action, Decision, PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.policy.efficacy import creep_bytes_per_h
from memoryguard_kuberay.core.policy.ladder import Move, Rung, Step, climb
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
class StepEffects:
    """What each step of the ladder would free, as a share (0-1) of the
    memory in use the pod gained since its first sample, and of the object
    store's bytes in use gained since then (a cache of ObjectRefs dropped
    frees both)."""

    reclaim: float = 0.0
    shed: float = 0.0

    def share(self, rung: Rung) -> float:
        return self.reclaim if rung is Rung.RECLAIM else self.shed if rung is Rung.SHED else 0.0


NO_EFFECTS = StepEffects()


@dataclasses.dataclass(frozen=True)
class LadderMark:
    """A move of the ladder worth a line: a step asked, judged or ended."""

    t_s: float
    move: Move
    freed_bytes: int = 0  # what the step was said to free (StepEffects), at its start
    store_freed_bytes: int = 0  # ... of the object store

    def to_dict(self) -> dict[str, Any]:
        m = self.move
        out: dict[str, Any] = {"t_s": _int_if_whole(self.t_s), "level": m.level.value, "rung": m.rung.value,
                               "message": m.message}
        if m.judged is not None:
            out["judged"] = {"rung": m.judged.rung.value, "effect": m.judged.effect.value,
                             "freed_bytes": m.judged.freed_bytes}
        if self.freed_bytes:
            out["simulated_freed_bytes"] = self.freed_bytes
        if self.store_freed_bytes:
            out["simulated_store_freed_bytes"] = self.store_freed_bytes
        return out


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
    ladder: tuple[LadderMark, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "first_rotation_s": None if self.first_rotation_s is None else int(self.first_rotation_s),
            "decisions": [td.to_dict() for td in self.decisions],
        }
        if self.ladder:
            out["ladder"] = [m.to_dict() for m in self.ladder]
        return out


@dataclasses.dataclass
class Freeing:
    """What the steps asked of one pod so far freed (``StepEffects``), and
    the sample each later one reads instead of the trace's. One a replay:
    ``simulate``'s, and a replaying sidecar's (the demo's pods that answer
    the ladder)."""

    freed: float = 0.0  # memory in use, bytes
    store_freed: float = 0.0  # the object store's bytes
    first_used: int | None = None
    first_store: int | None = None
    kills: int | None = None  # the OOM-kill counter when a step first freed something

    def read(self, raw: Sample) -> Sample:
        """The trace's sample as the pod reads after the steps so far."""
        if self.first_used is None:
            self.first_used = raw.unreclaimable_bytes
        if self.first_store is None:
            self.first_store = raw.plasma_used_bytes
        return _less(raw, self.freed, self.kills, self.store_freed)

    def free(self, raw: Sample, share: float) -> tuple[int, int]:
        """A step asked at ``raw`` that frees ``share`` of what the pod
        gained since its first sample (memory and store alike): the bytes
        it freed of each."""
        gained = (raw.unreclaimable_bytes or 0) - (self.first_used or 0) - self.freed
        store_gained = (raw.plasma_used_bytes or 0) - (self.first_store or 0) - self.store_freed
        now_freed, now_store_freed = int(max(0.0, gained) * share), int(max(0.0, store_gained) * share)
        if now_freed and self.freed == 0:
            self.kills = raw.oom_kill_count
        self.freed += now_freed
        self.store_freed += now_store_freed
        return now_freed, now_store_freed


def _less(sample: Sample, freed: float, kills: int | None, store_freed: float = 0.0) -> Sample:
    """The sample with ``freed`` bytes fewer in use (anon, and so
    memory.current), its OOM-kill counter held at ``kills``, and
    ``store_freed`` bytes fewer in its object store."""
    changes: dict[str, Any] = {}
    if freed > 0:
        changes["oom_kill_count"] = kills if kills is not None else sample.oom_kill_count
        if sample.anon_bytes is not None:
            changes["anon_bytes"] = max(0, int(sample.anon_bytes - freed))
        if sample.memory_current_bytes is not None:
            changes["memory_current_bytes"] = max(0, int(sample.memory_current_bytes - freed))
    if store_freed > 0 and sample.plasma_used_bytes is not None:
        changes["plasma_used_bytes"] = max(0, int(sample.plasma_used_bytes - store_freed))
    return dataclasses.replace(sample, **changes) if changes else sample


def replay(name: str, samples: Sequence[Sample], settings: PolicySettings,
           effects: StepEffects = NO_EFFECTS) -> Replay:
    window = PodWindow(settings)
    history = RotationHistory()
    acted: list[TimedDecision] = []
    marks: list[LadderMark] = []
    projections: list[tuple[float, float | None]] = []
    first_rotation: float | None = None
    step: Step | None = None
    freeing = Freeing()  # every sample after a step reads what it freed less
    n = 0
    for raw in samples:
        n += 1
        sample = freeing.read(raw)
        if not window.add(sample):
            continue
        now = sample.time_s
        decisions = decide(settings=settings, window=window, history=history, now_s=now)
        move = climb(settings=settings, step=step, decision=decisions[0], window=window, now_s=now)
        step = move.step
        if move.wants_replace and decisions[0].action is not Action.ROTATE and not history.ladder_replace:
            # As the operator does: the ladder's last rung asks the policy for the rotation, through its gates.
            decisions = decide(settings=settings, window=window,
                               history=dataclasses.replace(history, ladder_replace=True), now_s=now)
        if move.started or move.judged is not None or move.ended:
            share = effects.share(move.rung) if move.started else 0.0
            marks.append(LadderMark(now, move, *freeing.free(raw, share)))
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
                  window.limit_bytes, tuple(marks))


def _int_if_whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
