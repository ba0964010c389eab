"""The offline commands of the core: ``simulate``, ``bench`` and
``gen-traces``. They read and write files and print; the policy they drive
stays pure. Wired to argparse in ``memoryguard_kuberay.cli``."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from memoryguard_kuberay.core import scoring, specfields
from memoryguard_kuberay.core.policy import efficacy
from memoryguard_kuberay.core.settings import PolicySettings, SettingsError
from memoryguard_kuberay.core.simulate import NO_EFFECTS, Replay, StepEffects, replay
from memoryguard_kuberay.core.tracegen import generate, labels_for
from memoryguard_kuberay.core.traces import Trace, TraceError, read_labels, read_trace, trace_files, write_trace
from memoryguard_kuberay.core.traceshapes import example_shapes, field_shapes, random_shapes

EXAMPLES_SEED = 7  # the seed the project's example traces were made with


def examples_dir() -> Path:
    """The project's example traces (made by ``gen-traces``, see tracegen.py):
    ``examples/traces`` of a source checkout when this runs from one; from an
    installed wheel, the same traces made once into the user's cache (they
    are deterministic for the seed, and a test holds the checkout's equal)."""
    checkout = Path(__file__).resolve().parents[4] / "examples" / "traces"
    if (checkout / "labels.json").is_file():
        return checkout
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memoryguard-kuberay" / "examples"
    if not (cache / "labels.json").is_file():
        gen_traces(str(cache), random_n=None, seed=EXAMPLES_SEED, progress=io.StringIO())
    return cache


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def load_guard_settings(path: str | None) -> PolicySettings:
    """A MemoryGuard manifest (or just its spec) to policy settings."""
    return load_guard(path)[0]


def load_guard(path: str | None) -> tuple[PolicySettings, dict[str, Any]]:
    """A MemoryGuard manifest (or just its spec) read once: its policy
    settings, and every other field's value by dotted path (specfields.read;
    the defaults without a guard)."""
    if path is None:
        return PolicySettings(), specfields.read({}, PolicySettings())[0]
    try:
        if not Path(path).is_file():
            raise UsageError(f"{path}: not a regular file" if Path(path).exists() else f"{path}: No such file")
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a MemoryGuard manifest or its spec, got {type(doc).__name__}")
    spec = doc.get("spec", doc) if doc.get("kind") in (None, "MemoryGuard") else None
    if not isinstance(spec, dict):
        raise UsageError(f"{path}: not a MemoryGuard (kind {doc.get('kind')!r})")
    # The whole spec, read as the operator reads it (one table, specfields.py):
    # a guard copied from `kubectl get -o yaml` replays as it is, with the
    # defaults the server filled in; an unknown field is refused.
    problems = specfields.unknown_fields(spec)
    try:
        settings = PolicySettings.from_spec(specfields.policy_part(spec))
    except SettingsError as exc:
        problems += exc.problems
        settings = PolicySettings()
    values, found = specfields.read(spec, settings)
    if "clusterSelector" not in spec:  # a policy alone is enough to replay; which clusters is the operator's
        found = [p for p in found if not p.startswith("spec.clusterSelector")]
    problems += found
    if problems:
        raise UsageError(f"{path}: " + "; ".join(problems))
    return settings, values


def load_traces(paths: Sequence[str], *, unreadable: dict[str, str] | None = None) -> list[Trace]:
    """Every trace of ``paths``. ``unreadable``: a file that cannot be read
    goes there (path -> why) and the others are read (issue 39, 5: one bad
    file refused a whole run); without it, the first is a UsageError. None
    readable is a UsageError either way."""
    files = trace_files(paths or [str(examples_dir())])
    if not files:
        # `bench examples` from a checkout: the folder holds the example traces one level down.
        nested = [f"{p}/traces" for p in paths if Path(p, "traces", "labels.json").is_file()]
        raise UsageError(f"no .csv traces in {', '.join(paths) or examples_dir()}"
                         + (f" (did you mean {', '.join(nested)}?)" if nested else ""))
    out = []
    for p in files:
        try:
            out.append(read_trace(p))
        except TraceError as exc:
            if unreadable is None:
                raise UsageError(str(exc)) from None
            unreadable[str(p)] = str(exc)
    if not out:
        raise UsageError("no trace could be read: " + "; ".join((unreadable or {}).values()))
    return out


