"""The operator's clock: the wall clock, or (for the demo and the
accelerated end-to-end tests) a clock running ``scale`` times faster from
``epoch``, shared with sidecars that replay traces at the same speed, or
(the demo) the time a world writes to a file and moves on only when the
operator has caught up (core/sharedclock.py)."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from memoryguard_kuberay.core import sharedclock


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


class Stopped(Protocol):
    """What a daemon waits on (kopf's DaemonStopped): true once stopping."""

    def __bool__(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Awaitable[object]: ...


SHARED_POLL_S = 0.005  # how often a sleeper on the shared clock looks at the time file


class Clock:
    def __init__(self, scale: float = 1.0, epoch: float | None = None, *, shared: Path | None = None,
                 wake: Path | None = None) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self.epoch = time.time() if epoch is None else epoch
        self.shared, self.wake = shared, wake
        # On the shared clock: the guards' daemons, and when each sleeps until.
        self.enlisted: set[str] = set()
        self.sleeping: dict[str, float] = {}
        # Work of the operator's besides the daemons' (the Event queue):
        # while any says busy, so does the wake file.
        self.pending: list[Callable[[], bool]] = []
        self._said: tuple[float | None] | None = None  # what the wake file says (None: nothing yet)

    def now(self) -> float:
        """Seconds on this clock (unix seconds when scale is 1)."""
        if self.shared is not None:
            return sharedclock.read_time(self.shared)
        return self.epoch + (time.time() - self.epoch) * self.scale

    def enlist(self, key: str) -> None:
        """A daemon that sleeps on this clock between its cycles: while it
        is not asleep the operator is busy, and a shared clock waits."""
        self.enlisted.add(key)
        self._say()

    def delist(self, key: str) -> None:
        self.enlisted.discard(key)
        self.sleeping.pop(key, None)
        self._say()

    async def sleep(self, clock_seconds: float, stopped: Stopped, key: str) -> None:
        """Until ``clock_seconds`` have passed on this clock, or ``stopped``."""
        if self.shared is None:
            await stopped.wait(self.real_seconds(clock_seconds))
            return
        self.sleeping[key] = self.now() + clock_seconds
        self._say()
        try:
            while not stopped and self.now() < self.sleeping[key]:
                await stopped.wait(SHARED_POLL_S)
                self._say()  # the Event queue may have emptied meanwhile
        finally:
            self.sleeping.pop(key, None)
            self._say()

    def _say(self) -> None:
        """The wake file: busy while any enlisted daemon is awake or any
        other work is pending, else the earliest time a daemon wakes."""
        if self.wake is None:
            return
        idle = self.enlisted and self.enlisted <= self.sleeping.keys() and not any(p() for p in self.pending)
        until = min(self.sleeping[k] for k in self.enlisted) if idle else None
        if self._said != (until,):
            sharedclock.write_wake(self.wake, until)
            self._said = (until,)

    def real_seconds(self, clock_seconds: float) -> float:
        """How long to really wait for ``clock_seconds`` to pass."""
        return clock_seconds / self.scale
