"""``--replay TRACE.csv --speed N``: serve a recorded trace as if live.

The trace's clock runs N times faster than the wall clock from ``epoch``:
the row at ``t_s`` becomes visible at wall time ``epoch + t_s / N`` and is
served with ``time = epoch + t_s``. An operator started with the same epoch
and time scale sees the pod exactly as it would have, in 1/N of the time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from memoryguard.core.samples import Sample


class ReplayFeed:
    def __init__(self, samples: Sequence[Sample], *, speed: float, epoch_s: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.samples = samples
        self.speed = speed
        self.epoch_s = epoch_s
        self.next = 0

    @property
    def finished(self) -> bool:
        return self.next >= len(self.samples)

    def due(self, wall_s: float) -> list[Sample]:
        """Rows that have come due by ``wall_s``, stamped on the trace clock."""
        out = []
        trace_now = (wall_s - self.epoch_s) * self.speed
        while self.next < len(self.samples) and self.samples[self.next].time_s <= trace_now:
            s = self.samples[self.next]
            out.append(dataclasses.replace(s, time_s=self.epoch_s + s.time_s))
            self.next += 1
        return out
