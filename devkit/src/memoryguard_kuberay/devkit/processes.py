"""Processes the devkit, its tests and its benchmarks start in a process
group of their own (Ray starts many), ended by that group's id: only what
was started here is ever signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any


def end_group(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:  # type: ignore[type-arg]
    """SIGTERM the process's group, SIGKILL it if it outlives ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def group(argv: list[str], **kw: Any) -> Iterator[subprocess.Popen]:  # type: ignore[type-arg]
    """``argv`` in a new session (its own process group), ended on exit."""
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    try:
        yield proc
    finally:
        end_group(proc)
