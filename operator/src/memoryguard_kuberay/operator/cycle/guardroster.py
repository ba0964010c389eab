"""Every namespace's MemoryGuards, as all of that namespace's guards see
them: listed at most once per ``ttl_s`` and shared (issue 24: each of 1,001
guards listed every guard every cycle, and the operator stopped answering
every tenant), and a bound on how many one namespace may have.

The guards a namespace may have are its oldest ``limit`` (by creation, then
name: the order ``clusters.older`` uses); a newer one is refused, and its
status says why. Called by the guard's cycle and its finalizer.

What is kept of each guard is its identity and age (``kube.guard_identity``:
the list is of metadata alone); the spec of a served guard is read when an
younger one must know which clusters it takes, and kept while its
generation holds. So a refused guard costs a few hundred bytes here,
however big the tenant made it (issue 44, 3: 0.4 MiB a guard, refused or
not, when every list held every guard whole).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.operator.api.errors import NotFound
from memoryguard_kuberay.operator.api.kube import Kube, guard_identity

DEFAULT_LIMIT = 50
TTL_S = 5.0  # wall seconds: about one cycle of the fastest guard


def _age_key(guard: Mapping[str, Any]) -> tuple[str, str]:
    meta = guard.get("metadata") or {}
    return str(meta.get("creationTimestamp", "")), str(meta.get("name", ""))


def served(guards: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """The namespace's ``limit`` oldest live guards: those the operator serves."""
    return _live(guards)[:limit]


def _live(guards: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted((g for g in guards if not (g.get("metadata") or {}).get("deletionTimestamp")), key=_age_key)


def refusal(guards: Sequence[Mapping[str, Any]], me: Mapping[str, Any], limit: int) -> str | None:
    """Why ``me`` may not act (it is not among its namespace's ``limit``
    oldest live guards), or None. Purely computational."""
    live = _live(guards)
    uid = (me.get("metadata") or {}).get("uid")
    rank = next((i for i, g in enumerate(live) if (g.get("metadata") or {}).get("uid") == uid), None)
    if rank is None or rank < limit:
        return None
    return (f"this namespace has {len(live)} MemoryGuards and the operator serves at most {limit} per namespace "
            f"(the chart's guardsPerNamespace): this one is number {rank + 1} by age and does nothing; "
            "delete others, or ask the installer to raise the limit")


class GuardRoster:
    """Long-lived; holds only the last list of each namespace and its time."""

    def __init__(self, kube: Kube, *, limit: int = DEFAULT_LIMIT, ttl_s: float = TTL_S) -> None:
        self.kube, self.limit, self.ttl_s = kube, limit, ttl_s
        self._lists: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # namespace -> uid -> (generation, the guard as read): served guards only.
        self._specs: dict[str, dict[str, tuple[Any, dict[str, Any]]]] = {}

    async def guards(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's guards, listed at most once per ``ttl_s`` however
        many of them ask (one LIST in flight at a time)."""
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        async with lock:
            held = self._lists.get(namespace)
            if held is not None and time.monotonic() - held[0] < self.ttl_s:
                return held[1]
            listed = [guard_identity(g) for g in await self.kube.list_guard_identities(namespace)]
            now = time.monotonic()
            self._lists[namespace] = (now, listed)
            # Lists past their time are not kept (a deleted namespace's last
            # list held its padded guards for ever: issue 44, 5).
            for ns in [ns for ns, (at, _) in self._lists.items() if now - at >= self.ttl_s]:
                del self._lists[ns]
                self._specs.pop(ns, None)
                if not self._locks[ns].locked():
                    del self._locks[ns]
            return listed

    async def older_served(self, namespace: str, me: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The served guards older than ``me``, each as its identity and its
        spec (which clusters it takes; the CRD bounds every field of it):
        read once, and again only when its generation changes (a status
        write does not change it). Its status, annotations and managed
        fields, which a tenant can pad, are not kept."""
        served_now = served(await self.guards(namespace), self.limit)
        held = self._specs.setdefault(namespace, {})
        uids = {str((g.get("metadata") or {}).get("uid", "")) for g in served_now}
        for uid in [u for u in held if u not in uids]:
            del held[uid]  # no longer served (deleted, or younger ones' now)
        mine = _age_key(me)
        out = []
        for g in served_now:
            meta = g.get("metadata") or {}
            if _age_key(g) >= mine or meta.get("uid") == (me.get("metadata") or {}).get("uid"):
                continue
            uid = str(meta.get("uid", ""))
            kept = held.get(uid)
            if kept is None or kept[0] != meta.get("generation"):
                try:
                    whole = await self.kube.get_guard(namespace, str(meta.get("name")))
                except NotFound:
                    continue  # deleted since the list
                kept = held[uid] = (meta.get("generation"), {**guard_identity(whole), "spec": whole.get("spec")})
            out.append(kept[1])
        return out

    def forget(self, namespace: str) -> None:
        self._lists.pop(namespace, None)
        self._specs.pop(namespace, None)
