"""The demo, headless (``memoryguard-kuberay demo --json``), as a user would run it:
every leak caught before its OOM, no false rotation, every rotated worker
replaced, no plain delete, one remediation judged effective and one judged
of no effect and reverted, the ladder's three cases, and no process left
behind. Its clock waits for the operator (lockstep), so its story is the
same on any machine, however busy (issue 61, 1): the one the README shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
# The story, the same in every run (three at a time, twice, on a 2-core
# machine: the same six times, docs/demo.md); the README shows it.
STORY = {"workers": 12, "pods": 22, "leaks": 10, "caught": 10, "missed": [], "min_lead_h": 0.86, "rotations": 10,
         "false_rotations": 0, "replaced": 10, "remediations": 3, "simulated_h": 17.1, "clock_forced": 0}


def story_line(s: dict[str, object]) -> str:
    """The summary line as the demo prints it, but for its time in seconds."""
    return (f"summary: {s['workers']} workers ({s['pods']} worker pods with their replacements) in "
            f"{s['simulated_h']} h, {s['leaks']} leaking: {s['caught']} caught before their OOM (min lead "
            f"{s['min_lead_h']} h), {s['rotations']} rotation(s), {s['false_rotations']} false, {s['replaced']} "
            f"replaced, {s['remediations']} remediation(s) applied, ")


def _left_behind(tag: str) -> set[int]:
    """Processes still alive that carry this run's tag in their environment:
    the demo's own, whoever else runs sidecars on this machine (another test
    run, a demo beside it) never counts."""
    out = set()
    needle = f"MEMORYGUARD_TEST_RUN={tag}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if needle in (d / "environ").read_bytes().split(b"\x00"):
                    out.add(int(d.name))
            except OSError:
                continue
    return out


def test_demo_headless(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    out = subprocess.run([str(Path(sys.executable).parent / "memoryguard-kuberay"), "demo", "--json", "--plot",
                          str(tmp_path / "demo.png"), "--heatmap", str(tmp_path / "heat.png")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MEMORYGUARD_TEST_RUN": tag})
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert set(summary) >= {"workers", "leaks", "caught", "rotations", "false_rotations", "remediations",
                            "duration_s", "speed"}
    assert {k: summary[k] for k in STORY} == STORY
    assert 0 < summary["speed"] <= 900 * 1.01  # at most the speed asked (its average, rounded)
    assert summary["leaks"] >= 2 and summary["caught"] == summary["leaks"]
    assert summary["false_rotations"] == 0 and summary["plain_deletes"] == 0
    assert summary["replaced"] == summary["rotations"] == summary["leaks"]
    # No bound on duration_s here: a speed figure belongs to a benchmark, and
    # this one read 120.3 s once on a loaded machine (70.6 s idle). The
    # subprocess's timeout above bounds the run; the demo prints its time.
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "heat.png").read_bytes()[:4] == b"\x89PNG"
    # jemalloc ends serve's fragmentation and leaves train's code leak as it was (the demo's workloads).
    reviews = summary["reviews"]
    assert reviews["demo-cluster/serve/jemalloc"]["verdict"] == "Effective", reviews
    assert reviews["demo-cluster/serve/jemalloc"]["reverted"] == ""
    assert reviews["demo-cluster/train/jemalloc"]["verdict"] == "NoEffect", reviews
    assert reviews["demo-cluster/train/jemalloc"]["reverted"] == "reverted"
    # The ladder's three cases (issue 41): garbage a reclaim frees and a cache
    # dropped when told are brought back without a rotation; the true leak
    # climbs the rungs and is rotated (counted above among the leaks caught).
    ladder = {r["case"]: r for r in summary["ladder"].values()}
    for saved in ("garbage", "cache"):
        assert not ladder[saved]["rotated"] and ladder[saved]["effective"] >= 1, ladder
    assert ladder["true leak"]["rotated"] and ladder["true leak"]["asked"] >= 2, ladder
    assert _left_behind(tag) == set()


def test_the_readme_tells_the_demos_story() -> None:
    readme = (ROOT / "README.md").read_text()
    line = next((x for x in readme.splitlines() if x.startswith("summary: ")), "")
    assert line.startswith(story_line(STORY)), f"README: {line!r}\nthe demo's: {story_line(STORY)!r}"
    assert re.search(r", \d+ s \(\d+x of 900x\)$", line), line