def say_unreadable(unreadable: Mapping[str, str], progress: IO[str]) -> None:
    for path, why in unreadable.items():
        print(f"error: {path}: not scored: {why}", file=progress)


def _in_hours(h: float | None) -> str:
    """Hours already computed, or "-" when there were none (not "None h")."""
    return "-" if h is None else f"{h} h"


def _hours(t: float | None) -> str:
    return "-" if t is None else f"{t / 3600:.2f} h"


def check_writable(path: str) -> None:
    """Fail before the work, not after it: the output's folder must exist and
    be writable, and the output, if it exists, a writable file."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UsageError(f"{path}: is a directory")
    if not folder.is_dir():
        raise UsageError(f"{path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{path}: not writable")


PICTURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_picture(path: str) -> None:
    """A picture's file, writable, of a kind it can be drawn as (before the
    work: ``--plot x.txt`` failed with a traceback after the replay)."""
    check_writable(path)
    if Path(path).suffix.lower() not in PICTURE_SUFFIXES:
        raise UsageError(f"{path}: a picture is drawn as {', '.join(PICTURE_SUFFIXES)}; name the file so")


MAX_EFFECTS_BYTES = 1024 * 1024
LADDER_LINES = 6  # a trace's ladder moves printed as text; --json has them all


def load_step_effects(path: str | None) -> dict[str, StepEffects]:
    """``--step-effects FILE.yaml``: a trace's name (or ``*``, for every other
    trace) to what its ladder's steps would free, each a share (0-1) of the
    memory in use the pod gained since its first sample:
    ``{leak_steady: {reclaim: 0}, gc_garbage: {reclaim: 0.9, shed: 0}}``."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: not a regular file" if p.exists() else f"{path}: No such file")
    if p.stat().st_size > MAX_EFFECTS_BYTES:
        raise UsageError(f"{path}: over {MAX_EFFECTS_BYTES} bytes; a step-effects file maps trace names to two "
                         "numbers")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        raise UsageError(f"{path}: not YAML ({type(e).__name__})") from None
    if not isinstance(doc, Mapping):
        raise UsageError(f"{path}: must map trace names (or *) to {{reclaim: share, shed: share}}")
    out: dict[str, StepEffects] = {}
    for name, value in doc.items():
        where = f"{path}: {str(name)[:60]}"
        if not isinstance(value, Mapping) or not set(value) <= {"reclaim", "shed"}:
            raise UsageError(f"{where}: must be {{reclaim: share, shed: share}} (each 0-1)")
        shares: dict[str, float] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise UsageError(f"{where}.{k}: must be a share from 0 to 1, got {str(v)[:40]}")
            shares[k] = float(v)
        out[str(name)] = StepEffects(**shares)
    return out


def _ladder_lines(rep: Replay, out: IO[str]) -> None:
    if not rep.ladder:
        return
    asked = [m for m in rep.ladder if m.move.started]
    judged = [m.move.judged for m in rep.ladder if m.move.judged is not None]
    counts = ", ".join(f"{sum(1 for m in asked if m.move.rung.value == r)} {r.lower()}"
                       for r in ("Reclaim", "Shed", "Replace"))
    effective = sum(1 for j in judged if j.effect.value == "Effective")
    print(f"  ladder: {counts} asked; {effective} of {len(judged)} judged effective", file=out)
    for m in rep.ladder[:LADDER_LINES]:
        print(f"  {_hours(m.t_s):>9}  ladder    {m.move.rung.value:<20} {m.move.message}", file=out)
    if len(rep.ladder) > LADDER_LINES:
        print(f"  ... {len(rep.ladder) - LADDER_LINES} more ladder moves (--json has them all)", file=out)


