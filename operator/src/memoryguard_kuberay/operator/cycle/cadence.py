"""When a guard's next cycle starts: every sampling interval, at the
guard's own place within it.

Every guard of a replica may start at once (a start, the first placement
of the shards, a takeover). Cycles started an interval after the one
before keep that phase for ever, and then all guards' polls queue at the
namespace's poll slots together: a pod polled first in one burst and last
in the next waits nearly two intervals between polls (30 s at 15 s,
measured at 40,000 pods). So each guard keeps to a stable offset within
the interval, taken from its name (the same in every replica, so a
takeover keeps it), and the replica's polls spread over the interval.
Pure: the times come in, the pause goes out.
"""

from __future__ import annotations

import zlib


def phase_of(namespace: str, name: str) -> float:
    """The guard's place within its interval, a fraction in [0, 1): stable
    across processes and replicas (crc32, not Python's salted ``hash``)."""
    return zlib.crc32(f"{namespace}/{name}".encode()) / 2**32


def pause(*, started: float, now: float, interval_s: float, phase: float, min_pause_s: float) -> float:
    """The pause from ``now`` until the next cycle of a guard whose cycle
    began at ``started``: at the guard's slot (``phase`` of the interval)
    nearest to one interval after ``started``. A guard already on its slot
    waits the interval less the cycle's time, as before; one off it moves
    there at once, starting between half and one and a half intervals after
    ``started``, so no pod waits two intervals to be polled. A cycle that
    overran its slot is followed at once, after ``min_pause_s``."""
    target = started + interval_s
    slot = target - (target - phase * interval_s) % interval_s  # the guard's slot at or before target
    if target - slot > interval_s / 2:
        slot += interval_s  # the nearer one is after
    return max(min_pause_s, slot - now)
