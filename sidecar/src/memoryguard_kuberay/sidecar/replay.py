"""``--replay TRACE.csv --speed N``: serve a recorded trace as if live.

Replay runs on a shared accelerated clock, ``clock = epoch + (wall - epoch)
* speed``, the same one an operator started with that epoch and time scale
uses. The trace's row at ``t_s`` becomes visible when the clock reaches
``start + t_s`` and is stamped with that time, so the operator sees the pod
exactly as it would have lived, in 1/N of the time. With the defaults
(epoch and start = now) a trace simply plays from the sidecar's start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from memoryguard_kuberay.core.samples import Sample


class ReplayFeed:
    def __init__(self, samples: Sequence[Sample], *, speed: float, epoch_s: float,
                 start_s: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.samples = samples
        self.speed = speed
        self.epoch_s = epoch_s
        self.start_s = epoch_s if start_s is None else start_s
        self.next = 0

    @property
    def finished(self) -> bool:
        return self.next >= len(self.samples)

    def clock(self, wall_s: float) -> float:
        return self.epoch_s + (wall_s - self.epoch_s) * self.speed

    def due(self, wall_s: float) -> list[Sample]:
        """Rows that have come due by ``wall_s``, stamped on the shared clock."""
        out = []
        trace_now = self.clock(wall_s) - self.start_s
        while self.next < len(self.samples) and self.samples[self.next].time_s <= trace_now:
            s = self.samples[self.next]
            out.append(dataclasses.replace(s, time_s=self.start_s + s.time_s))
            self.next += 1
        return out
