"""Trace files: the CSV format of ``shared/traces`` (one row per sample,
``t_s`` seconds since the pod started, bytes as integers).

Reading is strict where a file cannot be meant as a trace: a missing column
the replay needs, or a cell that is not a number (or is negative), is an
error naming the file, the line and the column; and tolerant where the
operator is (see ``Tolerated``: NaN cells, memory_max "max", rows out of
time order). An empty cell is an unknown reading, as the sidecar would report it;
a column the policy needs to judge memory that is absent or empty on every
row is said in ``Trace.warnings`` (the replay would otherwise never act, and
say nothing).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from memoryguard_kuberay.core.samples import (
    KERNEL_COLUMNS,
    NODE_COLUMNS,
    TRACE_COLUMNS,
    V2_ONLY_COLUMNS,
    WIRE_FIELDS,
    Sample,
    _number,
)

_ATTR = {"t_s": "time_s", **{wire: attr for wire, attr in WIRE_FIELDS}}


class TraceError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Trace:
    name: str  # file name without .csv
    samples: tuple[Sample, ...]
    warnings: tuple[str, ...] = ()  # what the replay will not be able to judge, and why


# The working set is memory_current - inactive_file (as the kubelet computes
# it); without either, or without the limit, the policy judges no memory.
NEEDED_FOR_MEMORY = {
    "inactive_file": "the working set (memory_current - inactive_file) is unknown: the policy judges no memory, "
                     "only the object store",
    "memory_max": "no limit is known: no threshold, no projected OOM",
}


def blind_spots(samples: Iterable[Sample], columns: Iterable[str], source: str) -> tuple[str, ...]:
    """Warnings for the columns the policy needs that the trace lacks or
    leaves empty on every row."""
    rows = list(samples)
    have = set(columns)
    out = []
    for column, why in NEEDED_FOR_MEMORY.items():
        if column not in have:
            out.append(f"{source}: no {column} column: {why}")
        elif rows and all(getattr(s, _ATTR[column]) is None for s in rows):
            out.append(f"{source}: column {column} is empty on every row: {why}")
    return tuple(out)


# Read as the operator reads a sidecar's answer (issue 39, 5): a cell a
# Prometheus export writes for a failed read is an unknown reading; cgroup
# v2's own "max" in memory_max is no limit; a row whose time does not come
# after the one before (an NTP step, a sample written twice) is dropped and
# counted, as the operator drops samples older than its last.
UNKNOWN_CELLS = frozenset({"nan", "-nan", "+nan"})
NO_LIMIT = "max"
# A median step between samples this long says the times are not seconds
# (a sidecar samples every 5-60 s; milliseconds read as seconds made an
# hour's trace "11995.83 h").
IMPLAUSIBLE_STEP_S = 1000.0


@dataclasses.dataclass
class Tolerated:
    """What reading a trace let pass, as the live path does, to be said."""

    unknown_cells: int = 0
    no_limit_cells: int = 0
    dropped_rows: int = 0
    # Lines whose row has fewer cells than the header: cut off (a trace
    # copied while it was written, a disk full), dropped and named.
    cut_lines: list[int] = dataclasses.field(default_factory=list)
    # The file does not end in a newline: its last row may be cut mid-number.
    unterminated_line: int | None = None

    def warnings(self, source: str) -> list[str]:
        out = []
        if self.unknown_cells:
            out.append(f"{source}: {self.unknown_cells} NaN cell(s) read as unknown readings")
        if self.no_limit_cells:
            out.append(f"{source}: memory_max 'max' read as no limit on {self.no_limit_cells} row(s)")
        if self.dropped_rows:
            out.append(f"{source}: {self.dropped_rows} row(s) dropped: their t_s did not come after the row before "
                       "(as the operator drops a sample older than its last)")
        if self.cut_lines:
            lines = ", ".join(str(n) for n in self.cut_lines[:5]) + (" ..." if len(self.cut_lines) > 5 else "")
            out.append(f"{source}: {len(self.cut_lines)} row(s) cut off (fewer cells than the header) dropped: "
                       f"line(s) {lines}")
        if self.unterminated_line is not None and self.unterminated_line not in self.cut_lines:
            out.append(f"{source}:{self.unterminated_line}: the file ends without a newline: its last row may be cut "
                       "off mid-number (read as it stands)")
        return out


def iter_samples(stream: IO[str], *, source: str = "<stream>", tolerated: Tolerated | None = None) -> Iterator[Sample]:
    """Samples in order. Time must start at 0 or later; a row whose time does
    not come after the one before is dropped (counted in ``tolerated``; an
    error naming the line where none is given), as the operator drops a
    sample older than its last."""
    reader = csv.DictReader(stream)
    try:
        fields = reader.fieldnames
    except csv.Error as exc:
        raise TraceError(f"{source}:1: {exc}") from None
    if fields is None:
        raise TraceError(f"{source}: empty file, expected a header with {', '.join(TRACE_COLUMNS)}")
    missing = [c for c in ("t_s", "memory_current") if c not in fields]
    if missing:
        raise TraceError(f"{source}: missing column(s) {', '.join(missing)}")
    last: float | None = None
    lineno = 1
    try:
        for lineno, row in enumerate(reader, start=2):
            # csv gives a cell missing from a short row as None ("" is an empty cell).
            if None in row or any(row.get(c) is None for c in fields):
                if tolerated is not None and None not in row:
                    tolerated.cut_lines.append(lineno)
                    continue
                have = len([c for c in fields if row.get(c) is not None]) + len(row.get(None) or [])
                raise TraceError(f"{source}:{lineno}: {have} cell(s) where the header has {len(fields)}: "
                                 + ("the row was cut off" if None not in row else "more cells than columns"))
            for column in fields:
                raw = row.get(column)
                if column not in _ATTR or raw in (None, ""):
                    continue
                word = str(raw).strip().lower()
                if tolerated is not None and column != "t_s" and word in UNKNOWN_CELLS:
                    row[column] = ""
                    tolerated.unknown_cells += 1
                    continue
                if tolerated is not None and column == "memory_max" and word == NO_LIMIT:
                    row[column] = ""
                    tolerated.no_limit_cells += 1
                    continue
                value = _number(raw)
                if value is None:
                    raise TraceError(f"{source}:{lineno}: column {column}: {str(raw)[:40]!r} is not a number")
                if value < 0:
                    raise TraceError(f"{source}:{lineno}: column {column}: {str(raw)[:40]} is negative")
            try:
                s = Sample.from_trace_row(row)
            except (ValueError, OverflowError) as exc:
                raise TraceError(f"{source}:{lineno}: {str(exc)[:200]}") from None
            if s.time_s < 0:
                raise TraceError(f"{source}:{lineno}: t_s {s.time_s:g} is negative")
            if last is not None and s.time_s <= last:
                if tolerated is not None:
                    tolerated.dropped_rows += 1
                    continue
                raise TraceError(f"{source}:{lineno}: t_s {s.time_s:g} does not come after {last:g} (rows must be "
                                 "in time order, each time once)")
            last = s.time_s
            yield s
    except csv.Error as exc:
        raise TraceError(f"{source}:{lineno + 1}: {exc}") from None


def _unterminated_line(p: Path) -> int | None:
    """The number of the file's last line where it does not end in a newline."""
    with p.open("rb") as raw:
        if raw.seek(0, 2) == 0:
            return None
        raw.seek(-1, 2)
        if raw.read(1) in (b"\n", b"\r"):
            return None
        raw.seek(0)
        return 1 + sum(chunk.count(b"\n") for chunk in iter(lambda: raw.read(1 << 16), b""))


