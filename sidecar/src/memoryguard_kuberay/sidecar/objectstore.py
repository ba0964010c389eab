"""The Ray object store (Plasma), read from the raylet's Prometheus endpoint
in the same pod, and the bytes charged in ``/dev/shm``.

The raylet refreshes its metrics about every 10 s and the page is ~300 KiB,
so the scraper keeps its last values and asks no more often than
``min_interval_s``; it streams the page line by line and keeps only the few
names it needs. ``/dev/shm`` usage is a high-water mark (Plasma never returns
its pages), so it is served as ``shm_charged_bytes``, never as live objects.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import time
import urllib.parse

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.sidecar.parsers import prom_values

USED = b"ray_object_store_used_memory"
AVAILABLE = b"ray_object_store_available_memory"
FALLBACK = b"ray_object_store_fallback_memory"
# Bytes of objects spilled to disk and still there: one series of this name
# per location (MMAP_SHM, MMAP_DISK, SPILLED, WORKER_HEAP).
BY_LOCATION = b"ray_object_store_memory"
SPILLED_ONLY = {BY_LOCATION: ("Location", "SPILLED")}
WANTED = frozenset({USED, AVAILABLE, FALLBACK, BY_LOCATION})
MAX_PAGE_BYTES = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class StoreReading:
    used_bytes: int | None = None
    capacity_bytes: int | None = None
    fallback_bytes: int | None = None
    spilled_bytes: int | None = None


class RayMetricsScraper:
    def __init__(self, url: str, *, min_interval_s: float = 10.0, timeout_s: float = 2.0,
                 deadline_s: float = 5.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"ray metrics URL must be http://host:port/path, got {url!r}")
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.path = parsed.path or C.RAY_METRICS_PATH
        self.min_interval_s = min_interval_s
        self.timeout_s = timeout_s  # each connect and read
        # The whole scrape: a page that drips one line a second never times a
        # read out, and would hold a reading for ever (issue 44, 6).
        self.deadline_s = deadline_s
        self.last = StoreReading()
        self.last_attempt_s: float | None = None
        self.errors = 0

    def due(self, now_s: float) -> bool:
        return self.last_attempt_s is None or now_s - self.last_attempt_s >= self.min_interval_s

    def scrape(self, now_s: float) -> StoreReading:
        """Fetch and parse (blocking: the sampling loop runs it in a thread of
        its own and reads ``last``, never waiting on it). On
        failure the reading becomes unknown: a stale store value is worse
        than none."""
        self.last_attempt_s = now_s
        try:
            values = self._fetch()
        except (OSError, http.client.HTTPException, ValueError):
            self.errors += 1
            self.last = StoreReading()
            return self.last
        used, avail, fallback = values.get(USED), values.get(AVAILABLE), values.get(FALLBACK)
        spilled = values.get(BY_LOCATION)
        self.last = StoreReading(
            used_bytes=None if used is None else int(used),
            capacity_bytes=None if used is None or avail is None else int(used + avail),
            fallback_bytes=None if fallback is None else int(fallback),
            # Absent until Ray has spilled something: with the store known, that is 0.
            spilled_bytes=int(spilled) if spilled is not None else (None if used is None else 0),
        )
        return self.last

    def _fetch(self) -> dict[bytes, float]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("GET", self.path, headers={"Connection": "close", "Accept": "text/plain"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}")
            lines = _bounded_lines(resp, MAX_PAGE_BYTES, time.monotonic() + self.deadline_s)
            return prom_values(lines, WANTED, SPILLED_ONLY)
        finally:
            conn.close()


def _bounded_lines(resp: http.client.HTTPResponse, limit: int, deadline: float):  # type: ignore[no-untyped-def]
    total = 0
    while True:
        line = resp.readline(65536)
        if not line:
            return
        total += len(line)
        if total > limit:
            raise ValueError("metrics page too large")
        if time.monotonic() > deadline:
            raise ValueError("metrics page too slow")
        yield line.rstrip(b"\r\n")


def shm_charged_bytes(path: str = "/dev/shm") -> int | None:
    """Bytes in use on the /dev/shm filesystem (a high-water mark of Plasma)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize
