"""The commands as a user runs them: `memoryguard-kuberay simulate`,
`bench` and `gen-traces` in a subprocess, checking output shapes; every command's --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.core.traceshapes import FIELD_BEHAVIOURS

LEAK = str(commands.examples_dir() / "leak_steady.csv")
HEALTHY = str(commands.examples_dir() / "healthy_gc_sawtooth.csv")


def mg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryguard_kuberay", *args], capture_output=True, text=True,
                          timeout=300)


def test_simulate_json_shape() -> None:
    r = mg("simulate", "--json", LEAK, HEALTHY)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one document
    assert set(doc) == {"traces"} and set(doc["traces"]) == {"leak_steady", "healthy_gc_sawtooth"}
    leak = doc["traces"]["leak_steady"]
    assert isinstance(leak["first_rotation_s"], int)
    last = leak["decisions"][-1]
    assert set(last) == {"t_s", "action", "reason", "message", "evidence"}
    assert last["action"] == "rotate" and last["t_s"] == leak["first_rotation_s"]
    assert last["evidence"]["projected_oom_s"] <= 7200 and last["evidence"]["limit_bytes"] > 0
    assert all(d["action"] != "none" for d in leak["decisions"])
    assert doc["traces"]["healthy_gc_sawtooth"]["first_rotation_s"] is None


def test_simulate_table_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    r = mg("simulate", "--plot", str(png), LEAK)
    assert r.returncode == 0, r.stderr
    assert "leak_steady" in r.stdout and "rotate" in r.stdout and "ProjectedOOM" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_guard_file_changes_policy_and_bad_guard_is_refused(tmp_path: Path) -> None:
    guard = tmp_path / "g.yaml"
    guard.write_text("apiVersion: memoryguard.io/v1alpha1\nkind: MemoryGuard\nspec:\n  policy:\n"
                     "    horizonSeconds: 1800\n")
    r = mg("simulate", "--json", "--guard", str(guard), LEAK)
    assert r.returncode == 0, r.stderr
    early = json.loads(mg("simulate", "--json", LEAK).stdout)["traces"]["leak_steady"]["first_rotation_s"]
    late = json.loads(r.stdout)["traces"]["leak_steady"]["first_rotation_s"]
    assert late > early  # a shorter horizon rotates later
    guard.write_text("spec:\n  policy:\n    horizonSeconds: -5\n    bogus: 1\n")
    r = mg("simulate", "--guard", str(guard), LEAK)
    assert r.returncode == 2
    assert "horizonSeconds: -5 is outside" in r.stderr and "bogus: unknown setting" in r.stderr


def test_missing_trace_is_a_clear_error() -> None:
    r = mg("simulate", "/nonexistent/x.csv")
    assert r.returncode == 2 and "No such file" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.replays
def test_bench_json_and_gen_traces(tmp_path: Path) -> None:
    r = mg("gen-traces", str(tmp_path), "--random", "6", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("*.csv"))) == 6
    r = mg("bench", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"policy", "baseline", "traces", "cost"}
    assert doc["cost"]["samples"] > 0 and doc["cost"]["us_per_sample"] > 0
    assert len(doc["traces"]) == 6


def test_gen_traces_field_writes_each_shape_with_the_columns_its_source_gives(tmp_path: Path) -> None:
    r = mg("gen-traces", str(tmp_path), "--field", "1", "--seed", "5")
    assert r.returncode == 0, r.stderr
    labels = json.loads((tmp_path / "labels.json").read_text())
    assert {n.rsplit("_", 1)[0] for n in labels} == set(FIELD_BEHAVIOURS)

    def header_and_first(name: str) -> dict[str, str]:
        with (tmp_path / f"{name}_00.csv").open() as f:
            return dict(zip(f.readline().strip().split(","), f.readline().strip().split(",")))

    no_limit = header_and_first("no_limit_leak")
    assert no_limit["memory_max"] == "" and int(no_limit["node_available"]) > 0
    at_high = header_and_first("memory_high_held")
    assert int(at_high["memory_high"]) < int(at_high["memory_max"]) and "events_high" in at_high
    unspilled = header_and_first("store_full_unspilled")
    assert unspilled["plasma_spilled"] == "" and int(unspilled["plasma_capacity"]) > 0
    assert labels["no_limit_leak_00"]["kind"] == "leak" and labels["no_limit_leak_00"]["oom_at_s"] is not None
    assert labels["morning_surge_00"]["kind"] == "healthy" and labels["morning_surge_00"]["oom_at_s"] is None


COMMANDS = [[], ["simulate"], ["bench"], ["gen-traces"], ["sidecar"], ["record"], ["operator"], ["uninstall"],
            ["forensics"], ["top"], ["demo"]]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "main" for c in COMMANDS])
def test_every_argument_of_every_command_says_what_it_is(command: list[str]) -> None:
    """Issue 26, 4: flags without help. In argparse's --help, an argument's
    help follows it on its line or the next, indented further."""
    import re

    r = mg(*command, "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    bare, section = [], False
    for i, ln in enumerate(lines):
        if re.match(r"^(options|positional arguments):", ln):
            section = True
        elif section and re.match(r"^  \S", ln):
            inline = len(re.split(r"\s{2,}", ln.strip(), maxsplit=1)) > 1
            below = i + 1 < len(lines) and re.match(r"^ {6,}\S", lines[i + 1])
            if not (inline or below):
                bare.append(ln.strip())
    assert section and not bare, f"{' '.join(command) or 'memoryguard-kuberay'}: no help for {bare}"
    # The description, where there is one, is whole sentences (its first
    # docstring line alone was cut mid-sentence).
    blocks = r.stdout.split("\n\n")
    description = " ".join(blocks[1].split()) if not re.match(r"^(options|positional arguments):", blocks[1]) else ""
    assert not description or description.endswith((".", ")")), description
