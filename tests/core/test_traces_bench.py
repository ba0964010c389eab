"""Trace-level tests: the project's own example traces (and the shared
labelled traces, where this checkout has them beside it) scored as the
README's rules say, and the trace format round trip."""

from __future__ import annotations

import dataclasses
import io
import random
from pathlib import Path

import pytest

from memoryguard_kuberay.core import commands, scoring
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay
from memoryguard_kuberay.core.tracegen import generate, labels_for
from memoryguard_kuberay.core.traces import TraceError, iter_samples, read_labels, write_trace
from memoryguard_kuberay.core.traceshapes import (
    BEHAVIOURS,
    FIELD_BEHAVIOURS,
    behaviour_shape,
    example_shapes,
    field_shapes,
    sawtooth_after_flat_shapes,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
# A handful of the examples replayed in the fast tier, one of each kind the
# policy tells apart (the whole sets are the ``replays`` tier: issue 62, 6).
HANDFUL = ("leak_steady", "healthy_gc_sawtooth", "plasma_never_released", "fragmentation_flattens",
           "healthy_store_held_full")


def _score(directory: Path) -> dict:  # type: ignore[type-arg]
    traces = commands.load_traces([str(directory)])
    return commands.bench_table(traces, read_labels(directory / "labels.json"), PolicySettings())


def test_examples_are_what_the_generator_makes() -> None:
    # The checked-in examples are reproducible: the same generator, the same seed.
    shape = example_shapes()[0]
    samples = list(generate(shape))
    buf = io.StringIO()
    write_trace(samples, buf)
    assert (commands.examples_dir() / f"{shape.name}.csv").read_text() == buf.getvalue()
    assert read_labels(commands.examples_dir() / "labels.json")[shape.name] == labels_for(shape, samples)


@pytest.mark.replays
@pytest.mark.parametrize("directory", [commands.examples_dir(), SHARED], ids=["examples", "shared"])
def test_every_leak_caught_no_false_rotation(directory: Path) -> None:
    if not directory.exists():
        pytest.skip(f"{directory} not present in this checkout")
    result = _score(directory)
    pol = result["policy"]
    assert pol.missed == 0, [r for r in pol.rows if r.outcome == "missed"]
    assert pol.false_rotations == 0, [r for r in pol.rows if r.outcome == "false_rotation"]
    t = pol.totals()
    # Issue 39's bar: every leak caught at least half an hour before its
    # OOM, a sudden one (OOM within the hour of its start) included.
    assert t["min_lead_h"] >= 0.5
    assert 1.0 <= t["median_lead_h"] <= 4.0


def test_a_handful_of_examples_each_as_labelled() -> None:
    labels = read_labels(commands.examples_dir() / "labels.json")
    firsts = {}
    for name in HANDFUL:
        samples = list(iter_samples((commands.examples_dir() / f"{name}.csv").open(newline="")))
        firsts[name] = replay(name, samples, PolicySettings()).first_rotation_s
    result = scoring.score({n: labels[n] for n in HANDFUL}, firsts)
    assert result.missed == 0 and result.false_rotations == 0, result.rows
    caught = [r for r in result.rows if r.outcome == "caught"]
    assert len(caught) == 2 and all((r.lead_s or 0) >= 1800 for r in caught), result.rows


@pytest.mark.replays
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_behaviours_drawn_afresh(behaviour: str) -> None:
    """Each behaviour of issue 13, drawn with parameters the examples do not
    have (seeds no example uses), half of them with sidecar outages: every
    leak caught at least 10 minutes before its OOM, no healthy pod rotated."""
    shapes = [behaviour_shape(behaviour, f"{behaviour}_{k}", random.Random(9000 + k), 9000 + k) for k in range(3)]
    shapes = [dataclasses.replace(s, gaps=k % 2 * 3, no_psi=k == 2) for k, s in enumerate(shapes)]
    labels, firsts = {}, {}
    for shape in shapes:
        samples = list(generate(shape))
        labels[shape.name] = labels_for(shape, samples)
        firsts[shape.name] = replay(shape.name, samples, PolicySettings()).first_rotation_s
    result = scoring.score(labels, firsts)
    assert result.missed == 0 and result.false_rotations == 0, result.rows


@pytest.mark.replays
@pytest.mark.parametrize("behaviour", FIELD_BEHAVIOURS)
def test_the_shapes_real_nodes_produce_drawn_afresh(behaviour: str) -> None:
    """Issue 39's shapes, each a leak or its healthy twin (a full store with
    no spill figure, a serving pod's day, memory.high, no memory limit),
    drawn with seeds no documented set uses: every leak caught at least 30
    minutes before its OOM (a pod with no limit: before the node runs out),
    no healthy pod rotated. A serving pod starts here within its day's
    traffic: a first morning's surge to 86% or more within the hour is the
    known limit (docs/how-it-works.md), every later one has the day before."""
    shapes = [behaviour_shape(behaviour, f"{behaviour}_{k}", random.Random(9100 + k), 9100 + k) for k in range(2)]
    if behaviour in ("morning_surge", "traffic_leak"):
        # Started two hours into the day's traffic.
        shapes = [dataclasses.replace(s, diurnal_phase_s=s.surge_at_s + s.surge_ramp_s + 7200)
                  for s in shapes]
    labels, firsts = {}, {}
    for shape in shapes:
        samples = list(generate(shape))
        labels[shape.name] = labels_for(shape, samples)
        firsts[shape.name] = replay(shape.name, samples, PolicySettings()).first_rotation_s
    result = scoring.score(labels, firsts, safety_s=1800)
    assert result.missed == 0 and result.false_rotations == 0, result.rows


def test_a_sawtooth_begun_after_a_flat_stretch_starts_where_it_is_told() -> None:
    # Shape.sawtooth_at_s: flat before it (noise only), a tooth from it.
    shape = sawtooth_after_flat_shapes(1, 9200)[0]
    samples = list(generate(shape))
    limit = samples[0].memory_max_bytes
    assert limit is not None and not any(s.oom_kill_count for s in samples)
    before = [s.working_set_bytes / limit for s in samples if s.time_s < shape.sawtooth_at_s]
    first_tooth = [s.working_set_bytes / limit for s in samples
                   if shape.sawtooth_at_s <= s.time_s < shape.sawtooth_at_s + shape.sawtooth_period_s]
    assert max(before) - min(before) < 0.1 * shape.sawtooth_amp + 8 * shape.noise, (min(before), max(before))
    assert max(first_tooth) - max(before) > 0.8 * shape.sawtooth_amp - 8 * shape.noise


@pytest.mark.replays
def test_a_sawtooth_begun_after_a_flat_stretch_is_never_rotated_after_its_first_tooth() -> None:
    """The known limit (docs/how-it-works.md): a sawtooth's first tooth
    after a flat stretch climbs at a sudden leak's pace and may be rotated;
    every later tooth climbs to where the first did, no new ground."""
    rotated = 0
    for shape in sawtooth_after_flat_shapes(8, 9300):
        samples = list(generate(shape))
        first = replay(shape.name, samples, PolicySettings()).first_rotation_s
        if first is not None:
            rotated += 1
            assert first < shape.sawtooth_at_s + shape.sawtooth_period_s, (
                shape.name, (first - shape.sawtooth_at_s) / shape.sawtooth_period_s)
    assert rotated < 8  # some first teeth end before their pace projects an OOM within the horizon


@pytest.mark.replays
def test_a_serving_pods_day_at_its_peak_is_not_replaced_by_the_ladder() -> None:
    """Two drawn serving pods' days that the ladder replaced at their peak
    (issue 39's shapes, seed 39): the plateau's noise read as growth after
    a shed, climbing where the pod was the day before. The policy's trend
    rules want new ground; so does the ladder's replacement now."""
    drawn = {s.name: s for s in field_shapes(6, 39)}
    for name in ("morning_surge_01", "morning_surge_03"):
        samples = list(generate(drawn[name]))
        result = replay(name, samples, PolicySettings())
        assert result.first_rotation_s is None, [td.decision.message for td in result.decisions
                                                 if td.decision.action.value == "rotate"]


def test_trace_round_trip_keeps_unknowns() -> None:
    text = "t_s,memory_current,memory_max,inactive_file,psi_full_avg10\n0,100,,10,\n15,,200,10,1.5\n"
    samples = list(iter_samples(io.StringIO(text)))
    assert samples[0].memory_max_bytes is None and samples[0].working_set_bytes == 90
    assert samples[1].memory_current_bytes is None and samples[1].psi_full_avg10_pct == 1.5
    buf = io.StringIO()
    write_trace(samples, buf)
    again = list(iter_samples(io.StringIO(buf.getvalue())))
    assert again == samples


@pytest.mark.parametrize(
    "text, says",
    [("", "empty file"), ("a,b\n1,2\n", "missing column"),
     ("t_s,memory_current\nx,1\n", ":2: column t_s: 'x' is not a number"),
     ("t_s,memory_current\n0,garbage\n", ":2: column memory_current: 'garbage' is not a number")],
)
def test_bad_traces_say_where(text: str, says: str) -> None:
    with pytest.raises(TraceError, match=says):
        list(iter_samples(io.StringIO(text), source="f.csv"))


def test_a_trace_cut_off_mid_row_is_named(tmp_path: Path) -> None:
    # Issue 59: a trace whose last row was cut off mid-line was read with no
    # warning. Strictly read, a short row is an error naming its line; read
    # as simulate reads (tolerated), it is dropped and named, and a file that
    # ends without a newline is said to (its last row may be cut mid-number).
    from memoryguard_kuberay.core.traces import read_trace

    with pytest.raises(TraceError, match=r"f.csv:3: 2 cell\(s\) where the header has 3: the row was cut off"):
        list(iter_samples(io.StringIO("t_s,memory_current,memory_max\n0,1,9\n15,2\n"), source="f.csv"))
    cut = tmp_path / "cut.csv"
    cut.write_text("t_s,memory_current,memory_max\n0,100,900\n15,110,900\n30,12")
    trace = read_trace(cut)
    assert [s.time_s for s in trace.samples] == [0, 15]
    assert any("1 row(s) cut off" in w and "line(s) 4" in w for w in trace.warnings), trace.warnings
    assert not any("newline" in w for w in trace.warnings), trace.warnings  # the cut row is named already
    whole = tmp_path / "whole.csv"
    whole.write_text("t_s,memory_current,memory_max\n0,100,900\n15,110,900\n30,120,900")
    assert [w for w in read_trace(whole).warnings if "newline" in w], "a last row without its newline is said"
    assert len(read_trace(whole).samples) == 3
