"""The EMULATED API server's store: its objects, their resourceVersions and
history, and every write and delete as the real server makes them (uid,
generation, graceful deletion, finalizers, the disruption controller
stand-in's PDB status, the watch events). ``api.py`` serves it over HTTP;
``evictions.py`` and ``watching.py`` work on it through this class alone,
so neither reaches back into the server."""

from __future__ import annotations

import asyncio
import collections
import pickle
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from . import disruption, schema
from .wire import ApiError, Kind, now_iso

HISTORY = 20000
_T = TypeVar("_T")
Key = tuple[str, str, str, str]  # (group, plural, namespace, name)
# An observer sees (plural, event type, object) for every change; event
# type "EVICTING" comes before an evicted pod is deleted.
Observer = Callable[[str, str, dict[str, Any]], None]
_DROP: tuple[int, str, dict[str, Any], dict[str, Any] | None] = (-1, "DROP", {}, None)


def jcopy(o: _T) -> _T:
    """A deep copy of a stored object, by pickle (in C). copy.deepcopy's
    walk in Python was most of the emulator's time: 2 ms to store a
    KubeRay-sized pod and 1.6 ms per pod listed, so a list of 40,000 pods held
    its event loop for a minute (issue 25's bench)."""
    return cast(_T, pickle.loads(pickle.dumps(o, pickle.HIGHEST_PROTOCOL)))