def simulate(paths: Sequence[str], *, guard: str | None, as_json: bool, plot: str | None,
             heatmap: str | None = None, out: IO[str] = sys.stdout, progress: IO[str] = sys.stderr,
             step_effects: str | None = None) -> int:
    for path in (plot, heatmap):
        if path:
            check_picture(path)
    settings = load_guard_settings(guard)
    effects = load_step_effects(step_effects)
    unreadable: dict[str, str] = {}
    traces = load_traces(paths, unreadable=unreadable)
    say_unreadable(unreadable, progress)
    results: list[tuple[Trace, Replay]] = []
    for tr in traces:
        for warning in tr.warnings:
            print(f"warning: {warning}", file=progress)
    for i, tr in enumerate(traces, 1):
        if not as_json and len(traces) > 3:
            print(f"[{i}/{len(traces)}] {tr.name} ({len(tr.samples)} samples)", file=progress)
        said = effects.get(tr.name, effects.get("*", NO_EFFECTS))
        results.append((tr, replay(tr.name, tr.samples, settings, said)))
    if as_json:
        doc: dict[str, Any] = {"traces": {tr.name: rep.to_dict() for tr, rep in results}}
        if unreadable:
            doc["unreadable"] = unreadable
        json.dump(doc, out, indent=1)
        out.write("\n")
    else:
        for tr, rep in results:
            print(f"{tr.name}: {len(tr.samples)} samples, {_hours(tr.samples[-1].time_s if tr.samples else None)}"
                  f", first rotation at {_hours(rep.first_rotation_s)}", file=out)
            for td in rep.decisions:
                d = td.decision
                print(f"  {_hours(td.t_s):>9}  {d.action.value:<9} {d.reason.value:<20} {d.message}", file=out)
            _ladder_lines(rep, out)
    if plot:
        from memoryguard_kuberay.core.plot import plot_replays

        plot_replays(results, plot)
        print(f"plot written to {plot}", file=progress)
    if heatmap:
        from memoryguard_kuberay.core import heatmap as hm

        # Each trace from its own start: a replay ends at its first rotation (the pod is gone).
        hm.draw({rep.name: rep.projections for _, rep in results}, heatmap,
                title="projected time to OOM, per trace (a row ends where the policy rotated)",
                time_label="hours since the pod's start", warmup_s=settings.trend_min_span_s)
        print(f"heat map written to {heatmap}", file=progress)
    return 1 if unreadable else 0


def compare(before: Sequence[str], after: Sequence[str], *, guard: str | None, as_json: bool,
            out: IO[str] = sys.stdout) -> int:
    """``simulate --before ... --after ...``: a remediation's review, as the
    operator gives it (efficacy.judge), on traces of the pods before it and
    on its template. The time watched is the longest after trace."""
    settings, values = load_guard(guard)
    min_pods = int(values["remediation.review.minPods"])
    review_after_s = float(values["remediation.review.afterSeconds"])
    traces = {"before": load_traces(before), "after": load_traces(after)}
    sides = {name: [replay(tr.name, tr.samples, settings) for tr in trs] for name, trs in traces.items()}
    creeps = {name: [r.creep_bytes_per_h for r in reps if r.creep_bytes_per_h is not None]
              for name, reps in sides.items()}
    limits = [r.limit_bytes for reps in sides.values() for r in reps if r.limit_bytes]
    watched = max((tr.samples[-1].time_s - tr.samples[0].time_s for tr in traces["after"] if tr.samples),
                  default=0.0)
    review = efficacy.judge(creeps["before"], creeps["after"],
                            noise_bytes_per_h=settings.min_growth_fraction_per_h * (min(limits) if limits else 0),
                            min_pods=min_pods, watched_s=watched, review_after_s=review_after_s)
    if as_json:
        json.dump({"verdict": review.verdict.value, "message": review.message,
                   "beforeBytesPerHour": review.before_bytes_per_h, "afterBytesPerHour": review.after_bytes_per_h,
                   "pods": {name: {r.name: r.creep_bytes_per_h for r in reps} for name, reps in sides.items()}},
                  out, indent=1)
        out.write("\n")
        return 0
    for name, reps in sides.items():
        for r in reps:
            c = "no trend yet" if r.creep_bytes_per_h is None else efficacy.mib_per_h(r.creep_bytes_per_h)
            print(f"{name:>6}: {r.name}: creep {c}", file=out)
    print(f"{review.verdict.value}: {review.message}", file=out)
    return 0


