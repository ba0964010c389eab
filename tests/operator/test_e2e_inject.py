"""Sidecar injection into the RayCluster's templates, its removal by the
guard's finalizer, and remediation in auto mode, end to end."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from memoryguard_kuberay.operator.rayclusters import patches
from memoryguard_kuberay.operator.rayclusters.injection import SIDECAR_NAME

from ..devworld import world
from .conftest import by_worker_index, guard, raycluster

pytestmark = pytest.mark.e2e


def _containers(rc: dict) -> list[list[str]]:  # type: ignore[type-arg]
    """The worker groups' containers (the head gets no sidecar unless the guard guards it)."""
    spec = rc["spec"]
    tpls = [g["template"] for g in spec["workerGroupSpecs"]]
    return [[c["name"] for c in t["spec"]["containers"]] for t in tpls]


async def test_inject_then_delete_guard_removes_it(tmp_path: Path) -> None:
    async with world(tmp_path, by_worker_index(set())) as w:
        w.api.put("rayclusters", raycluster(workers=1))
        original = copy.deepcopy(w.api.get("rayclusters", "default", "raycluster-kuberay")["spec"])  # type: ignore[index]
        w.api.put("memoryguards", guard(sidecar={"inject": True, "port": 19108}))
        await w.start_operator()
        rc = await w.wait_for(lambda: (r := w.api.get("rayclusters", "default", "raycluster-kuberay")) and
                              all(SIDECAR_NAME in names for names in _containers(r)) and r, 30, "the sidecar injected")
        tpl = rc["spec"]["workerGroupSpecs"][0]["template"]
        assert tpl["spec"]["shareProcessNamespace"] is True
        side = next(c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR_NAME)
        assert side["securityContext"]["readOnlyRootFilesystem"] is True and side["securityContext"]["runAsNonRoot"]
        assert {"name": "memoryguard-shm", "mountPath": "/dev/shm"} in tpl["spec"]["containers"][0]["volumeMounts"]
        # Idempotent: a later cycle changes nothing.
        rv = rc["metadata"]["resourceVersion"]
        await w.wait_for(lambda: len(w.events("SidecarInjected")) == 1, 5, "one injection event")
        status_rv = w.api.get("memoryguards", "default", "leak-guard")["metadata"]["resourceVersion"]  # type: ignore[index]
        await w.wait_for(lambda: w.api.get("memoryguards", "default", "leak-guard")["metadata"][  # type: ignore[index]
            "resourceVersion"] != status_rv, 10, "another cycle")
        assert w.api.get("rayclusters", "default", "raycluster-kuberay")["metadata"]["resourceVersion"] == rv  # type: ignore[index]
        # Deleting the guard: the finalizer takes the sidecar back out.
        g = w.api.get("memoryguards", "default", "leak-guard")
        assert g is not None and g["metadata"].get("finalizers")
        w.api.remove("memoryguards", "default", "leak-guard")
        await w.wait_for(lambda: w.api.get("memoryguards", "default", "leak-guard") is None, 30, "the guard gone")
        rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        assert rc is not None and rc["spec"] == original
        await w.wait_for(lambda: w.events("SidecarRemoved"), 10, "SidecarRemoved (Events are queued)")


async def test_plateau_gets_jemalloc_in_auto_mode(tmp_path: Path) -> None:
    from memoryguard_kuberay.core import commands

    frag = commands.examples_dir() / "fragmentation_flattens.csv"
    async with world(tmp_path, lambda pod: frag) as w:
        w.api.put("rayclusters", raycluster(workers=1))
        w.api.put("memoryguards", guard(remediation={"jemalloc": {"mode": "auto"}}))
        await w.start_operator()
        await w.wait_for(lambda: w.events("RemediationApplied"), 120, "jemalloc applied")
        rc = w.api.get("rayclusters", "default", "raycluster-kuberay")
        ray = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]  # type: ignore[index]
        # Through a ConfigMap the Ray container alone reads (envFrom: KubeRay's
        # wait-gcs-ready copies env, never envFrom), owned by the RayCluster.
        name = patches.remedy_configmap("raycluster-kuberay", "workergroup", "jemalloc")
        assert ray["envFrom"] == [{"configMapRef": {"name": name, "optional": True}}]
        assert not any(e["name"] in ("LD_PRELOAD", "MALLOC_CONF") for e in ray.get("env") or [])
        cm = w.api.get("configmaps", "default", name)
        assert cm is not None and cm["metadata"]["ownerReferences"][0]["uid"] == rc["metadata"]["uid"]  # type: ignore[index]
        env = cm["data"]
        assert env["LD_PRELOAD"].endswith("libjemalloc.so.2") and "background_thread:true" in env["MALLOC_CONF"]
        assert "GrowthPlateau" in rc["metadata"]["annotations"]["memoryguard.io/remediation"]  # type: ignore[index]
        assert w.api.evictions == []  # a plateau is never a rotation
