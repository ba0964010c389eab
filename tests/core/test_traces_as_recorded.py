"""Issue 39, 5 and 42, 7: traces as real recorders write them. NaN cells (a
Prometheus export's failed read), cgroup v2's "max" in memory_max, rows out
of time order (an NTP step, a sample written twice) are read as the
operator reads a sidecar's answer; a file that cannot be read (milliseconds
for seconds, not a CSV) is named with its reason and the others are scored."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.traces import TraceError, read_trace
from memoryguard_kuberay.core.traces import iter_samples as samples_of

EXAMPLES = commands.examples_dir()


def _rows(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_nan_max_and_time_out_of_order_are_read_as_the_operator_reads_them(tmp_path: Path) -> None:
    lines = _rows(EXAMPLES / "leak_steady.csv")
    header, body = lines[0], lines[1:]
    cols = header.split(",")
    mangled = []
    for i, line in enumerate(body):
        cells = line.split(",")
        if i % 50 == 7:
            cells[cols.index("psi_full_avg10")] = "NaN"
        if i % 50 == 9:
            cells[cols.index("memory_max")] = "max"
        mangled.append(",".join(cells))
        if i % 100 == 11:
            mangled.append(line)  # written twice
    mangled.insert(40, body[10])  # an NTP step back
    path = tmp_path / "recorded.csv"
    path.write_text("\n".join([header, *mangled]) + "\n")
    trace = read_trace(path)
    clean = read_trace(EXAMPLES / "leak_steady.csv")
    assert [s.time_s for s in trace.samples] == [s.time_s for s in clean.samples]
    said = " | ".join(trace.warnings)
    assert "NaN cell(s) read as unknown" in said and "'max' read as no limit" in said and "row(s) dropped" in said
    assert trace.samples[7].psi_full_avg10_pct is None and trace.samples[9].memory_max_bytes is None
    # Strict where no operator reads it: a stream read without a tally still refuses disorder.
    with pytest.raises(TraceError, match="does not come after"):
        list(samples_of(io.StringIO(f"{header}\n{body[1]}\n{body[0]}\n")))


def test_milliseconds_for_seconds_are_refused_saying_so(tmp_path: Path) -> None:
    lines = _rows(EXAMPLES / "healthy_bursts.csv")
    out = [lines[0]]
    for line in lines[1:200]:
        t, rest = line.split(",", 1)
        out.append(f"{float(t) * 1000:g},{rest}")
    path = tmp_path / "ms.csv"
    path.write_text("\n".join(out) + "\n")
    with pytest.raises(TraceError, match="milliseconds"):
        read_trace(path)


def test_simulate_over_a_folder_with_one_unreadable_file_scores_the_others(tmp_path: Path) -> None:
    for name in ("leak_steady", "healthy_bursts"):
        (tmp_path / f"{name}.csv").write_bytes((EXAMPLES / f"{name}.csv").read_bytes())
    (tmp_path / "broken.csv").write_bytes(b"\x89PNG\r\n not a trace")
    out, err = io.StringIO(), io.StringIO()
    code = commands.simulate([str(tmp_path)], guard=None, as_json=True, plot=None, out=out, progress=err)
    doc = json.loads(out.getvalue())
    assert code == 1 and sorted(doc["traces"]) == ["healthy_bursts", "leak_steady"]
    assert list(doc["unreadable"]) == [str(tmp_path / "broken.csv")] and "UTF-8" in doc["unreadable"][
        str(tmp_path / "broken.csv")]
    assert f"error: {tmp_path / 'broken.csv'}: not scored" in err.getvalue()


def test_a_picture_is_named_as_one() -> None:
    with pytest.raises(commands.UsageError, match="picture"):
        commands.simulate([str(EXAMPLES / "leak_steady.csv")], guard=None, as_json=True, plot="x.txt")
