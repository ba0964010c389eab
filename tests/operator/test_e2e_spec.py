"""A spec the schema admits but the operator refuses: a Degraded condition,
one Warning Event, no retry loop, and the other guards keep working."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..devworld import world
from .conftest import by_worker_index, guard, start_cluster

pytestmark = pytest.mark.e2e


def _cond(g: dict, kind: str) -> dict:  # type: ignore[type-arg]
    return next(c for c in g["status"]["conditions"] if c["type"] == kind)


async def test_invalid_spec_is_reported_once_and_others_keep_working(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index(set())) as w:
        await start_cluster(w, 2)
        # A library the schema admits (an absolute path) but the installer does
        # not allow: only the operator can refuse it. (Polling less often than
        # samples go stale, this test's earlier case, is now a CEL rule of the
        # CRD: a real server refuses it at admission, tests/operator/test_specfields.py.)
        bad = guard("broken", remediation={"jemalloc": {"mode": "auto", "libraryPath": "/opt/evil/libjemalloc.so.2"}})
        w.api.put("memoryguards", bad)
        w.api.put("memoryguards", guard("fine"))
        await w.start_operator()
        broken = await w.wait_for(lambda: (g := w.api.get("memoryguards", "default", "broken")) and
                                  g.get("status", {}).get("conditions") and g, 30, "the broken guard's status")
        assert _cond(broken, "Ready")["status"] == "False"
        deg = _cond(broken, "Degraded")
        assert deg["status"] == "True" and deg["reason"] == "InvalidSpec"
        assert "not an allowed jemalloc" in deg["message"]
        fine = await w.wait_for(lambda: (g := w.api.get("memoryguards", "default", "fine")) and
                                g.get("status", {}).get("summary", {}).get("pods") == 2 and g, 30, "the fine guard")
        assert _cond(fine, "Ready")["status"] == "True" and _cond(fine, "Degraded")["status"] == "False"
        # Many cycles later (30 s of operator clock each), still one Warning.
        await w.wait_for(lambda: w.clock() - w.epoch > 4 * 3600, 60, "four hours of operator clock")
        warnings = w.events("InvalidSpec")
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert warnings[0]["involvedObject"]["name"] == "broken"
        # Fixed: the guard recovers without a restart.
        fixed = w.api.get("memoryguards", "default", "broken")
        assert fixed is not None
        fixed["spec"]["remediation"]["jemalloc"]["libraryPath"] = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
        w.api.put("memoryguards", fixed)
        await w.wait_for(lambda: _cond(w.api.get("memoryguards", "default", "broken"), "Ready")["status"]  # type: ignore[arg-type]
                         == "True", 30, "the fixed guard to be Ready")


async def test_two_guards_on_one_cluster_the_older_one_acts(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 2)
        w.api.put("memoryguards", guard("a-first"))
        w.api.put("memoryguards", guard("b-second", clusterSelector={"matchLabels": {}, "names": [
            "raycluster-kuberay"]}, rotation={"maxUnavailable": 2, "cooldownSeconds": 0}))
        await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerRotated"), 90, "the rotation")
        second = w.api.get("memoryguards", "default", "b-second")
        deg = _cond(second, "Degraded")  # type: ignore[arg-type]
        assert deg["reason"] == "ClusterGuardedElsewhere" and "a-first" in deg["message"]
        assert second["status"]["summary"]["pods"] == 0  # type: ignore[index]
        assert len(w.api.evictions) == 1
        started = w.events("WorkerRotationStarted")
        assert len(started) == 1 and started[0]["involvedObject"]["name"] == "a-first"
