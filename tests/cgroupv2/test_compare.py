"""The cgroup v2 tier's judge of served values, on records made here (fast:
no kit). A judge that could not fail would pass any sidecar; these show it
flags a value the files never said, and leaves alone only the samples it
cannot judge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .test_cgroupv2 import CURRENT_TRANSIENT, MIB, V2_FILES, compare, until_the_kill

LIMIT = 256 * MIB
FILES = {field: V2_FILES[field] for field in ("memory_current", "memory_max")}  # two values a sample


def read(t: float, current: int) -> dict[str, Any]:
    return {"t": t, "memory.current": str(current), "memory.max": str(LIMIT), "memory.high": "max"}


def record(samples: list[tuple[float, int]], reads: list[tuple[float, int]],
           events: tuple[tuple[str, float], ...] = ()) -> dict[str, Any]:
    body = {"samples": [{"time": t, "memory_current": v, "memory_max": LIMIT} for t, v in samples]}
    return {"answers": [{"at": samples[-1][0] + 0.5, "status": 200, "body": json.dumps(body)}],
            "reads": [read(t, v) for t, v in reads], "events": list(events)}


def leak(t: float) -> int:
    """memory.current of a leak of 1 MiB a second from 100 MiB at t=0."""
    return 100 * MIB + int(t) * MIB


READS = [(t / 4, leak(t / 4)) for t in range(0, 41)]  # a read every 0.25 s for 10 s


def test_a_served_value_the_files_said_between_its_reads_is_true() -> None:
    rec = record([(t + 0.1, leak(t + 0.5)) for t in range(9)], READS)
    n, bad = compare(rec, FILES)
    assert n == 2 * 8 and bad == []  # the last sample has no next one to bound its read


def test_a_value_no_read_around_it_said_is_flagged() -> None:
    off = 3 * MIB + CURRENT_TRANSIENT  # beyond one step of the file and the kernel's own jumps
    rec = record([(t + 0.1, leak(t + 0.5) + (off if t == 4 else 0)) for t in range(9)], READS)
    n, bad = compare(rec, FILES)
    assert n == 2 * 8 and len(bad) == 1 and bad[0].startswith("t=4.10 memory_current")


def test_a_sample_whose_span_holds_a_restart_or_no_read_after_it_is_not_judged() -> None:
    samples = [(t + 0.1, 0) for t in range(10)]  # nothing the files said, anywhere
    restart = record(samples, READS, (("ray restarted", 4.5),))
    n, bad = compare(restart, FILES)
    # Only the samples whose reads are 3 s or more from the restart are judged (and flagged).
    assert n == 2 * len(bad) and {b.split()[0] for b in bad} == {"t=0.10", "t=8.10"}
    early_reads = record(samples, READS[:20])  # the test's reads stop at 4.75 s
    n, _ = compare(early_reads, FILES)
    assert n == 2 * 4  # the samples at 0.1-3.1 s; the one at 4.1 s has no read after 5.1 s


def _leak(kill_served_at: float | None, stopped_at: float, oom_kill: int = 1) -> dict[str, Any]:
    """A leak sampled each second from t=0; the kernel's kill seen by the
    sidecar at ``kill_served_at`` (the emptied cgroup, oom_kill risen), the
    probe seeing the process gone at ``stopped_at``."""
    samples = []
    for t in range(0, int(stopped_at)):
        dead = kill_served_at is not None and t >= kill_served_at
        samples.append({"time": float(t), "memory_current": 80 * 1024 if dead else (40 + t) * MIB,
                        "memory_max": LIMIT, "oom_kill": 1 if dead else 0})
    return {"answers": [{"at": stopped_at, "status": 200, "body": json.dumps({"samples": samples})}],
            "reads": [], "events": [["ray stopped", stopped_at]],
            "at_kill": {"memory.events": {"max": 300, "oom": 1, "oom_kill": oom_kill}}}


def test_the_leak_ends_at_the_kernels_kill_even_when_the_probe_saw_it_late() -> None:
    # The CI run of 2026-12-07: the probe's loop lagged the sidecar, which had
    # already served the emptied cgroup; those samples are not the leak's.
    samples, killed = until_the_kill(_leak(kill_served_at=150, stopped_at=190))
    assert killed == 150.0 and samples[-1].time_s == 149.0 and samples[-1].memory_current_bytes == 189 * MIB
    samples, killed = until_the_kill(_leak(kill_served_at=None, stopped_at=190))
    assert killed == 190.0 and samples[-1].time_s == 189.0


def test_a_process_that_stopped_without_the_oom_killer_is_said() -> None:
    with pytest.raises(AssertionError, match="not by the kernel's OOM killer"):
        until_the_kill(_leak(kill_served_at=None, stopped_at=190, oom_kill=0))
