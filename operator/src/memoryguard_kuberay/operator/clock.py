"""The operator's clock: the wall clock, or (for the demo and the
accelerated end-to-end tests) a clock running ``scale`` times faster from
``epoch``, shared with sidecars that replay traces at the same speed."""

from __future__ import annotations

import datetime
import time


def iso(t: float) -> str:
    """Unix seconds as the RFC 3339 UTC time Kubernetes objects carry."""
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self, scale: float = 1.0, epoch: float | None = None) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self.epoch = time.time() if epoch is None else epoch

    def now(self) -> float:
        """Seconds on this clock (unix seconds when scale is 1)."""
        return self.epoch + (time.time() - self.epoch) * self.scale

    def real_seconds(self, clock_seconds: float) -> float:
        """How long to really wait for ``clock_seconds`` to pass."""
        return clock_seconds / self.scale