def read_trace(path: str | Path) -> Trace:
    p = Path(path)
    try:
        if not p.is_file():
            raise TraceError(f"{p}: not a regular file" if p.exists() else f"{p}: No such file")
        tolerated = Tolerated()
        with p.open(newline="", encoding="utf-8") as f:
            samples = tuple(iter_samples(f, source=str(p), tolerated=tolerated))
        with p.open(newline="", encoding="utf-8") as f:
            columns = next(csv.reader(f), [])
        tolerated.unterminated_line = _unterminated_line(p)
    except OSError as exc:
        raise TraceError(f"{p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p}: not a UTF-8 text file (byte {exc.start}): is it a trace CSV?") from None
    steps = sorted(b.time_s - a.time_s for a, b in itertools.pairwise(samples))
    if steps and steps[len(steps) // 2] >= IMPLAUSIBLE_STEP_S:
        raise TraceError(f"{p}: the median time between samples is {steps[len(steps) // 2]:g} s: t_s is in seconds "
                         "(are these milliseconds?)")
    return Trace(name=p.stem, samples=samples,
                 warnings=(*tolerated.warnings(str(p)), *blind_spots(samples, columns, str(p))))


def write_trace(samples: Iterable[Sample], stream: IO[str]) -> int:
    """The samples as CSV. The cgroup v2 only columns, the node's and the
    kernel's are written when the first sample has one of them (a v2 source
    gives its event counters and memory.stat from the first reading; a pod
    with no limit the node's available memory), so a v1 or generated trace
    reads as it always did."""
    def columns(first: dict[str, str]) -> list[str]:
        left_out = {c for group in (V2_ONLY_COLUMNS, NODE_COLUMNS, KERNEL_COLUMNS)
                    if not any(first.get(c) for c in group)
                    for c in group}
        return [c for c in TRACE_COLUMNS if c not in left_out]

    writer: csv.DictWriter[str] | None = None
    n = 0
    for s in samples:
        row = s.to_trace_row()
        if writer is None:
            writer = csv.DictWriter(stream, fieldnames=columns(row), lineterminator="\n", extrasaction="ignore")
            writer.writeheader()
        writer.writerow(row)
        n += 1
    if writer is None:
        csv.writer(stream, lineterminator="\n").writerow(columns({}))
    return n


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into their ``*.csv`` files, sorted by name."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(p.glob("*.csv")))
        else:
            out.append(p)
    return out


def read_labels(path: str | Path) -> dict[str, dict[str, Any]]:
    """``labels.json`` as in shared/traces: name -> {kind, oom_at_s, ...}."""
    try:
        with Path(path).open() as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise TraceError(f"{path}: expected an object mapping trace names to labels")
    return doc
