"""An operator killed (SIGKILL) mid-rotation and restarted finishes that
rotation without a second eviction: its progress is on the pod and in the
guard's status, not in the dead process."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryguard_kuberay.devkit.emulator.api import ApiError

from ..devworld import world
from .conftest import by_worker_index, guard, leaking_pods, start_cluster

pytestmark = pytest.mark.e2e


async def _setup(w) -> str:  # type: ignore[no-untyped-def]
    await start_cluster(w, 2)
    # Room for a slow replacement plus the restart on a loaded machine (18 s real).
    w.api.put("memoryguards", guard(rotation={"replacementTimeoutSeconds": 10800}))
    return leaking_pods(w)[0]


async def test_killed_while_evicting(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        leaking = await _setup(w)
        # The API refuses evictions for now (503): the rotation waits in "evicting".
        w.api.faults.append(lambda r: ApiError(503, "ServiceUnavailable", "try later")
                            if r.subresource == "eviction" else None)
        first = await w.start_operator()
        await w.wait_for(lambda: (w.api.get("pods", "default", leaking) or {}).get("metadata", {}).get(
            "annotations", {}).get("memoryguard.io/rotation-phase") == "evicting", 90, "the evicting phase")
        await w.stop_operator(first, kill=True)
        w.api.faults.clear()
        await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerRotated"), 60, "the resumed rotation to finish")
        assert [e[1] for e in w.api.evictions] == [leaking]
        assert len(w.events("WorkerRotationStarted")) == 1  # resumed, not started again


async def test_killed_while_waiting_for_the_replacement(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        leaking = await _setup(w)
        w.kuberay.replace_delay_s = 3.0  # KubeRay is slow to replace the pod (1,800 s at 600x)
        first = await w.start_operator()
        await w.wait_for(lambda: w.api.evictions, 90, "the eviction")

        # The eviction is written to the status just after it is made; kill
        # once it is there (the phase the test is about), not in between.
        await w.wait_for(lambda: [r["phase"] for r in (w.guard_status().get("rotations") or {}).get("inFlight", [])]
                         == ["replacing"], 10, "the replacing phase in the status")
        await w.stop_operator(first, kill=True)
        await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerRotated"), 60, "the rotation to finish after the restart")
        assert [e[1] for e in w.api.evictions] == [leaking]
        status = w.api.get("memoryguards", "default", "leak-guard")["status"]  # type: ignore[index]
        assert status["rotations"]["total"] == 1 and status["rotations"]["inFlight"] == []


async def test_a_restart_does_not_say_it_again(tmp_path: Path) -> None:
    # Issue 23: what a guard had said lived only in memory; a restarted
    # operator posted the same dry-run plan again.
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 2)
        w.api.put("memoryguards", guard(dryRun=True))
        first = await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerRotationPlanned"), 90, "the dry run's plan")
        await w.wait_for(lambda: (w.guard_status().get("remembered") or {}).get("plannedPods"), 20,
                         "the plan remembered in the status")
        await w.stop_operator(first, kill=True)
        second = await w.start_operator()
        # Long enough for several cycles of the new process (15 s at 600x is 2.5 h of its clock).
        await w.wait_for(lambda: (w.guard_status().get("conditions") or [{}])[0].get("status") == "True", 30,
                         "the restarted operator guarding")
        import asyncio

        await asyncio.sleep(8)
        assert second.returncode is None
        assert len(w.events("WorkerRotationPlanned")) == 1, [e["message"] for e in w.events("WorkerRotationPlanned")]
        assert w.api.evictions == []
