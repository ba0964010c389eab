"""The operator end to end in the emulated world (API emulator + KubeRay
stand-in + real sidecar processes + the real operator process), at 600x."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..emulator.world import world
from .conftest import by_worker_index, guard, raycluster

pytestmark = pytest.mark.e2e
LEAK_OOM_S = 28905  # examples/traces/labels.json: leak_steady


async def test_leaking_worker_is_rotated_before_oom_healthy_never(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        w.api.put("rayclusters", raycluster(workers=3))
        await w.wait_for(lambda: sum(1 for p in w.pods("workergroup") if p["status"].get("phase") == "Running") == 3,
                         30, "three running workers")
        leaking = w.kuberay.created[1]  # [0] is the head
        w.api.put("memoryguards", guard())
        await w.start_operator()
        ev = await w.wait_for(lambda: [e for e in w.api.evictions if e[1] == leaking], 90, "the leaking pod evicted")
        sc = w.sidecars[leaking]
        trace_t = w.clock(ev[0][2]) - sc.start_clock
        assert trace_t <= LEAK_OOM_S - 600, f"evicted at {trace_t:.0f} s, OOM at {LEAK_OOM_S} s"
        await w.wait_for(lambda: w.events("WorkerRotated"), 30, "WorkerRotated")
        status = w.api.get("memoryguards", "default", "leak-guard")["status"]  # type: ignore[index]
        assert status["rotations"]["total"] == 1 and status["rotations"]["lastPod"] == leaking
        assert [e[1] for e in w.api.evictions] == [leaking]  # healthy ones never
        assert not [d for d in w.api.deletes if d[0] == "pods"]  # never a plain delete
        assert len([p for p in w.pods("workergroup") if p["status"].get("phase") == "Running"]) == 3
        pod = w.api.get("pods", "default", leaking)
        assert pod is None
        started = w.events("WorkerRotationStarted")
        assert len(started) == 1 and "ProjectedOOM" in started[0]["message"]
