"""``make detection-sets``: the policy's first rotations on every trace set
the detection rules were read against, and on those drawn after, set by set.

Each set is scored as ``memoryguard-kuberay bench`` scores a folder (caught,
missed, false rotations, lead min and median; a leak's lead is its OOM less
the first rotation). The drawn sets are made in memory from the generator
and a seed (``traceshapes``), so nothing is written. ``--save F`` keeps each
trace's first rotation and its rule; ``--against F`` (a file an earlier run
saved, of another commit) lists the traces whose first rotation moved: how
a change to the rules was measured (docs/how-it-works.md), and sums the
moves up as ``bench`` scores them (caught later and by how much, caught ->
missed, a healthy pod spared). ``--guard F``
replays with a MemoryGuard's settings, as ``simulate --guard`` does: what a
setting trades, set by set (``--against`` a default run lists it).

Bounded: about 20 minutes of CPU for every set (12-14 of wall time in two
``--jobs`` processes on this machine, 2026-12-06).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from multiprocessing import Pool
from pathlib import Path
from typing import Any

from memoryguard_kuberay.core import scoring
from memoryguard_kuberay.core.commands import UsageError, load_guard_settings, load_traces
from memoryguard_kuberay.core.detectionshapes import (
    growing_peaks_shapes,
    kernel_shapes,
    lowered_limit_shapes,
    spill_stall_shapes,
)
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings, SettingsError
from memoryguard_kuberay.core.simulate import replay
from memoryguard_kuberay.core.tracegen import Shape, generate, labels_for
from memoryguard_kuberay.core.traces import read_labels
from memoryguard_kuberay.core.traceshapes import (
    BEHAVIOURS,
    behaviour_shape,
    field_shapes,
    ramp_after_flat_shapes,
    random_shapes,
    sawtooth_after_flat_shapes,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"

Trace = tuple[str, list[Sample], dict[str, Any] | None]


def _drawn(shapes: list[Shape]) -> Iterator[Trace]:
    for shape in shapes:
        samples = list(generate(shape))
        yield shape.name, samples, labels_for(shape, samples)


def _folder(folder: Path) -> Iterator[Trace]:
    labels = read_labels(folder / "labels.json")
    for trace in load_traces([str(folder)]):  # as bench reads a folder
        yield trace.name, list(trace.samples), labels.get(trace.name)


def _sudden(seeds: tuple[int, ...]) -> list[Shape]:
    return [behaviour_shape("sudden_leak", f"s{seed}_{k}", rnd, seed * 100 + k)
            for seed in seeds for rnd in [random.Random(seed)] for k in range(16)]


def _behaviours(first: int) -> list[Shape]:
    return [behaviour_shape(b, f"{b}_{seed}", random.Random(seed), seed)
            for b in BEHAVIOURS for seed in range(first, first + 12)]


# name -> (what it is, its traces). "read" sets were read while rules were
# made; "after" sets were drawn after this file's rules were last changed;
# "limit" sets are healthy pods of the known limit (a first climb at a leak's
# pace), whose false rotations are what a change to the rules costs them.
SETS: dict[str, tuple[str, Callable[[], Iterator[Trace]]]] = {
    "examples": ("read", lambda: _folder(ROOT / "examples" / "traces")),
    "shared": ("read", lambda: _folder(SHARED_TRACES)),
    "drawn-2026": ("read", lambda: _drawn(random_shapes(60, 2026))),
    "drawn-7": ("read", lambda: _drawn(random_shapes(60, 7))),
    "sudden-11-12": ("read", lambda: _drawn(_sudden((11, 12)))),
    "behaviours-500": ("read", lambda: _drawn(_behaviours(500))),
    "behaviours-600": ("read", lambda: _drawn(_behaviours(600))),
    "field-39": ("read", lambda: _drawn(field_shapes(4, 39))),
    "field-2039": ("read", lambda: _drawn(field_shapes(4, 2039))),
    "field-777": ("read", lambda: _drawn(field_shapes(6, 777))),
    "drawn-99": ("after", lambda: _drawn(random_shapes(60, 99))),
    "sudden-13-14": ("after", lambda: _drawn(_sudden((13, 14)))),
    "behaviours-700": ("after", lambda: _drawn(_behaviours(700))),
    # Issue 59's behaviours, drawn once its rules were written, from its own generator.
    "kernel-5959": ("read", lambda: _drawn(kernel_shapes(8, 5959))),
    "spill-stall-5960": ("read", lambda: _drawn(spill_stall_shapes(12, 5960))),
    "limit-lowered-5961": ("read", lambda: _drawn(lowered_limit_shapes(12, 5961))),
    "peaks-growing-5962": ("read", lambda: _drawn(growing_peaks_shapes(12, 5962))),
    "ramps-after-flat": ("limit", lambda: _drawn(ramp_after_flat_shapes(60, 4242))),
    "sawtooth-after-flat": ("limit", lambda: _drawn(sawtooth_after_flat_shapes(60, 4243))),
}


def first_rotations(settings: PolicySettings, name: str) -> tuple[str, dict[str, dict[str, Any]], float]:
    """Every trace of set ``name``: its first rotation, the rule and its message, its labels."""
    started = time.process_time()
    out: dict[str, dict[str, Any]] = {}
    for trace, samples, labels in SETS[name][1]():
        result = replay(trace, samples, settings)
        first = next((td.decision for td in result.decisions if td.decision.action.value == "rotate"), None)
        # Its message says which of a rule's detectors fired (ProjectedOOM: the creep, the floor or the peaks).
        out[trace] = {"first_rotation_s": result.first_rotation_s, "rule": first.reason.value if first else "",
                      "message": first.message[:400] if first else "", "labels": labels}
    return name, out, time.process_time() - started


def _hours(h: float | None) -> str:
    return "-" if h is None else f"{h:.2f} h"


def _lead(row: dict[str, Any], at: float | None) -> str:
    oom = (row["labels"] or {}).get("oom_at_s")
    if at is None:
        return "none"
    return f"{(oom - at) / 3600:.2f} h" if oom is not None else "FALSE"


def moved(old: dict[str, Any], row: dict[str, Any]) -> tuple[str, float | None]:
    """What a trace's move from ``old`` to ``row`` was, as ``bench`` scores
    it, and by how many hours its first rotation moved where it had one
    before and after."""
    was, now = old["first_rotation_s"], row["first_rotation_s"]
    by = None if was is None or now is None else (now - was) / 3600
    labels = {"t": row["labels"] or {}}
    before, after = (scoring.score(labels, {"t": t}).rows[0].outcome for t in (was, now))
    if before != after:
        return f"{before} -> {after}", None
    if after == "caught":
        return ("caught later" if by is not None and by > 0 else "caught earlier"), by
    return f"{after}, at another time", by


def moves_summary(moves: dict[str, list[float | None]]) -> str:
    """One line a kind of move: how many, and by how much where it moved in time."""
    lines = []
    for kind, hours in sorted(moves.items()):
        timed = sorted(abs(h) for h in hours if h is not None)
        when = (f": by {timed[0]:.2f}-{timed[-1]:.2f} h, median {statistics.median(timed):.2f} h"  # as bench's
                if timed else "")
        lines.append(f"  {len(hours)} {kind}{when}")
    return "\n".join(lines) if lines else "  no first rotation moved"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=sorted(SETS), default=list(SETS), metavar="SET",
                    help=f"which sets (default all: {', '.join(SETS)})")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--save", type=Path, help="write each trace's first rotation here (JSON)")
    ap.add_argument("--against", type=Path, help="a file --save wrote earlier: list what moved")
    ap.add_argument("--guard", help="a MemoryGuard manifest (or its spec) whose settings to replay with")
    args = ap.parse_args(argv)
    try:
        settings = load_guard_settings(args.guard)
    except (UsageError, SettingsError) as e:
        ap.error(str(e))  # says what is wrong with the guard, exit 2, nothing replayed
    names = [n for n in args.sets if n != "shared" or SHARED_TRACES.is_dir()]
    if len(names) < len(args.sets):
        print(f"skipping shared: {SHARED_TRACES} is not here", file=sys.stderr)
    before = json.loads(args.against.read_text()) if args.against else {}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    moves: dict[str, list[float | None]] = {}
    print(f"{'set':20s} {'kind':6s} {'pods':>5s} {'caught':>6s} {'missed':>6s} {'false':>5s} "
          f"{'lead min':>9s} {'median':>7s}")
    with Pool(max(1, args.jobs)) as pool:
        for name, rows, cpu_s in pool.imap(partial(first_rotations, settings), names):
            results[name] = rows
            labels = {t: r["labels"] for t, r in rows.items() if r["labels"]}
            totals = scoring.score(labels, {t: rows[t]["first_rotation_s"] for t in labels}).totals()
            low, mid = (_hours(totals[k]) for k in ("min_lead_h", "median_lead_h"))
            print(f"{name:20s} {SETS[name][0]:6s} {len(rows):5d} {totals['caught']:6d} {totals['missed']:6d} "
                  f"{totals['false_rotations']:5d} {low:>9s} {mid:>7s}"
                  f"   ({cpu_s:.0f} s CPU)", flush=True)
            for trace, row in rows.items():
                old = before.get(name, {}).get(trace)
                if old is not None and old["first_rotation_s"] != row["first_rotation_s"]:
                    print(f"    {trace}: lead {_lead(row, old['first_rotation_s'])} -> "
                          f"{_lead(row, row['first_rotation_s'])} ({old['rule'] or '-'} -> {row['rule'] or '-'})")
                    kind, by = moved(old, row)
                    moves.setdefault(kind, []).append(by)
    if args.against:
        print(f"against {args.against}:\n{moves_summary(moves)}")
    if args.save:
        args.save.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
