"""What a real control plane showed (issue 11; FACTS.md, "A real control
plane"), end to end on the emulator that now behaves like it: graceful
evictions, PDB status from a disruption-controller stand-in, CEL, pruning.

- the guard's own PodDisruptionBudget lets its rotations through (a
  ``maxUnavailable`` budget over RayCluster pods never would: no ``/scale``),
  follows the group's size, and is written only when it differs;
- a refused eviction gives up at its deadline, names the budget, releases
  the slot and takes its marks off the pod;
- rotation Events land on the pod too, injection Events on the RayCluster;
- deleting a guard stops its daemon without kopf cancelling it mid-request,
  and leaves no ``memoryguard.io/rotation-*`` annotation on any pod;
- ``memoryguard-kuberay uninstall`` (the chart's pre-delete hook) deletes the guards
  while the operator runs: nothing hangs, no sidecar stays injected.
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.rayclusters.injection import SIDECAR_NAME

from ..devworld import world
from .conftest import by_worker_index, guard, leaking_pods, no_disruption, start_cluster

pytestmark = pytest.mark.e2e
PDB = "memoryguard-raycluster-kuberay-workergroup"


def _on(w: Any, reason: str, kind: str) -> list[dict[str, Any]]:
    return list(w.events(reason, kind=kind))


def _marks(w: Any) -> dict[str, list[str]]:
    return {p["metadata"]["name"]: sorted(k for k in (p["metadata"].get("annotations") or {})
                                          if k.startswith("memoryguard.io/rotation"))
            for p in w.pods() if any(k.startswith("memoryguard.io/rotation")
                                     for k in (p["metadata"].get("annotations") or {}))}


async def test_own_pdb_lets_rotations_through_and_follows_the_group(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 3)
        leaking = leaking_pods(w)[0]
        terminating: list[str] = []
        w.api.observers.append(lambda plural, t, o: terminating.append(o["metadata"]["name"]) if (
            plural == "pods" and t == "MODIFIED" and o["metadata"].get("deletionTimestamp")) else None)
        pdb_writes: list[str] = []  # every create or patch of a PDB, answered or refused
        w.api.faults.append(lambda r: pdb_writes.append(str(r.method.value).upper()) if (
            r.resource is not None and r.resource.plural == "poddisruptionbudgets"
            and str(r.method.value).upper() in ("POST", "PATCH", "PUT")) else None)
        w.api.put("memoryguards", guard(rotation={"podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
                                                  "evictionTimeoutSeconds": 86400}))
        await w.start_operator()
        pdb = await w.wait_for(lambda: w.api.get("poddisruptionbudgets", "default", PDB), 60, "the guard's PDB")
        assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]  # 3 desired - 1
        await w.wait_for(lambda: w.events("WorkerRotated"), 120, "the rotation through the guard's own PDB")
        assert [e[1] for e in w.api.evictions] == [leaking]
        assert leaking in terminating  # evicted gracefully: Terminating first, then gone
        pdb = w.api.get("poddisruptionbudgets", "default", PDB)
        assert pdb is not None and pdb["metadata"]["generation"] == 1
        assert pdb_writes == ["POST"]  # read every cycle, created once, never re-created or rewritten
        # Rotation Events on the pod as well as on the guard (queued: the
        # pod's copy is posted just after the guard's).
        await w.wait_for(lambda: _on(w, "WorkerRotated", "Pod"), 10, "WorkerRotated on the pod")
        for reason in ("WorkerRotationStarted", "WorkerEvicted", "WorkerRotated"):
            on_pod = _on(w, reason, "Pod")
            assert [e["involvedObject"]["name"] for e in on_pod] == [leaking], reason
            assert _on(w, reason, "MemoryGuard"), reason
        # The group grows: the budget follows (4 desired - 1).
        rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        assert rc is not None
        rc["spec"]["workerGroupSpecs"][0]["replicas"] = 4
        w.api.put("rayclusters", rc)
        await w.wait_for(lambda: (w.api.get("poddisruptionbudgets", "default", PDB) or {}).get("spec", {}).get(
            "minAvailable") == 3, 30, "minAvailable 3 after replicas 4")
        assert pdb_writes == ["POST", "PATCH"]


async def test_refused_eviction_gives_up_at_its_deadline_and_delete_leaves_no_marks(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index({0})) as w:
        await start_cluster(w, 2)
        leaking = leaking_pods(w)[0]
        w.api.put("poddisruptionbudgets", no_disruption(2))
        # 1,800 s of operator clock is 3 s here.
        w.api.put("memoryguards", guard(rotation={"evictionTimeoutSeconds": 1800}))
        await w.start_operator()
        failed = await w.wait_for(lambda: w.events("WorkerRotationFailed"), 120, "the rotation given up")
        assert "no-disruption" in failed[0]["message"] and "evictionTimeoutSeconds" in failed[0]["message"]
        on_pod = await w.wait_for(lambda: _on(w, "WorkerRotationFailed", "Pod"), 10, "the failure on the pod")
        assert on_pod[0]["involvedObject"]["name"] == leaking
        assert w.api.evictions == []
        status = w.guard_status()
        assert status["rotations"]["recent"][0]["outcome"] == "failed"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=5).read().decode()
        assert 'memoryguard_eviction_timeouts_total{guard="leak-guard",namespace="default"} 1.0' in metrics
        # The guard is deleted while it may be marking the pod again, and
        # while its loop is mid-request (every pod list answers late).
        w.api.faults.append(lambda r: 0.4 if r.resource is not None and r.resource.plural == "pods"
                            and str(r.method.value).upper() == "GET" else None)
        await asyncio.sleep(0.5)
        w.api.remove("memoryguards", "default", "leak-guard")
        await w.wait_for(lambda: w.api.get("memoryguards", "default", "leak-guard") is None, 60, "the guard gone")
        assert _marks(w) == {}
        log = w.operator_log()
        assert "Will escalate" not in log and "is cancelled" not in log, log[-3000:]


async def test_uninstall_deletes_guards_while_the_operator_runs(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index(set())) as w:
        await start_cluster(w, 1)
        w.api.put("memoryguards", guard(sidecar={"inject": True, "port": 19108}))
        w.api.put("memoryguards", guard(name="second-guard", cluster="absent-cluster"))
        await w.start_operator(extra_env={"MEMORYGUARD_LOG_LEVEL": "DEBUG"})
        await w.wait_for(lambda: _on(w, "SidecarInjected", "RayCluster"), 60, "the injection Event on the RayCluster")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "uninstall", "--timeout", "60", "-n", "default",
            env={**os.environ, "KUBECONFIG": str(w.kubeconfig)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, out.decode() + "\n--- operator log ---\n" + w.operator_log()[-20000:]
        assert w.api.objects("memoryguards") == []
        rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        assert rc is not None
        names = [c["name"] for g in rc["spec"]["workerGroupSpecs"] for c in g["template"]["spec"]["containers"]]
        assert SIDECAR_NAME not in names
        await w.wait_for(lambda: _on(w, "SidecarRemoved", "RayCluster"), 10, "the removal Event on the RayCluster")


async def test_uninstall_without_the_operator_says_what_is_stuck(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index(set())) as w:
        stuck = guard()
        stuck["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker"]  # as kopf leaves it
        stuck["status"] = {"forensics": {"latest": "memoryguard-forensics-w-2"},
                           "remediations": {"rc/workers/jemalloc": {"verdict": "Pending"}}}
        w.api.put("memoryguards", stuck)
        for n in (1, 2):  # the evidence it kept, as the operator labels it
            labels = {C.LABEL_GUARD: "leak-guard", C.LABEL_ARTIFACT: "forensics"}
            w.api.put("configmaps", {"metadata": {"name": f"memoryguard-forensics-w-{n}", "namespace": "default",
                                                  "labels": labels}, "data": {}})
        # A dry run says what it would delete, and deletes nothing (issue 42, 5),
        # on standard output, with the evidence that would go with it (issue 61, 7).
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "uninstall", "--dry-run",
            env={**os.environ, "KUBECONFIG": str(w.kubeconfig)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0 and "would delete 1 MemoryGuard(s) in every namespace: default/leak-guard" in \
            out.decode(), out.decode()
        assert "its kept evidence goes with it (owned by the guard): memoryguard-forensics-w-1, " \
               "memoryguard-forensics-w-2; to keep it first: kubectl get configmap -n default -l " \
               f"{C.LABEL_GUARD}=leak-guard,{C.LABEL_ARTIFACT}=forensics" in out.decode(), out.decode()
        assert "takes back what it applied: rc/workers/jemalloc" in out.decode(), out.decode()
        assert not (w.api.get("memoryguards", "default", "leak-guard") or {})["metadata"].get("deletionTimestamp")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "uninstall", "--timeout", "2",
            env={**os.environ, "KUBECONFIG": str(w.kubeconfig)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 1 and "default/leak-guard" in out.decode(), out.decode()
        assert "default/leak-guard: its kept evidence goes with it" in out.decode(), out.decode()
