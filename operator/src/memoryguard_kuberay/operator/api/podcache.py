"""The Ray pods of each namespace a guard is in, kept from a watch (an
informer, as client-go's): one LIST read in pages, then a WATCH from its
``resourceVersion``, each event applied as it comes.

Why not a LIST every cycle: a pod object is 5-10 KiB of JSON (KubeRay's
environment, managedFields, statuses), so 5,000 pods are 25-50 MiB per LIST,
decoded whole in the operator (measured at 20,000 pods in four guards: 600
MiB RSS and 31 s cycles) and served again every 15 s by the API server. A
watch costs the server one stream and the operator one small record per
pod; a cycle reads its pods from memory.

What is kept of a pod is ``PodInfo`` only (podinfo.py: names, IP, phase,
readiness, MemoryGuard's own annotations): whatever else a tenant puts in a
pod costs the operator nothing once its event is parsed.

Contract, as client-go's reflector keeps it:
- the LIST is read in pages (``LIST_PAGE``); the new picture replaces the
  old one only when whole;
- the WATCH resumes from the last ``resourceVersion`` seen (events and
  bookmarks) when the server ends it (every ``watch_timeout_s``); a ``410
  Gone`` (the history was compacted) means LIST again;
- any other failure is retried after a growing delay, the cache kept as it
  was (after an unexpected error, by a whole LIST: what it holds is in
  doubt); a cache whose watch has been broken for ``STALE_AFTER_S`` is not
  read (the cycle fails as if the API were down, and nothing is acted on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError, Gone, api_error
from memoryguard_kuberay.operator.api.kube import Kube, pod_path

log = logging.getLogger("memoryguard_kuberay.operator")
SELECTOR = f"{C.LABEL_IS_RAY_NODE}=yes"
WATCH_TIMEOUT_S = 300  # by default the server ends each watch after this (MEMORYGUARD_WATCH_TIMEOUT_SECONDS)
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
STALE_AFTER_S = 60.0
MIN_WATCH_S = 1.0  # a watch that ends sooner than this is opened again only after this long


class PodCache:
    """One namespace's Ray pods (label ``ray.io/is-ray-node=yes``)."""

    def __init__(self, kube: Kube, namespace: str, *, watch_timeout_s: int = WATCH_TIMEOUT_S) -> None:
        self.kube, self.namespace, self.watch_timeout_s = kube, namespace, watch_timeout_s
        self.by_cluster: dict[str, dict[str, pi.PodInfo]] = {}  # cluster -> pod name -> pod
        self.cluster_of: dict[str, str] = {}  # pod name -> the cluster it is filed under
        self.rv: str | None = None  # where the watch resumes; None: LIST first
        self.synced = asyncio.Event()  # set by the first whole LIST
        self.broken_since: float | None = None  # monotonic: the watch has failed since then
        self.last_error: str | None = None
        self.lists = 0  # whole LISTs read (the first, and one after each 410)
        self._task: asyncio.Task[None] | None = None

    # -- reading -------------------------------------------------------------------
    def pods(self, clusters: Iterable[str]) -> list[pi.PodInfo]:
        """The pods of these RayClusters, by name."""
        out = [p for c in clusters for p in self.by_cluster.get(c, {}).values()]
        return sorted(out, key=lambda p: p.name)

    def unusable(self, now: float) -> str | None:
        """Why the cache must not be read now, or None."""
        if not self.synced.is_set():
            return f"pods not listed yet{': ' + self.last_error if self.last_error else ''}"
        if self.broken_since is not None and now - self.broken_since > STALE_AFTER_S:
            return f"the pod watch has failed for {now - self.broken_since:.0f} s: {self.last_error}"
        return None

    # -- keeping -------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"pod-cache-{self.namespace}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            started, listing = time.monotonic(), self.rv is None
            try:
                if listing:
                    await self._list()
                await self._watch()
                failures = 0
                if time.monotonic() - started < MIN_WATCH_S:
                    await asyncio.sleep(MIN_WATCH_S)  # a server (or proxy) that ends every watch at once
                continue
            except ApiError as e:
                if isinstance(e, Gone):
                    self.rv = None
                    if not listing or time.monotonic() - started >= MIN_WATCH_S:
                        log.info("%s: pod watch history expired; listing again", self.namespace)
                        failures = 0
                        continue
                    # Gone right after a LIST: waits like any failure (no LIST loop).
                self.last_error = str(e)[:300]
            except Exception as e:  # a bug must not leave a cache that looks fresh and is frozen
                log.exception("%s: pod cache failed", self.namespace)
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                self.rv = None  # what it holds is in doubt: only a whole LIST makes it fresh again
            if self.broken_since is None:
                self.broken_since = time.monotonic()
            delay = RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S) - 1)]
            failures += 1
            log.warning("%s: pod watch failed (%s); again in %g s", self.namespace, self.last_error, delay)
            await asyncio.sleep(delay)

    async def _list(self) -> None:
        fresh: dict[str, dict[str, pi.PodInfo]] = {}
        cluster_of: dict[str, str] = {}
        rv = ""
        async for items, page_rv in self.kube.list_pages(pod_path(self.namespace), {"labelSelector": SELECTOR}):
            rv = page_rv  # every page of one list carries the list's
            for raw in items:
                if isinstance(raw, dict):
                    p = pi.pod_info(raw)
                    fresh.setdefault(p.cluster, {})[p.name] = p
                    cluster_of[p.name] = p.cluster
        self.by_cluster, self.cluster_of, self.rv = fresh, cluster_of, rv or None
        self.lists += 1
        self._healthy()
        self.synced.set()

    async def _watch(self) -> None:
        assert self.rv is not None
        params = {"labelSelector": SELECTOR, "resourceVersion": self.rv}
        async with contextlib.aclosing(self.kube.watch(pod_path(self.namespace), params, timeout_s=self.watch_timeout_s,
                                                       opened=self._healthy)) as events:
            async for event in events:
                self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            code = obj.get("code")
            raise api_error(code if isinstance(code, int) else 0, str(obj.get("reason", "WatchError")),
                           str(obj.get("message", ""))[:300])
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            p = pi.pod_info(obj)
            # Labels can change: a pod is filed under the cluster it names now, and only there.
            was = self.cluster_of.pop(p.name, None)
            if was is not None:
                self.by_cluster.get(was, {}).pop(p.name, None)
            if kind != "DELETED":
                self.by_cluster.setdefault(p.cluster, {})[p.name] = p
                self.cluster_of[p.name] = p.cluster
        if isinstance(rv, str) and rv:
            self.rv = rv  # BOOKMARKs carry only this

    def _healthy(self) -> None:
        self.broken_since = None
        self.last_error = None


