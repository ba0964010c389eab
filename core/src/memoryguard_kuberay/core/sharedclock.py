"""A clock shared through files, for the demo and the emulated end-to-end
world only (issue 61, 1): never in a cluster.

At 900x a second the host spends elsewhere is a quarter of an hour of the
story, so a clock that runs on the wall makes the demo's ending depend on
the machine's spare CPU. Here the world owns the time instead: it writes
it to the *time file*, and moves it on only when every process it drives
has caught up. The operator and the sidecars read the time from that file.
The operator says in its *wake file* either ``busy`` (a cycle is running)
or the time it next has work (``idle <t>``); the world never moves the
time past that, and never while it reads ``busy``. Each file is written
whole (aside, then renamed), so a reader sees the old text or the new.
"""

from __future__ import annotations

import os
from pathlib import Path

BUSY = "busy"
IDLE = "idle"


def _write(path: Path, text: str) -> None:
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(text, encoding="ascii")
    os.replace(part, path)


def write_time(path: Path, t: float) -> None:
    _write(path, f"{t!r}\n")


def read_time(path: Path) -> float:
    """The shared time; an OSError or ValueError when the file is not
    there or not a time (the world writes it before it starts anyone)."""
    return float(path.read_text(encoding="ascii"))


def write_wake(path: Path, until: float | None) -> None:
    """``None``: busy; else idle until ``until`` on the shared clock."""
    _write(path, BUSY if until is None else f"{IDLE} {until!r}")


def read_wake(path: Path) -> float | None:
    """The time until which the writer is idle; None while it is busy,
    has not said yet, or wrote something else (the world then waits)."""
    try:
        word, _, value = path.read_text(encoding="ascii").partition(" ")
        return float(value) if word == IDLE else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
