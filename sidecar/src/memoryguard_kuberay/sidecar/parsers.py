"""Parsers for what the sidecar reads: cgroup files, PSI, Prometheus text.

Each takes bytes (anything at all) and returns values or None; none raises.
Property tests feed them arbitrary bytes (tests/sidecar/test_parsers.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

# cgroup v1 reports "no limit" as a page-rounded LONG_MAX; anything this big
# is no limit (no machine has 1 EiB of memory).
NO_LIMIT_ABOVE = 2**60


def parse_int(data: bytes | None) -> int | None:
    """A single non-negative integer (``memory.current``)."""
    if not data:
        return None
    text = data.strip()
    if not text.isdigit() or len(text) > 20:
        return None
    return int(text)


def parse_limit(data: bytes | None) -> tuple[bool, int | None]:
    """``memory.max`` / ``memory.limit_in_bytes``: (valid, bytes or None for no limit)."""
    if not data:
        return False, None
    if data.strip() == b"max":
        return True, None
    value = parse_int(data)
    if value is None:
        return False, None
    return True, (None if value >= NO_LIMIT_ABOVE else value)


def parse_keyed(data: bytes | None) -> dict[str, int]:
    """``key value`` lines (``memory.stat``, ``memory.events``,
    ``memory.oom_control``); lines that are not that are skipped."""
    out: dict[str, int] = {}
    if not data:
        return out
    for line in data.split(b"\n"):
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or len(parts[1]) > 20:
            continue
        try:
            key = parts[0].decode("ascii")
        except UnicodeDecodeError:
            continue
        out[key] = int(parts[1])
    return out


def parse_kib(data: bytes | None) -> dict[str, int]:
    """``Key:   123 kB`` lines (``/proc/meminfo``, ``smaps_rollup``): the
    numbers as written, in KiB."""
    return parse_keyed((data or b"").replace(b":", b" ").replace(b" kB", b""))


def parse_psi(data: bytes | None) -> dict[str, float]:
    """``memory.pressure``: {"some_avg10": 1.5, "full_avg60": ...} in percent."""
    out: dict[str, float] = {}
    if not data:
        return out
    for line in data.split(b"\n"):
        parts = line.split()
        if not parts or parts[0] not in (b"some", b"full"):
            continue
        kind = parts[0].decode()
        for field in parts[1:]:
            key, sep, value = field.partition(b"=")
            if not sep or key not in (b"avg10", b"avg60", b"avg300"):
                continue
            try:
                f = float(value)
            except ValueError:
                continue
            if math.isfinite(f) and 0.0 <= f <= 100.0:
                out[f"{kind}_{key.decode()}"] = f
    return out


def prom_values(lines: Iterable[bytes], names: frozenset[bytes],
                only: Mapping[bytes, tuple[str, str]] | None = None) -> dict[bytes, float]:
    """Sum the samples of the wanted metric names in Prometheus text format.
    The page is streamed: a line is kept only when it starts with a wanted
    name (a raylet's page is ~300 KiB, of which a handful of lines matter),
    and each kept line is parsed by ``prometheus_client.parser`` (labels,
    escapes, NaN and +Inf as Prometheus reads them), alone, so one line it
    refuses costs only that line. Label sets of one name are summed (one
    raylet per pod reports one series per name), or for a name in ``only``,
    just those whose label has that value (``Location="SPILLED"``)."""
    out: dict[bytes, float] = {}
    only = only or {}
    for line in lines:
        if not line or line[0] == 35:  # '#'
            continue
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        if name not in names:
            continue
        try:
            families = list(text_string_to_metric_families(line.decode("utf-8") + "\n"))
        except (ValueError, UnicodeDecodeError, IndexError, TypeError):
            continue
        want = only.get(name)
        for family in families:
            for sample in family.samples:
                if sample.name.encode() != name or (want is not None and sample.labels.get(want[0]) != want[1]):
                    continue
                value = float(sample.value)
                if math.isfinite(value) and value >= 0:
                    out[name] = out.get(name, 0.0) + value
    return out
