"""A block of loopback addresses this process alone uses: ``127.X`` for its
simulated pods, so two runs on one machine (a demo beside the tests, two
demos) never bind the same address and port.

The claim is an exclusive ``flock`` on a file per block, held until the
process exits (the kernel drops it then, even after SIGKILL): nothing to
clean up, no stale claims. Blocks 127.0 (the host's own 127.0.0.1 and the
tests' fixed addresses) and 127.77 (realk8s pods) are never handed out.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from pathlib import Path
from typing import IO

_FIRST, _LAST = 2, 250
_NEVER = {77}
_held: tuple[str, IO[bytes]] | None = None


def claim_block() -> str:
    """``"127.X"``, claimed for this process (the same answer on every call)."""
    global _held
    if _held is not None:
        return _held[0]
    folder = Path(os.environ.get("MEMORYGUARD_LOOPBACK_LOCKS") or Path(tempfile.gettempdir()) / "memoryguard-loopback")
    folder.mkdir(parents=True, exist_ok=True)
    blocks = [b for b in range(_FIRST, _LAST + 1) if b not in _NEVER]
    random.shuffle(blocks)
    for b in blocks:
        f = open(folder / f"127.{b}.lock", "ab")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held = (f"127.{b}", f)
        return _held[0]
    raise RuntimeError(f"every loopback block 127.{_FIRST}-{_LAST} is claimed by another run (locks in {folder})")