class ObjectStore:
    """The state (declared here, its fields made by ``EmulatedApi``) and
    what changes it."""

    kinds: dict[tuple[str, str, str], Kind]
    store: dict[Key, dict[str, Any]]
    rv: int
    # (rv, plural, type, object, the object before it when it was modified): a
    # watch under a selector needs both (watching.py).
    history: collections.deque[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]]
    watchers: list[tuple[str, asyncio.Queue[tuple[int, str, dict[str, Any], dict[str, Any] | None]]]]
    observers: list[Observer]
    oldest_rv: int  # watches from before this are 410 Gone (expire_history)
    evictions: list[tuple[str, str, float]]  # (namespace, pod, wall time) evicted
    budget_keys: set[Key]  # the PDBs' store keys
    continues: collections.OrderedDict[str, tuple[int, list[dict[str, Any]]]]
    changed: asyncio.Event
    _syncing: bool

    def kind_of(self, plural: str) -> Kind:
        return next(k for k in self.kinds.values() if k.plural == plural)

    # -- direct access for test code and the KubeRay stand-in --------------------
    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [jcopy(o) for (g, p, ns, _), o in sorted(self.store.items())
                if p == plural and (namespace is None or ns == namespace)]

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        k = self.kind_of(plural)
        o = self.store.get((k.group, plural, namespace if k.namespaced else "", name))
        return jcopy(o) if o is not None else None

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object directly (as a controller would)."""
        k = self.kind_of(plural)
        meta = obj.setdefault("metadata", {})
        key = (k.group, plural, meta.get("namespace", "") if k.namespaced else "", meta["name"])
        old = self.store.get(key)
        return self.write_object(k, key, obj, old, "ADDED" if old is None else "MODIFIED")

    def remove(self, plural: str, namespace: str, name: str) -> None:
        """Delete now, whatever the grace period (as the kubelet does once a
        pod's containers have stopped)."""
        k = self.kind_of(plural)
        key = (k.group, plural, namespace, name)
        if key in self.store:
            self.delete_object(k, key, graceful=False)

    def delete_gracefully(self, plural: str, namespace: str, name: str) -> None:
        """A plain delete, as a controller asks it: a bound pod is marked
        (Terminating) and removed once the kubelet has stopped it."""
        k = self.kind_of(plural)
        key = (k.group, plural, namespace, name)
        if key in self.store:
            self.delete_object(k, key)

    @staticmethod
    def admit(k: Kind, obj: dict[str, Any], pruned: list[str] | None, strict: bool) -> dict[str, Any]:
        """Schema, pruning, defaults and CEL, as a real server runs them on
        every write, a dry run's included."""
        if k.schema is None:
            return obj
        try:
            obj, dropped = schema.admit(obj, k.schema, kind=f"{k.kind}.{k.group}")
        except schema.SchemaError as e:
            raise ApiError(422, "Invalid", str(e)) from None
        if dropped and strict:
            raise ApiError(400, "BadRequest", f'strict decoding error: unknown field "{dropped[0]}"')
        if pruned is not None:
            pruned.extend(dropped)
        return obj

    def write_object(self, k: Kind, key: tuple[str, str, str, str], obj: dict[str, Any], old: dict[str, Any] | None,
               event: str, pruned: list[str] | None = None, strict: bool = False) -> dict[str, Any]:
        obj = jcopy(self.admit(k, obj, pruned, strict))
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = k.api_version, k.kind
        meta["name"] = key[3]
        if k.namespaced:
            meta["namespace"] = key[2]
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
        else:
            for f in ("uid", "creationTimestamp"):
                meta[f] = old["metadata"][f]
            gen = old["metadata"].get("generation", 1)
            meta["generation"] = gen + 1 if obj.get("spec") != old.get("spec") else gen
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.store[key] = obj
        if key[1] == "poddisruptionbudgets":
            self.budget_keys.add(key)
        self._emit(k.plural, event, obj, old)
        if k.plural in ("pods", "poddisruptionbudgets"):
            self._sync_disruption_budgets(key[2])
        return jcopy(obj)

    def delete_object(self, k: Kind, key: tuple[str, str, str, str], *, graceful: bool = True,
                      grace_seconds: int | None = None) -> dict[str, Any]:
        obj = self.store[key]
        if k.plural == "pods" and graceful and (obj.get("spec") or {}).get("nodeName"):
            # A bound pod is only marked: the kubelet stops its containers
            # and then removes it (the kubelet stand-in in kuberay.py).
            if obj["metadata"].get("deletionTimestamp"):
                return jcopy(obj)
            # DeleteOptions' gracePeriodSeconds (a delete's, an eviction's) over the pod's own.
            grace = grace_seconds if grace_seconds is not None else \
                (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            obj = jcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_iso(float(grace))
            obj["metadata"]["deletionGracePeriodSeconds"] = grace
            return self.write_object(k, key, obj, self.store[key], "MODIFIED")
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj = jcopy(obj)
                obj["metadata"]["deletionTimestamp"] = now_iso()
                return self.write_object(k, key, obj, self.store[key], "MODIFIED")
            return jcopy(obj)
        del self.store[key]
        self.budget_keys.discard(key)
        self.rv += 1
        obj = jcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(k.plural, "DELETED", obj, obj)
        if k.plural in ("pods", "poddisruptionbudgets"):
            self._sync_disruption_budgets(key[2])
        return obj

    def _sync_disruption_budgets(self, ns: str) -> None:
        """The disruption controller stand-in: every PDB's status follows
        the pods (written only when it changed, so this ends)."""
        if self._syncing:
            return
        budgets = [(key, self.store[key]) for key in sorted(self.budget_keys) if key[2] == ns]
        if not budgets:
            return  # nothing to follow (and no pass over every pod on each write)
        self._syncing = True
        try:
            pods = [o for (g, p, ons, _), o in self.store.items() if p == "pods" and ons == ns]
            k = self.kind_of("poddisruptionbudgets")
            for key, pdb in budgets:
                status = disruption.budget_status(pdb, pods, time.time())
                if status != pdb.get("status"):
                    self.write_object(k, key, {**pdb, "status": status}, pdb, "MODIFIED")
        finally:
            self._syncing = False

    def _emit(self, plural: str, event: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> None:
        snapshot = jcopy(obj)
        before = snapshot if prev is obj else jcopy(prev) if prev is not None else None
        self.history.append((self.rv, plural, event, snapshot, before))
        for p, q in self.watchers:
            if p == plural:
                q.put_nowait((self.rv, event, snapshot, before))
        for observe in self.observers:
            observe(plural, event, snapshot)
        self.changed.set()

    # -- faults ---------------------------------------------------------------
    def drop_watches(self) -> int:
        """End every open watch stream now; returns how many."""
        for _, q in self.watchers:
            q.put_nowait(_DROP)
        return len(self.watchers)

    def expire_history(self) -> None:
        """Forget the change history: resuming a watch from any earlier
        resourceVersion now answers 410 Gone, and the client must re-list."""
        self.history.clear()
        self.oldest_rv = self.rv
        self.continues.clear()  # a compaction also ends every paged list mid-way
