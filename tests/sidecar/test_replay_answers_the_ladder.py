"""A replaying sidecar answers the ladder as a workload would (the demo's
ladder workers): a step read from the pod's pressure file frees its share of
what the pod gained, from the step's own time on, as ``simulate`` frees it."""

from __future__ import annotations

import datetime
from pathlib import Path

from memoryguard_kuberay.core import pressure
from memoryguard_kuberay.core.simulate import StepEffects
from memoryguard_kuberay.sidecar.replay import ReplayFeed
from tests.core.helpers import GIB, series

EPOCH = 1_800_000_000.0


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _feed(tmp_path: Path, effects: StepEffects) -> tuple[ReplayFeed, Path]:
    # 1 GiB an hour from 16 GiB (0.5 of the 32 GiB limit), a row every 15 s.
    samples = series(lambda t: 0.5 + t / 3600 / 32, hours=4)
    f = tmp_path / "pressure"
    return ReplayFeed(samples, speed=1.0, epoch_s=EPOCH, start_s=EPOCH, effects=effects, pressure_file=f), f


def test_a_reclaim_frees_its_share_from_the_steps_time_on(tmp_path: Path) -> None:
    feed, f = _feed(tmp_path, StepEffects(reclaim=1.0))
    before = feed.due(EPOCH + 2 * 3600)  # two hours served: 2 GiB gained
    f.write_text(pressure.Pressure("Elevated", "Reclaim", _iso(EPOCH + 2.5 * 3600), used_bytes=1).to_json())
    rows = feed.due(EPOCH + 3 * 3600)  # one batch across the step's time
    at = {s.time_s - EPOCH: s.unreclaimable_bytes for s in before + rows}
    assert at[2.5 * 3600 - 15] > 18.4 * GIB  # before the step, as recorded
    assert at[2.5 * 3600] < 16.1 * GIB  # from its time on, the 2.5 GiB gained is gone
    assert at[3 * 3600] - at[2.5 * 3600] > 0.49 * GIB  # and the growth goes on from there
    assert feed.due(EPOCH + 3.1 * 3600)[-1].unreclaimable_bytes < 16.7 * GIB  # asked once, answered once


def test_a_step_the_effects_do_not_cover_frees_nothing(tmp_path: Path) -> None:
    feed, f = _feed(tmp_path, StepEffects(reclaim=1.0))
    feed.due(EPOCH + 3600)
    f.write_text(pressure.Pressure("High", "Shed", _iso(EPOCH + 3600), used_bytes=1).to_json())
    assert feed.due(EPOCH + 2 * 3600)[-1].unreclaimable_bytes > 17.9 * GIB
    f.write_text("not the operator's writing")
    assert feed.due(EPOCH + 2.1 * 3600)[-1].unreclaimable_bytes > 18 * GIB
