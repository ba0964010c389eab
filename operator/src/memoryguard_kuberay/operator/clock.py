"""The operator's clock: the wall clock, or (for the demo and the
accelerated end-to-end tests) a clock running ``scale`` times faster from
``epoch``, shared with sidecars that replay traces at the same speed."""

from __future__ import annotations

import datetime
import math
import time


def iso(t: float) -> str:
    """Unix seconds as the RFC 3339 UTC time Kubernetes objects carry."""
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float) -> str:
    """Unix seconds as RFC 3339 with microseconds (Kubernetes' MicroTime, as
    a Lease's renewTime): a time the operator reads back and computes with."""
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Times a status or an annotation may give back: from the epoch to the last
# second RFC 3339 can write (year 9999). Whoever may write them could write
# 1e300, which no datetime can hold (writing it back would fail every cycle).
_LAST_SECOND = 253402300799.0


def parse_time(raw: object) -> float | None:
    """A time read back from an object: RFC 3339 (what this operator writes)
    or unix seconds, as a number or its text (what statuses before 0.1.0
    and the rotation annotations hold); anything else, or a time outside the
    epoch to year 9999, is none."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and 0 < len(raw) <= 40:
        try:
            value = float(raw)
        except ValueError:
            try:
                when = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
            except ValueError:
                return None
            if when.tzinfo is None:
                return None  # RFC 3339 always names its zone
            value = when.timestamp()
    else:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= _LAST_SECOND else None


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