class PodCaches:
    """The operator's pod caches: one per namespace that has a guard,
    started by its first guard and closed when its last guard goes."""

    def __init__(self, kube: Kube, *, watch_timeout_s: int = WATCH_TIMEOUT_S) -> None:
        self.kube, self.watch_timeout_s = kube, watch_timeout_s
        self.caches: dict[str, PodCache] = {}
        self.users: dict[str, set[str]] = {}  # namespace -> the guards reading its cache

    def acquire(self, namespace: str, guard: str) -> PodCache:
        cache = self.caches.get(namespace)
        if cache is None:
            cache = self.caches[namespace] = PodCache(self.kube, namespace, watch_timeout_s=self.watch_timeout_s)
            cache.start()
        self.users.setdefault(namespace, set()).add(guard)
        return cache

    async def release(self, namespace: str, guard: str) -> None:
        users = self.users.get(namespace, set())
        users.discard(guard)
        if not users and namespace in self.caches:
            self.users.pop(namespace, None)
            await self.caches.pop(namespace).close()

    async def pods(self, namespace: str, guard: str, clusters: Iterable[str], *, wait_s: float) -> list[pi.PodInfo]:
        """The pods of these RayClusters in the namespace, waiting up to
        ``wait_s`` for the first LIST. Raises ApiError when the cache cannot
        be read (not listed yet, or its watch broken too long)."""
        cache = self.acquire(namespace, guard)
        if not cache.synced.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cache.synced.wait(), wait_s)
        why = cache.unusable(time.monotonic())
        if why is not None:
            raise api_error(0, "PodCacheUnusable", why)
        return cache.pods(clusters)

    async def close(self) -> None:
        for cache in self.caches.values():
            await cache.close()
        self.caches.clear()
        self.users.clear()
