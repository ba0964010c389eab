"""Every test tier, in two pytest processes at once (``make test``, what CI
runs).

Run one after another, the tiers spend most of their time waiting: for an
operator's next cycle, a kubelet's grace period, a guest kernel's boot. A
fresh-clone CI took 72 minutes of wall time on this 2-core machine with the
CPU busy 58% of one core. Two lanes keep both cores in use. The tiers that
start real Ray (``ray``, ``realpods``) share a lane, so the two heaviest
start-ups never meet; the rest is split so that the lanes take about as long
(their times in the README's table): lane A the end-to-end tier but its
fault matrix, the emulator's checks, real Ray and real pods; lane B the rest.

Lane B is everything lane A does not select, so a test of a tier added later
still runs. Each lane writes to its own log; a line every minute says where
each lane is, and the logs are printed whole at the end, one after the other.

The fast tier (``make check``) runs in two lanes too: the operator's tests in
one, the rest in the other.

    python -m tests.lanes [PYTEST ARGS...]         # every tier; extra arguments go to both lanes
    python -m tests.lanes --fast MARKS [ARGS...]   # the fast tier (the Makefile's marker expression)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LANE_A_TIERS = ("e2e", "emulator", "ray", "realpods")
# The fault matrix (its tests are e2e's too) runs in lane B: with it, lane A
# took 3,258 s of a 3,374 s fresh-clone CI run and lane B 1,965 s (2026-12-07,
# the real-pod tier on the whole cluster 1,681 s of lane A); the matrix is
# about 500 s of it.
LANE_B_TIERS = ("faults",)
LANE_A = f"({' or '.join(LANE_A_TIERS)}) and not ({' or '.join(LANE_B_TIERS)})"
LANES = (("A", ["-m", LANE_A]), ("B", ["-m", f"not ({LANE_A})"]))
# The fast tier in two lanes of about equal time: the operator's and the
# chart's tests, and the rest. (Its replays of whole trace sets, about half its time, are the
# ``replays`` tier since issue 62, 6: with them the fast tier took 444 s
# beside a CI run and 625 s on a loaded machine.)
FAST_SPLIT = ("tests/operator", "tests/deploy")  # 104 s and 189 s when split at tests/operator alone


def fast_lanes(marks: str) -> tuple[tuple[str, list[str]], ...]:
    """The fast tier (``marks``) split: the operator's and the chart's tests, and everything else."""
    return (("operator", ["-m", marks, *FAST_SPLIT]),
            ("rest", ["-m", marks, *(f"--ignore={p}" for p in FAST_SPLIT)]))

PROGRESS_EVERY_S = 60.0
# pytest -q's progress: a line of one letter a test (".", "F", "E", "s", "x",
# "X"), 80 to a line, with the share done at the end of a full one.
_OUTCOMES = re.compile(rb"^([.FEsxX]+)(?:\s+\[\s*\d+%\])?$", re.MULTILINE)


@dataclass
class Lane:
    name: str
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes]
    started: float
    ended: float | None = None

    def progress(self) -> str:
        """How many tests the lane has run and how many failed, from pytest's
        progress letters."""
        if self.ended is not None:
            return f"done (rc {self.proc.returncode}) in {self.ended - self.started:.0f} s"
        letters = b"".join(_OUTCOMES.findall(self.log.read_bytes()))
        failed = letters.count(b"F") + letters.count(b"E")
        return f"{len(letters)} tests run" + (f", {failed} failed" if failed else "")


def _start(name: str, args: list[str], logs: Path, extra: list[str]) -> Lane:
    log = logs / f"lane-{name}.log"
    # The cache plugin off: two processes writing .pytest_cache at once race.
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, *extra]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Lane(name, args, log, proc, time.monotonic())


def _stop(lanes: list[Lane]) -> None:
    for lane in lanes:
        if lane.proc.poll() is None:
            os.killpg(lane.proc.pid, signal.SIGTERM)  # the lane's own session: its pytest and what it started
    for lane in lanes:
        try:
            lane.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(lane.proc.pid, signal.SIGKILL)
            lane.proc.wait()


def run(extra: list[str], lane_args: tuple[tuple[str, list[str]], ...] = LANES) -> int:
    logs = Path(tempfile.mkdtemp(prefix="memoryguard-lanes-"))
    lanes: list[Lane] = []

    def terminated(*_: object) -> None:
        _stop(lanes)
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)
    print(f"lanes: {len(LANES)} pytest processes; their logs in {logs}", flush=True)
    for name, args in lane_args:
        lanes.append(_start(name, args, logs, extra))
        print(f"lane {name}: pytest {' '.join(args)}", flush=True)
    began = time.monotonic()
    try:
        next_line = began + PROGRESS_EVERY_S
        while any(lane.ended is None for lane in lanes):
            time.sleep(1.0)
            for lane in lanes:
                if lane.ended is None and lane.proc.poll() is not None:
                    lane.ended = time.monotonic()
            if time.monotonic() >= next_line:
                next_line += PROGRESS_EVERY_S
                states = " · ".join(f"lane {lane.name} {lane.progress()}" for lane in lanes)
                print(f"[{(time.monotonic() - began) / 60:4.0f} min] {states}", flush=True)
    except KeyboardInterrupt:
        _stop(lanes)
        return 130
    for lane in lanes:
        print(f"\n{'=' * 30} lane {lane.name}: pytest {' '.join(lane.args)} {'=' * 30}", flush=True)
        sys.stdout.buffer.write(lane.log.read_bytes())
        sys.stdout.flush()
    print()
    for lane in lanes:
        print(f"lane {lane.name}: {lane.progress()}")
    print(f"all lanes: {time.monotonic() - began:.0f} s wall")
    # pytest's 5 is "no tests collected": a misconfigured lane in a full run,
    # but a lane a filter (-k, a path) left empty when arguments were given.
    passing = {0, 5} if extra else {0}
    failed = [lane.proc.returncode for lane in lanes if lane.proc.returncode not in passing]
    return (failed[0] if failed[0] > 0 else 1) if failed else 0  # a lane killed by a signal has a negative code


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--fast"] and len(argv) >= 2:
        sys.exit(run(argv[2:], fast_lanes(argv[1])))
    sys.exit(run(argv))
