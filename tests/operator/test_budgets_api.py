"""The guard's PodDisruptionBudgets against the emulated API (clusters.set_up):
read with one label-selected LIST per cycle, whatever the number of groups;
created, then patched only when they differ; a user's budget that happens
to bear MemoryGuard's name is never touched."""

from __future__ import annotations

from typing import Any

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.operator.api.credentials import Credentials
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.rayclusters import clusters
from memoryguard_kuberay.operator.rotations import budgets

GUARD = {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
         "metadata": {"name": "g", "namespace": "ns", "uid": "u-g"}}


def _rc(replicas: int) -> dict[str, Any]:
    groups = [{"groupName": g, "replicas": replicas, "minReplicas": 0, "maxReplicas": 10,
               "template": {"spec": {"containers": [{"name": "ray-worker"}]}}} for g in ("a", "b", "c")]
    return {"metadata": {"name": "rc", "namespace": "ns"},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                     "workerGroupSpecs": groups}}


async def test_budgets_are_listed_once_per_cycle_and_a_users_namesake_is_left_alone() -> None:
    api = EmulatedApi()
    users = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": budgets.pdb_name("rc", "c"), "namespace": "ns", "labels": {"team": "ml"}},
             "spec": {"minAvailable": 9, "selector": {"matchLabels": {"app": "theirs"}}}}
    api.put("poddisruptionbudgets", users)
    calls: list[str] = []
    api.faults.append(lambda r: calls.append(f"{str(r.method.value).upper()} {r.name or ''}") if (
        r.resource is not None and r.resource.plural == "poddisruptionbudgets") else None)
    spec = read_guard_spec({"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": False},
                            "rotation": {"podDisruptionBudget": {"enabled": True}}})
    seen: list[list[str]] = []
    async with api, EmulatorServer(api) as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            for replicas in (4, 4, 6):
                calls.clear()
                await clusters.set_up(kube, namespace="ns", guard=GUARD, spec=spec, clusters=[_rc(replicas)])
                seen.append(sorted(calls))
        finally:
            await kube.close()
    # One LIST a cycle; the two budgets made, then left, then patched; the
    # namesake's create answers 409 each cycle and it stays as it was.
    assert seen[0] == ["GET ", "POST ", "POST ", "POST "]
    assert seen[1] == ["GET ", "POST "]
    assert seen[2] == ["GET ", f"PATCH {budgets.pdb_name('rc', 'a')}", f"PATCH {budgets.pdb_name('rc', 'b')}",
                       "POST "]
    for g in "ab":
        ours = api.get("poddisruptionbudgets", "ns", budgets.pdb_name("rc", g))
        assert ours is not None and ours["metadata"]["labels"] == budgets.MANAGED_BY
        assert ours["spec"]["minAvailable"] == 6 - spec.pdb.max_unavailable
    theirs = api.get("poddisruptionbudgets", "ns", budgets.pdb_name("rc", "c"))
    assert theirs is not None and theirs["spec"] == users["spec"] and theirs["metadata"]["labels"] == {"team": "ml"}


async def test_only_the_budgets_named_for_the_guards_groups_are_held() -> None:
    """Anyone may label budgets as MemoryGuard's: those not named for the
    selected clusters' groups are read past, not kept."""
    api = EmulatedApi()
    for i in range(5):
        api.put("poddisruptionbudgets", {"metadata": {"name": f"planted-{i}", "namespace": "ns",
                                                      "labels": dict(budgets.MANAGED_BY)},
                                         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}})
    api.put("poddisruptionbudgets", {"metadata": {"name": budgets.pdb_name("rc", "a"), "namespace": "ns",
                                                  "labels": dict(budgets.MANAGED_BY)},
                                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}})
    async with api, EmulatorServer(api) as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            ours = await clusters.our_budgets(kube, "ns", [_rc(4)])
        finally:
            await kube.close()
    assert list(ours) == [budgets.pdb_name("rc", "a")]
