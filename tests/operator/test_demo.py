"""The demo, headless (``memoryguard-kuberay demo --json``), as a user would run it:
every leak caught before its OOM, no false rotation, every rotated worker
replaced, no plain delete, and no process left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def _descendants_alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()}


def _memoryguard_processes() -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"memoryguard-kuberay\x00sidecar" in cmd or b"memoryguard-kuberay\x00operator" in cmd:
                out.add(int(d.name))
    return out


def test_demo_headless(tmp_path: Path) -> None:
    before = _memoryguard_processes()
    out = subprocess.run([str(Path(sys.executable).parent / "memoryguard-kuberay"), "demo", "--json", "--plot",
                          str(tmp_path / "demo.png")], capture_output=True, text=True, timeout=300,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert set(summary) >= {"workers", "leaks", "caught", "rotations", "false_rotations", "remediations",
                            "duration_s"}
    assert summary["leaks"] >= 2 and summary["caught"] == summary["leaks"]
    assert summary["false_rotations"] == 0 and summary["plain_deletes"] == 0
    assert summary["replaced"] == summary["rotations"] == summary["leaks"]
    assert summary["duration_s"] <= 120
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert _descendants_alive(_memoryguard_processes() - before) == set()
