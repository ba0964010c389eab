"""Open-once, ``pread``-many file reading for cgroup and procfs files.

Re-reading an open cgroup file at offset 0 makes the kernel render it anew,
so a sample costs one syscall per file instead of open/read/close (1-7 us
against 11-40 us measured on such files). A read that fails closes the file;
the next read tries to open it again (the container may have restarted).
"""

from __future__ import annotations

import contextlib
import os

MAX_FILE_BYTES = 64 * 1024  # memory.stat is ~1.5 KiB; anything bigger is not ours


class PreadFile:
    __slots__ = ("errors", "fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.errors = 0

    def read(self) -> bytes | None:
        """The file's whole content, or None (and an error counted)."""
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self.fd, MAX_FILE_BYTES, 0)
        except OSError:
            self.errors += 1
            self.close()
            return None

    def exists(self) -> bool:
        return self.fd is not None or os.path.exists(self.path)

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
