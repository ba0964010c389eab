"""Issue 44, 1 and 4: what one guard's reads may cost the operator is
bounded, whatever its tenant's objects weigh. A tenant's hundred
RayClusters of 1.2 MB, listed by one guard every second, held the operator
at 309 MiB on the real server although every page was within its cap: the
cycle holds all it selects. Past a budget, what is not read is not guarded,
and the status says so. A guard's deletion listed the namespace's pods
whole (300 pods of 1.2 MB: 360 MB); now a page at a time."""

from __future__ import annotations

import asyncio
import gc
import types
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import load_crds
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.api import kube as kube_module
from memoryguard_kuberay.operator.api.credentials import Credentials
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.cycle import finalizer
from memoryguard_kuberay.operator.guardspec import read_guard_spec
from memoryguard_kuberay.operator.rayclusters import clusters

PAD = 300_000  # bytes of env in each cluster's head template
GUARD = {"metadata": {"name": "g", "namespace": "ns", "uid": "g-uid", "creationTimestamp": "2026-01-01T00:00:00Z"}}


def _cluster(name: str) -> dict[str, Any]:
    head = {"name": "ray-head", "image": "ray", "env": [{"name": "PAD", "value": "x" * PAD}]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "ns", "labels": {"tenant": "big"}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [head]}}},
                     "workerGroupSpecs": [{"groupName": "w", "replicas": 1,
                                           "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}]}}


def _select(spec: dict[str, Any], read_bytes: int, monkeypatch: pytest.MonkeyPatch) -> tuple[clusters.Selected,
                                                                                             list[int]]:
    monkeypatch.setattr(kube_module, "MAX_PAGE_BYTES", 1 << 20)
    api = EmulatedApi()
    load_crds(api)
    api.put("namespaces", {"metadata": {"name": "ns"}})
    for i in range(12):
        api.put("rayclusters", _cluster(f"big-{i:02d}"))
    answers: list[int] = []

    async def main() -> clusters.Selected:
        async with api, EmulatorServer(api, host="127.0.0.1") as server:
            kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=10)
            real = kube.request

            async def measured(*a: Any, budget: Any = None, **kw: Any) -> Any:
                before = budget.spent_bytes if budget is not None else 0
                doc = await real(*a, budget=budget, **kw)
                answers.append(budget.spent_bytes - before if budget is not None else -1)
                return doc

            monkeypatch.setattr(kube, "request", measured)
            try:
                return await clusters.select(kube, namespace="ns", guard=GUARD, spec=read_guard_spec(spec),
                                             guards=[], read_bytes=read_bytes)
            finally:
                await kube.close()

    return asyncio.run(main()), answers


def test_a_guards_clusters_are_read_within_its_budget_and_the_rest_said(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 1 << 20  # about three of these clusters
    sel, answers = _select({"clusterSelector": {"matchLabels": {"tenant": "big"}}}, budget, monkeypatch)
    names = [c["metadata"]["name"] for c in sel.clusters]
    # What was read is a prefix in the server's order, within the budget and one page past it.
    assert 0 < len(names) < 12 and names == [f"big-{i:02d}" for i in range(len(names))], names
    assert sum(answers) <= budget + (1 << 20), answers
    assert sel.unread is not None and "any further RayCluster the label selector matches" in sel.unread
    status = st.build(generation=1, clusters=names, pods=[], spec_error=None, missing_clusters=[], rotations={},
                      last_action=None, now_iso="2026-01-01T00:00:00Z", previous={}, unread=sel.unread)
    conds = {c["type"]: c for c in status["conditions"]}
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("True", "ClustersNotRead")
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "ClustersNotRead")


def test_named_clusters_past_the_budget_are_named_as_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    named = [f"big-{i:02d}" for i in range(12)]
    sel, _ = _select({"clusterSelector": {"names": named}}, 3 * PAD, monkeypatch)
    read = [c["metadata"]["name"] for c in sel.clusters]
    assert read == named[:3], read
    assert sel.unread is not None and ", ".join(named[3:]) in sel.unread and sel.missing == []


def test_within_the_budget_everything_is_read_and_nothing_said(monkeypatch: pytest.MonkeyPatch) -> None:
    sel, _ = _select({"clusterSelector": {"matchLabels": {"tenant": "big"}}}, 8 << 20, monkeypatch)
    assert len(sel.clusters) == 12 and sel.unread is None


class _Pod(dict):  # type: ignore[type-arg]
    """A pod the test can hold a weak reference to."""


def test_a_guards_deletion_reads_the_namespaces_pods_a_page_at_a_time() -> None:
    pages = [[_Pod(metadata={"name": f"p-{k}-{i}", "namespace": "ns", "labels": {
        C.LABEL_IS_RAY_NODE: "yes", C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "w"},
        "annotations": {C.ANN_GUARD: "g", C.ANN_PHASE: "evicting", C.ANN_REQUESTED_AT: "1"} if i % 2 else {}})
        for i in range(4)] for k in range(6)]
    refs: list[weakref.ref[_Pod]] = []
    held_at_each_page: list[int] = []
    patched: list[str] = []

    class Kube:
        async def pod_pages(self, namespace: str, selector: str) -> AsyncIterator[tuple[list[Any], str]]:
            while pages:
                page = pages.pop(0)
                gc.collect()
                held_at_each_page.append(sum(1 for r in refs if r() is not None))
                refs.extend(weakref.ref(p) for p in page)
                yield page, "1"
                del page

        async def patch_pod_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
            patched.append(name)

    asyncio.run(finalizer.unmark_pods(types.SimpleNamespace(kube=Kube()), "ns", "g"))  # type: ignore[arg-type]
    assert patched == [f"p-{k}-{i}" for k in range(6) for i in (1, 3)]
    # The page before the one being read may still be held; none before it.
    assert max(held_at_each_page) <= 4, held_at_each_page
