"""``--replay TRACE.csv --speed N``: serve a recorded trace as if live.

Replay runs on a shared accelerated clock, ``clock = epoch + (wall - epoch)
* speed``, the same one an operator started with that epoch and time scale
uses. The trace's row at ``t_s`` becomes visible when the clock reaches
``start + t_s`` and is stamped with that time, so the operator sees the pod
exactly as it would have lived, in 1/N of the time. With the defaults
(epoch and start = now) a trace simply plays from the sidecar's start.
With ``--clock-file`` (the demo) the clock is instead the time the demo's
world writes there (core/sharedclock.py), and the wall is not read.

A trace is what a pod did when nobody asked it anything. Given the pod's
pressure file (``--replay-pressure-file``: what the ladder asked, as the
kubelet shows the annotation) and what each step frees
(``--replay-reclaim``, ``--replay-shed``: ``simulate --step-effects``'
shares), the replay answers a step as a workload would: from the step on,
it serves that much less (``core/simulate.py``'s ``Freeing``, the same as
``simulate``). The demo's ladder pods are played so.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Sequence
from pathlib import Path

from memoryguard_kuberay.core import pressure, sharedclock
from memoryguard_kuberay.core.policy.ladder import Rung
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.simulate import NO_EFFECTS, Freeing, StepEffects


class ReplayFeed:
    def __init__(self, samples: Sequence[Sample], *, speed: float, epoch_s: float,
                 start_s: float | None = None, effects: StepEffects = NO_EFFECTS,
                 pressure_file: Path | None = None, clock_file: Path | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.samples = samples
        self.speed = speed
        self.epoch_s = epoch_s
        self.start_s = epoch_s if start_s is None else start_s
        self.next = 0
        self.effects = effects
        self.pressure_file = pressure_file
        self.clock_file = clock_file
        self.freeing = Freeing()
        self.answered: tuple[str, str | None] | None = None  # the last step answered: (step, since)
        self.pending: tuple[float, float] | None = None  # a step read, not yet answered: (share, its time)
        self.last_raw: Sample | None = None

    @property
    def finished(self) -> bool:
        return self.next >= len(self.samples)

    def clock(self, wall_s: float) -> float:
        if self.clock_file is not None:
            return sharedclock.read_time(self.clock_file)
        return self.epoch_s + (wall_s - self.epoch_s) * self.speed

    def due(self, wall_s: float) -> list[Sample]:
        """Rows that have come due by ``wall_s``, stamped on the shared clock
        (less what the steps asked so far freed)."""
        self.read_steps()
        out = []
        trace_now = self.clock(wall_s) - self.start_s
        while self.next < len(self.samples) and self.samples[self.next].time_s <= trace_now:
            raw = self.samples[self.next]
            if self.pending is not None and self.start_s + raw.time_s >= self.pending[1]:
                # Rows come in batches (a second of wall time is minutes of the
                # trace): the step frees from its own time on, not before it.
                self.freeing.free(self.last_raw or raw, self.pending[0])
                self.pending = None
            self.last_raw = raw
            s = self.freeing.read(raw)
            out.append(dataclasses.replace(s, time_s=self.start_s + s.time_s))
            self.next += 1
        return out

    def read_steps(self) -> None:
        """A step the pressure file shows that was not answered yet: it
        frees its share from the step's time on (``since``, on the shared
        clock)."""
        if self.pressure_file is None or self.effects == NO_EFFECTS:
            return
        try:
            asked = pressure.parse(self.pressure_file.read_text(encoding="utf-8")[: pressure.MAX_BYTES + 1])
        except (OSError, UnicodeDecodeError):
            return  # not written yet: nothing asked
        if asked is None or asked.step not in (Rung.RECLAIM.value, Rung.SHED.value):
            return
        key = (asked.step, asked.since)
        if key != self.answered:
            self.answered = key
            self.pending = (self.effects.share(Rung(asked.step)), _unix(asked.since))


def _unix(iso: str | None) -> float:
    """The step's ``since`` as unix seconds; one that does not read frees at once."""
    try:
        return datetime.datetime.fromisoformat(iso or "").timestamp()
    except ValueError:
        return -math.inf
