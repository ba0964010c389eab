"""The operator end to end in the emulated world (API emulator + KubeRay
stand-in + real sidecar processes + the real operator process), at 600x."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from pathlib import Path

import pytest

from memoryguard_kuberay.core.commands import examples_dir
from memoryguard_kuberay.core.traces import read_labels
from memoryguard_kuberay.devkit.emulator.patching import json_patch
from memoryguard_kuberay.operator.rayclusters import injection

from ..devworld import world
from .conftest import by_worker_index, guard, leaking_pods, no_disruption, start_cluster

pytestmark = pytest.mark.e2e
LEAK_OOM_S = float(read_labels(examples_dir() / "labels.json")["leak_steady"]["oom_at_s"])


async def test_leaking_worker_is_rotated_before_oom_healthy_never(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 3)
        leaking = leaking_pods(w)[0]
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
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=5).read().decode()
        assert ('memoryguard_rotations_total{guard="leak-guard",namespace="default",outcome="rotated",'
                'reason="ProjectedOOM"} 1.0') in metrics
        assert 'memoryguard_pods_guarded{guard="leak-guard",namespace="default"} 3.0' in metrics
        # What runs, and which replica acts (this one: its host and process id).
        assert re.search(r'memoryguard_build_info\{kopf="[0-9.]+",python="3\.[0-9.]+",version="0\.1\.0"\} 1\.0',
                         metrics), metrics[:400]
        assert re.search(r'memoryguard_leader\{identity="[^"]+-[0-9]+"\} 1\.0', metrics)
        # The evidence was kept before the drain: a ConfigMap owned by the
        # guard, an Event on the pod, the status pointing at it.
        kept = await w.wait_for(lambda: w.events("ForensicsKept", kind="Pod"), 30, "ForensicsKept on the pod")
        assert w.events("ForensicsKept")  # and on the guard
        cms = w.api.objects("configmaps", "default")
        assert len(cms) == 1 and cms[0]["metadata"]["name"] in kept[0]["message"]
        status = w.api.get("memoryguards", "default", "leak-guard")["status"]  # type: ignore[index]
        assert status["forensics"]["latest"] == cms[0]["metadata"]["name"]
        doc = json.loads(cms[0]["data"]["forensics.json"])
        assert doc["pod"] == leaking and doc["decision"]["reason"] == "ProjectedOOM"
        assert doc["memory"]["anonBytes"] and doc["processes"]["processes"]  # the real sidecar's process table
        assert "MEMORYGUARD_DRAIN" in doc["skipped"]["rayObjects"]  # no Ray in the emulated world


def _starts_and_ends(w) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    out = []
    for e in w.events():
        if e["reason"] in ("WorkerRotationStarted", "WorkerRotated", "WorkerRotationFailed"):
            out.append((e["reason"], e["metadata"]["resourceVersion"]))
    return sorted(out, key=lambda x: int(x[1]))


async def test_two_leaks_in_one_group_rotate_one_after_the_other(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0, 1})) as w:
        await start_cluster(w, 3)
        leaking = set(leaking_pods(w))
        w.api.put("memoryguards", guard(rotation={"maxUnavailable": 1, "cooldownSeconds": 0}))
        await w.start_operator()
        await w.wait_for(lambda: len(w.events("WorkerRotated")) >= 2, 120, "two rotations")
        assert {e[1] for e in w.api.evictions} == leaking and len(w.api.evictions) == 2
        seq = [r for r, _ in _starts_and_ends(w)]
        # Never two at once: each start is followed by its end before the next start.
        assert seq[:4] == ["WorkerRotationStarted", "WorkerRotated", "WorkerRotationStarted", "WorkerRotated"], seq


async def test_pdb_429_delays_never_bypasses(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 2)
        leaking = leaking_pods(w)[0]
        # A budget that allows no disruption at all in the group.
        w.api.put("poddisruptionbudgets", no_disruption(2))
        # A deadline far beyond the test: here the rotation must wait, not give up.
        w.api.put("memoryguards", guard(rotation={"evictionTimeoutSeconds": 86400}))
        await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerEvictionRefused"), 90, "a refused eviction")
        assert w.api.evictions == [] and not [d for d in w.api.deletes if d[0] == "pods"]
        pod = w.api.get("pods", "default", leaking)
        assert pod is not None and pod["metadata"]["annotations"]["memoryguard.io/rotation-phase"] == "evicting"
        # The budget is relaxed: the waiting rotation goes through, once.
        w.api.remove("poddisruptionbudgets", "default", "no-disruption")
        await w.wait_for(lambda: w.events("WorkerRotated"), 60, "the rotation after the budget allows it")
        assert [e[1] for e in w.api.evictions] == [leaking]


async def test_dry_run_changes_no_workload(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 2)
        leaking = leaking_pods(w)[0]
        before_pods = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in w.pods()}
        before_rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        w.api.put("memoryguards", guard(dryRun=True, sidecar={"inject": True, "port": 19108},
                                        remediation={"jemalloc": {"mode": "auto"}}))
        await w.start_operator()
        planned = await w.wait_for(lambda: w.events("WorkerRotationPlanned"), 90, "a planned rotation")
        assert leaking in planned[0]["message"] and "dry run" in planned[0]["message"]
        await w.wait_for(lambda: w.clock() - w.sidecars[leaking].start_clock > 30000, 60, "the trace to reach OOM")
        assert w.api.evictions == []
        assert {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in w.pods()} == before_pods
        # The one change a dry run makes: the observer (the sidecar) in the
        # templates, for new pods (issue 42, 1); no remediation, no budget.
        after_rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        assert after_rc is not None and before_rc is not None
        assert json_patch(copy.deepcopy(after_rc), injection.uninject_patch(after_rc))["spec"] == before_rc["spec"]
        assert "memoryguard.io/remediation" not in (after_rc["metadata"].get("annotations") or {})
        assert w.api.objects("poddisruptionbudgets", "default") == []
        status = w.api.get("memoryguards", "default", "leak-guard")["status"]  # type: ignore[index]
        assert status["rotations"]["total"] == 0 and status["summary"]["pods"] == 2
