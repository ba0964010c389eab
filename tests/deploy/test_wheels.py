"""The parts as built wheels (issue 14): installed in a fresh venv outside
the checkout, ``memoryguard-kuberay[demo]`` brings the devkit, and the demo
runs from the wheels alone (no checkout, no tests, no examples folder: the
example traces are made into the user's cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("core", "sidecar", "operator", "devkit", ".")

pytestmark = pytest.mark.slow


def test_the_demo_runs_from_the_wheels_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    for part in PARTS:
        out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist),
                              str(ROOT / part)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
    wheels = sorted(p.name for p in dist.glob("*.whl"))
    assert len(wheels) == 5, wheels
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    meta = next(dist.glob("memoryguard_kuberay-0.1.0-*.whl"))
    # Our parts come from these wheels (--find-links), by our own names.
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", "--find-links", str(dist),
                          f"{meta}[demo]"], capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(py.parent / "memoryguard-kuberay"), "demo", "--json", "--workers", "3", "--plot", ""],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    # --workers is per worker group (the demo's CAST: one group a workload).
    from memoryguard_kuberay.devkit.demo import CAST

    assert summary["workers"] == 3 * len(CAST), summary
    assert summary["rotations"] >= 1 and summary["false_rotations"] == 0, summary
    assert (tmp_path / "cache" / "memoryguard-kuberay" / "examples" / "labels.json").is_file()
