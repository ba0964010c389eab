"""Does the demo tell the same story however busy the machine is (issue 61, 1)?

Runs ``memoryguard-kuberay demo --json`` ``--at-once`` at a time, ``--rounds``
times (with ``--burners N``, N processes spinning the CPU beside them), and
prints each run's story (what the README shows but the seconds), its time
and the speed its clock reached, then whether every story was the same.
Each run has its own folder, addresses and ports. Bounded: a round ends when
its demos do (each within 10 minutes), the burners with the last round.

    .venv/bin/python benchmarks/demo_story.py --at-once 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STORY = ("workers", "pods", "leaks", "caught", "missed", "min_lead_h", "rotations", "false_rotations", "replaced",
         "remediations", "simulated_h", "clock_forced")


def story(summary: dict[str, object]) -> dict[str, object]:
    """The story: what happened, and to which of the ladder's cases, not when in seconds."""
    ladder = summary.get("ladder") or {}
    assert isinstance(ladder, dict)
    cases = sorted((r["case"], r["asked"], r["effective"], r["rotated"], r["peak_in_use_percent"])
                   for r in ladder.values())
    reviews = summary.get("reviews") or {}
    assert isinstance(reviews, dict)
    return {**{k: summary.get(k) for k in STORY}, "ladder": cases,
            "reviews": {k: (r["verdict"], r["reverted"]) for k, r in sorted(reviews.items())}}


def _burn(until: float) -> None:
    while time.time() < until:
        pass


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-once", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--burners", type=int, default=0, help="CPU-spinning processes beside the demos")
    a = p.parse_args(argv)
    exe = str(Path(sys.executable).parent / "memoryguard-kuberay")
    stories = []
    burners = [multiprocessing.Process(target=_burn, args=(time.time() + 1200 * a.rounds,), daemon=True)
               for _ in range(a.burners)]
    for b in burners:
        b.start()
    try:
        for r in range(a.rounds):
            with tempfile.TemporaryDirectory(prefix="demo-story-") as tmp:
                procs = [subprocess.Popen([exe, "demo", "--json", "--plot", "", "--heatmap", ""],
                                          cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                         for _ in range(a.at_once)]
                for i, proc in enumerate(procs):
                    out, err = proc.communicate(timeout=600)
                    if proc.returncode not in (0, 1) or not out.strip():
                        print(f"round {r + 1} run {i + 1}: exit {proc.returncode}: {err[-500:]}")
                        stories.append(None)
                        continue
                    s = json.loads(out)
                    stories.append(story(s))
                    print(f"round {r + 1} run {i + 1}: exit {proc.returncode}, {s['duration_s']} s, "
                          f"{s['speed']}x: {json.dumps(story(s))}", flush=True)
    finally:
        for b in burners:
            b.terminate()
    same = all(s is not None and s == stories[0] for s in stories)
    print(f"{len(stories)} runs ({a.at_once} at once, {a.rounds} rounds, {a.burners} burner(s)): "
          f"{'the same story every time' if same else 'THE STORIES DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
