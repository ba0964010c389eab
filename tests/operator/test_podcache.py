"""The pod cache (podcache.py) against the emulated API: a LIST in pages,
then a watch whose events it follows; a dropped watch resumed where it was,
a compacted history (410) listed again, an API that is down made visible
and, past STALE_AFTER_S, unreadable; what a hostile pod carries not kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.wire import ApiError as EmulatedError
from memoryguard_kuberay.operator.api import kube as kube_module
from memoryguard_kuberay.operator.api import podcache
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.credentials import Credentials
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube


def _pod(name: str, cluster: str = "rc", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations,
                         "labels": {C.LABEL_IS_RAY_NODE: "yes", C.LABEL_CLUSTER: cluster,
                                    C.LABEL_GROUP: "w", C.LABEL_NODE_TYPE: "worker"}},
            "status": {"phase": "Running", "podIP": "127.0.0.9"}}


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def world(monkeypatch: Any) -> AsyncIterator[tuple[EmulatedApi, podcache.PodCaches]]:
    monkeypatch.setattr(kube_module, "LIST_PAGE", 2)  # five pods: three pages
    api = EmulatedApi()
    api.put("pods", {"metadata": {"name": "not-ray", "namespace": "ns"}})
    for i in range(4):
        api.put("pods", _pod(f"a{i}"))
    api.put("pods", _pod("b0", cluster="other"))
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        caches = podcache.PodCaches(kube)
        try:
            yield api, caches
        finally:
            await caches.close()
            await kube.close()


def _names(caches: podcache.PodCaches, *clusters: str) -> list[str]:
    return [p.name for p in caches.caches["ns"].pods(clusters)]


async def test_the_first_read_lists_in_pages_and_files_pods_by_cluster(
        world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    lists: list[str] = []
    api.faults.append(lambda r: lists.append(r.params.get("continue", "first")) if (
        r.resource is not None and r.resource.plural == "pods" and r.params.get("watch") != "true") else None)
    pods = await caches.pods("ns", "g", ["rc"], wait_s=5)
    assert [p.name for p in pods] == ["a0", "a1", "a2", "a3"]
    assert len(lists) == 3 and lists[0] == "first"  # five Ray pods, two a page
    assert _names(caches, "other") == ["b0"] and caches.caches["ns"].lists == 1


async def test_changes_arrive_by_the_watch(world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    await caches.pods("ns", "g", ["rc"], wait_s=5)
    api.put("pods", _pod("a9"))
    api.remove("pods", "ns", "a0")
    moved = _pod("a1", cluster="other")
    api.put("pods", moved)
    marked = _pod("a2", **{C.ANN_PHASE: "draining"})
    api.put("pods", marked)
    await _until(lambda: _names(caches, "rc") == ["a2", "a3", "a9"], "added, deleted and relabelled pods")
    assert _names(caches, "other") == ["a1", "b0"]
    cache = caches.caches["ns"]
    await _until(lambda: cache.by_cluster["rc"]["a2"].rotation_phase == "draining", "the annotation")
    unlabelled = _pod("a3")
    del unlabelled["metadata"]["labels"][C.LABEL_IS_RAY_NODE]  # no longer a Ray pod: the watch says DELETED
    api.put("pods", unlabelled)
    await _until(lambda: _names(caches, "rc") == ["a2", "a9"], "the pod that left the selector gone")
    assert cache.lists == 1


async def test_a_dropped_watch_resumes_where_it_was_and_a_compaction_lists_again(
        world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    await caches.pods("ns", "g", ["rc"], wait_s=5)
    cache = caches.caches["ns"]
    await _until(lambda: api.drop_watches() > 0 or False, "a watch to drop")
    api.put("pods", _pod("a7"))  # while no watch is open: replayed from the resourceVersion
    await _until(lambda: "a7" in _names(caches, "rc"), "the pod made between two watches")
    assert cache.lists == 1
    await _until(lambda: bool(api.watchers), "the watch open again")
    # The next watch is held back while a pod is made and the history
    # compacted past it: resuming from where the cache was is 410 Gone.
    api.faults.append(lambda r: 0.5 if r.params.get("watch") == "true" else None)
    api.drop_watches()
    api.put("pods", _pod("a8"))
    api.expire_history()
    await _until(lambda: "a8" in _names(caches, "rc") and cache.lists == 2, "a LIST after 410 Gone")


async def test_an_api_that_is_down_makes_the_cache_unreadable_past_the_stale_limit(
        world: tuple[EmulatedApi, podcache.PodCaches], monkeypatch: Any) -> None:
    api, caches = world
    monkeypatch.setattr(podcache, "STALE_AFTER_S", 0.5)
    monkeypatch.setattr(podcache, "RETRY_DELAYS_S", (0.1,))
    await caches.pods("ns", "g", ["rc"], wait_s=5)
    down = EmulatedError(503, "ServiceUnavailable", "etcd is away")
    api.faults.append(lambda r: down if r.resource is not None and r.resource.plural == "pods" else None)
    api.drop_watches()
    cache = caches.caches["ns"]
    await _until(lambda: cache.broken_since is not None, "the failure seen")
    await asyncio.sleep(0.6)
    with pytest.raises(ApiError, match=r"pod watch has failed for .*etcd is away"):
        await caches.pods("ns", "g", ["rc"], wait_s=1)
    api.faults.clear()
    await _until(lambda: cache.broken_since is None, "the watch back")
    assert len(await caches.pods("ns", "g", ["rc"], wait_s=1)) == 4


async def test_a_namespace_never_listed_is_an_error_not_an_empty_cluster(
        world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    api.faults.append(lambda r: EmulatedError(403, "Forbidden", "pods is forbidden")
                      if r.resource is not None and r.resource.plural == "pods" else None)
    with pytest.raises(ApiError, match=r"pods not listed yet.*forbidden"):
        await caches.pods("ns", "g", ["rc"], wait_s=1)


async def test_a_pod_is_kept_as_what_the_operator_reads_of_it(world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    await caches.pods("ns", "g", ["rc"], wait_s=5)
    api.put("pods", _pod("fat", **{"tenant.example/blob": "x" * 1_000_000, C.ANN_REASON: "y" * 100_000}))
    await _until(lambda: "fat" in _names(caches, "rc"), "the pod")
    kept = caches.caches["ns"].by_cluster["rc"]["fat"]
    assert list(kept.annotations) == [C.ANN_REASON] and len(kept.annotations[C.ANN_REASON]) == pi.MAX_ANNOTATION


async def test_the_last_guard_of_a_namespace_closes_its_cache(world: tuple[EmulatedApi, podcache.PodCaches]) -> None:
    api, caches = world
    await caches.pods("ns", "g1", ["rc"], wait_s=5)
    await caches.pods("ns", "g2", ["other"], wait_s=5)
    await caches.release("ns", "g1")
    assert "ns" in caches.caches
    await caches.release("ns", "g2")
    assert "ns" not in caches.caches
    await _until(lambda: not api.watchers, "the watch closed")


async def test_a_cache_that_fails_on_an_event_is_not_read_as_fresh(
        world: tuple[EmulatedApi, podcache.PodCaches], monkeypatch: Any) -> None:
    """Whatever breaks the keeping (here, reading a pod raises), the cache
    says so and is unreadable past the stale limit instead of silently
    serving an old picture."""
    api, caches = world
    monkeypatch.setattr(podcache, "STALE_AFTER_S", 0.3)
    monkeypatch.setattr(podcache, "RETRY_DELAYS_S", (0.1,))
    await caches.pods("ns", "g", ["rc"], wait_s=5)

    def broken(_: Any) -> pi.PodInfo:
        raise RuntimeError("a bug")

    monkeypatch.setattr(podcache.pi, "pod_info", broken)
    api.put("pods", _pod("a9"))
    cache = caches.caches["ns"]
    await _until(lambda: cache.broken_since is not None, "the failure seen")
    await asyncio.sleep(0.4)
    with pytest.raises(ApiError, match="RuntimeError: a bug"):
        await caches.pods("ns", "g", ["rc"], wait_s=1)


def test_what_a_pod_carries_is_kept_within_a_bound_whatever_it_sends() -> None:
    """Issue 44, 1: every memoryguard.io/ annotation (4 KiB each, any number)
    and every env name starting with a remediation's were kept. Now: the
    annotations the operator reads, cut to 512 characters; the remediation
    env by exact name."""
    import sys

    from memoryguard_kuberay.operator.api import podinfo as pi

    def hostile(n: int) -> dict[str, Any]:
        return {"metadata": {"name": f"p{n}", "uid": f"u{n}", "namespace": "t", "labels": {
            C.LABEL_CLUSTER: "rc", C.LABEL_GROUP: "w"}, "annotations": {
            **{f"memoryguard.io/pad-{i}": "x" * 4096 for i in range(62)}, C.ANN_REASON: "r" * 100_000}},
            "spec": {"containers": [{"name": "ray", "env": [
                {"name": "LD_PRELOAD" + "x" * 100_000 + str(i), "value": "v"} for i in range(200)]}]}}

    info = pi.pod_info(hostile(0))
    assert list(info.annotations) == [C.ANN_REASON] and len(info.annotations[C.ANN_REASON]) == pi.MAX_ANNOTATION
    assert info.remedy_env == {}
    kept = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in info.annotations.items())
    assert kept < 2048, kept


def test_a_list_of_large_objects_comes_in_pages_each_within_the_byte_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44, 1 and 4: pods (or RayClusters) of a megabyte each made one
    page of hundreds of megabytes. A page over the cap is asked again with
    half the items, so no answer read is over it, and every item comes."""
    monkeypatch.setattr(kube_module, "MAX_PAGE_BYTES", 1 << 20)
    api = EmulatedApi()
    api.put("namespaces", {"metadata": {"name": "ns"}})
    for i in range(24):
        api.put("pods", _pod(f"big-{i:02d}", pad="x" * 300_000))
    sizes: list[int] = []

    async def main() -> list[str]:
        async with api, EmulatorServer(api, host="127.0.0.1") as server:
            kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
            real = kube.request

            async def measured(*a: Any, **kw: Any) -> Any:
                doc = await real(*a, **kw)
                sizes.append(len(str(doc)))
                return doc

            monkeypatch.setattr(kube, "request", measured)
            try:
                names = []
                async for items, _rv in kube.list_pages("/api/v1/namespaces/ns/pods", {}):
                    names += [p["metadata"]["name"] for p in items]
                return names
            finally:
                await kube.close()

    names = asyncio.run(main())
    assert sorted(names) == [f"big-{i:02d}" for i in range(24)]
    assert max(sizes) <= 1 << 20 and len(sizes) >= 8, sizes
