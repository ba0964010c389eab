"""Shared pieces of the operator's end-to-end tests in the emulated world."""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from memoryguard_kuberay.core import commands
from memoryguard_kuberay.devkit.emulator.world import SIDECAR_PORT

TRACES = commands.examples_dir()
LEAK = TRACES / "leak_steady.csv"  # OOM at 28,905 s on the trace clock
HEALTHY = [TRACES / "healthy_gc_sawtooth.csv", TRACES / "healthy_batch_spikes.csv",
           TRACES / "healthy_model_warmup.csv"]


def raycluster(name: str = "raycluster-kuberay", workers: int = 3, group: str = "workergroup") -> dict[str, Any]:
    """Shaped like KubeRay's ray-cluster.sample.yaml."""
    def container(n: str, mem: str) -> dict[str, Any]:
        return {"name": n, "image": "rayproject/ray:2.52.0",
                "resources": {"limits": {"cpu": "1", "memory": mem}, "requests": {"cpu": "1", "memory": mem}}}

    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                container("ray-head", "5Gi")]}}},
            "workerGroupSpecs": [{"replicas": workers, "minReplicas": 1, "maxReplicas": 5, "groupName": group,
                                  "rayStartParams": {}, "template": {"spec": {"containers": [
                                      container("ray-worker", "64Gi")]}}}],
        },
    }


def guard(name: str = "leak-guard", cluster: str = "raycluster-kuberay", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "clusterSelector": {"names": [cluster]},
        # The test clock runs 600x: poll every 5 min of trace time (0.5 s real).
        "sampling": {"intervalSeconds": 300, "sidecarPort": SIDECAR_PORT, "timeoutSeconds": 2},
        "policy": {"staleAfterSeconds": 1800},
        # Deadlines in clock seconds: 600x makes the default 600 s of an
        # eviction's wait one real second, shorter than a loaded machine's
        # hiccup; tests of the deadline itself set it.
        "rotation": {"cooldownSeconds": 600, "replacementTimeoutSeconds": 3600, "evictionTimeoutSeconds": 7200},
    }
    for k, v in spec.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
            "metadata": {"name": name, "namespace": "default"}, "spec": copy.deepcopy(base)}


def no_disruption(min_available: int, group: str = "workergroup") -> dict[str, Any]:
    """A user's PodDisruptionBudget keeping ``min_available`` pods of the
    group: with that many pods, it allows no disruption at all."""
    return {"metadata": {"name": "no-disruption", "namespace": "default"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"ray.io/group": group}}}}


async def start_cluster(w: Any, workers: int) -> None:
    """Create the RayCluster and wait until KubeRay's stand-in runs all its
    pods, head included (later status updates would look like changes)."""
    w.api.put("rayclusters", raycluster(workers=workers))
    await w.wait_for(lambda: sum(1 for p in w.pods() if p["status"].get("phase") == "Running") == workers + 1,
                     30, f"the head and {workers} running workers")


def by_worker_index(leaking: Collection[int], *, lived_s: float = 0.0, workers: int = 0) -> Any:
    """trace_for: the n-th worker pod to start gets the leak if n in
    ``leaking`` (replacements are healthy); the head and others replay
    healthy traces. The first ``workers`` workers start ``lived_s`` into
    their trace (as after a long run); replacements start fresh."""
    seen: list[str] = []

    def trace_for(pod: dict[str, Any]) -> Any:
        labels = pod["metadata"]["labels"]
        if labels.get("ray.io/node-type") == "head":
            return HEALTHY[0]
        seen.append(pod["metadata"]["name"])
        n = len(seen) - 1
        return (LEAK if n in leaking else HEALTHY[n % len(HEALTHY)], lived_s if n < workers else 0.0)

    return trace_for


def leaking_pods(w: Any) -> list[str]:
    """The pods replaying the leak, in the order KubeRay created them (the
    traces are handed out in the order the pods start, which may differ)."""
    return [n for n in w.kuberay.created if n in w.sidecars and w.sidecars[n].trace == LEAK]