def bench_table(traces: Sequence[Trace], labels: dict[str, dict[str, Any]], settings: PolicySettings,
                progress: IO[str] | None = None, safety_s: float = scoring.SAFETY_S) -> dict[str, Any]:
    """Policy and static baseline side by side on the same traces."""
    ours: dict[str, float | None] = {}
    base: dict[str, float | None] = {}
    for i, tr in enumerate(traces, 1):
        if progress is not None:
            print(f"[{i}/{len(traces)}] {tr.name}", file=progress)
        ours[tr.name] = replay(tr.name, tr.samples, settings).first_rotation_s
        base[tr.name] = scoring.baseline_first_rotation(tr.samples)
    return {"policy": scoring.score(labels, ours, safety_s=safety_s),
            "baseline": scoring.score(labels, base, safety_s=safety_s)}


def _cell(row: scoring.Row) -> str:
    if row.outcome == "caught":
        return f"caught, lead {_hours(row.lead_s)}"
    return {"ok": "ok", "false_rotation": "FALSE ROTATION", "missed": "MISSED"}.get(row.outcome, row.outcome)


def bench(directory: str, *, labels_path: str | None, guard: str | None, as_json: bool, out: IO[str] = sys.stdout,
          progress: IO[str] = sys.stderr, safety_s: float = scoring.SAFETY_S) -> dict[str, Any]:
    settings = load_guard_settings(guard)
    unreadable: dict[str, str] = {}
    traces = load_traces([directory], unreadable=unreadable)
    say_unreadable(unreadable, progress)
    lp = labels_path or str(Path(directory) / "labels.json")
    try:
        labels = read_labels(lp)
    except TraceError as exc:
        raise UsageError(f"{exc} (pass --labels)") from None
    result = bench_table(traces, labels, settings, None if as_json else progress, safety_s)
    pol: scoring.Score = result["policy"]
    bas: scoring.Score = result["baseline"]
    if as_json:
        return {"policy": pol.totals(), "baseline": bas.totals(),
                "traces": {r.name: {"kind": r.kind, "policy_s": r.first_rotation_s, "policy": r.outcome,
                                    "baseline_s": b.first_rotation_s, "baseline": b.outcome}
                           for r, b in zip(pol.rows, bas.rows)}, **({"unreadable": unreadable} if unreadable else {})}
    w = max(len(r.name) for r in pol.rows)
    print(f"{'trace':<{w}}  {'kind':<11}  {'memoryguard policy':<24}  {'static 90% baseline':<24}", file=out)
    for r, b in zip(pol.rows, bas.rows):
        print(f"{r.name:<{w}}  {r.kind:<11}  {_cell(r):<24}  {_cell(b):<24}", file=out)
    for label, s in (("policy", pol), ("baseline", bas)):
        t = s.totals()
        print(f"{label:>9}: caught {t['caught']}, missed {t['missed']}, false rotations {t['false_rotations']}, "
              f"lead min {_in_hours(t['min_lead_h'])}, median {_in_hours(t['median_lead_h'])}", file=out)
    return {"policy": pol.totals(), "baseline": bas.totals(), **({"unreadable": unreadable} if unreadable else {})}


def gen_traces(out_dir: str, *, random_n: int | None, seed: int, field_n: int | None = None,
               progress: IO[str] = sys.stderr) -> int:
    shapes = (random_shapes(random_n, seed) if random_n else field_shapes(field_n, seed) if field_n
              else example_shapes(seed))
    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a directory (gen-traces writes a folder of traces)")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out_dir}: {exc.strerror or exc}") from None
    labels: dict[str, object] = {}
    for shape in shapes:
        samples = list(generate(shape))
        with (d / f"{shape.name}.csv").open("w", newline="") as f:
            write_trace(samples, f)
        labels[shape.name] = labels_for(shape, samples)
    (d / "labels.json").write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(shapes)} traces and labels.json to {d}", file=progress)
    return 0
