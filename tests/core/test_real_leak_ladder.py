"""``make real-leak``'s ladder (benchmarks/real_leak.py ``Ladder``): climbed
as the operator climbs it, each new step written to the pressure file the
workload reads (the annotation's JSON, as the kubelet shows it), nothing
written while nothing changes, and the time at each level adding up."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from memoryguard_kuberay.core import commands, pressure
from memoryguard_kuberay.core.policy import PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.samples import Sample
from tests.core.helpers import real_leak

MIB = 1024**2
LIMIT = 3072 * MIB


def _leak(t: float) -> Sample:
    anon = int((500 + 3.5 * t) * MIB)  # 3.5 MiB/s from 500 MiB: the limit in about 12 minutes
    return Sample(time_s=1_800_000_000.0 + t, memory_current_bytes=anon, memory_max_bytes=LIMIT, anon_bytes=anon,
                  file_bytes=0, inactive_file_bytes=0, shmem_bytes=0)


def test_a_leak_climbs_reclaim_then_shed_and_each_change_is_written_once(tmp_path: Path) -> None:
    rl = real_leak()
    settings = dataclasses.replace(commands.load_guard_settings(str(rl.TEST_PROFILE)), dry_run=False,
                                   ladder_enabled=True, ladder_settle_s=45, reclaim_horizon_s=600,
                                   shed_horizon_s=300)
    path = tmp_path / "pressure"
    ladder = rl.Ladder(settings, path, 1_800_000_000.0)
    assert path.read_text() == ""  # no annotation yet: the downward API file is empty
    window = PodWindow(settings)
    written: list[str] = []
    climbed: list[float] = []
    for t in range(0, 600, 2):
        s = _leak(float(t))
        window.add(s)
        d = decide(settings=settings, window=window, history=RotationHistory(), now_s=s.time_s)
        if not ladder.due(s.time_s):
            continue
        climbed.append(s.time_s)
        ladder.climb(d[0], window, s.time_s)
        text = path.read_text()
        if not written or text != written[-1]:
            written.append(text)
    steps = [p.step for p in map(pressure.parse, written[1:]) if p is not None]
    # Asked in order, each written once: the reclaim, its verdict, the shed.
    assert steps[:1] == ["Reclaim"] and "Shed" in steps, steps
    assert steps.index("Shed") > 0 and len(written) <= 8, written
    assert all(b - a >= rl.CLIMB_EVERY_S for a, b in itertools.pairwise(climbed))
    # The time at each level covers the run from the first climb to the last.
    assert abs(sum(ladder.time_at.values()) - (climbed[-1] - climbed[0])) < 1e-6
    summary = ladder.summary()
    assert "Reclaim 4" in summary and "NoEffect" in summary and "on the climbs: +12" in summary, summary
