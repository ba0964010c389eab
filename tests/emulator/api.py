"""An EMULATED Kubernetes API server for tests and the demo, built on kmock's
``KubernetesScaffold`` (which serves discovery and renders errors).

kmock 0.8's own ``KubernetesEmulator`` lacks what a kopf operator relies on
(resourceVersion, uid, selectors, the eviction subresource, ...; see
shared/design/FACTS.md), so this subclass keeps its own store and answers
every resource request itself, following the real API's contract:

- objects get ``uid``, ``resourceVersion`` (one global counter),
  ``creationTimestamp``, ``generation`` (bumped on spec changes);
- list returns a list ``resourceVersion``; watch replays history newer than
  the given ``resourceVersion`` (``410 Gone`` as an ERROR event when it is
  older than the retained history), sends ADDED for everything without one,
  honours ``timeoutSeconds``;
- ``labelSelector`` and ``fieldSelector`` (=, ==, !=, in, notin, exists);
- PATCH as merge, strategic-merge (treated as merge) or JSON patch; a failed
  JSON-patch ``test`` or a bad path answers 422; a ``metadata.resourceVersion``
  in a merge patch or PUT that is not current answers 409;
- the ``status`` subresource: main-resource writes keep status, status writes
  keep the rest, for kinds declared with it;
- ``POST .../pods/<name>/eviction`` checks PodDisruptionBudgets (429 when
  none may be disrupted, 500 when several match), then deletes the pod;
- finalizers and ``deletionTimestamp`` on delete;
- optional JSON-schema validation of an object against its CRD (422).

NOT modelled: authentication and RBAC, admission webhooks, defaulting from
schemas, server-side apply, pagination (``limit``/``continue``), pod
lifecycle (nothing runs: ``tests/emulator/kuberay.py`` plays KubeRay and the
kubelet), grace periods, garbage collection by ownerReferences, API priority
and fairness.

For fault tests: ``faults`` can answer any request with an error or delay
it; ``drop_watches()`` ends every open watch stream (as a server restart or a
load balancer would); ``expire_history()`` forgets the history, so a watch
resumed from an older resourceVersion gets ``410 Gone``; ``observers`` see
every change (and each eviction before the pod goes), for invariant checks.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import datetime
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock

from .patching import PatchError, json_patch, merge_patch
from .selectors import field_matcher, label_matcher, selector_from_spec

HISTORY = 20000


@dataclasses.dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    schema: dict[str, Any] | None = None  # openAPIV3Schema, validated on writes when set

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_KINDS = (
    Kind("", "v1", "pods", "Pod"),
    Kind("", "v1", "events", "Event"),
    Kind("", "v1", "namespaces", "Namespace", namespaced=False),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", status_subresource=True),
    Kind("coordination.k8s.io", "v1", "leases", "Lease"),
)


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


# A fault looks at a request and answers an error (raised to the client), a
# delay in seconds (the request is then served), or None (no fault).
Fault = Callable[[kmock.Request], "ApiError | float | None"]
# An observer sees (plural, event type, object) for every change; event
# type "EVICTING" comes before an evicted pod is deleted.
Observer = Callable[[str, str, dict[str, Any]], None]
_DROP = (-1, "DROP", {})


def now_iso() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class EmulatedApi(kmock.KubernetesScaffold):
    kinds: dict[tuple[str, str, str], Kind] = attrs.field(factory=dict)
    store: dict[tuple[str, str, str, str], dict[str, Any]] = attrs.field(factory=dict)  # (group, plural, ns, name)
    rv: int = 1000
    history: collections.deque[tuple[int, str, str, dict[str, Any]]] = attrs.field(
        factory=lambda: collections.deque(maxlen=HISTORY))  # (rv, plural, type, object)
    watchers: list[tuple[str, asyncio.Queue[tuple[int, str, dict[str, Any]]]]] = attrs.field(factory=list)
    faults: list[Fault] = attrs.field(factory=list)
    observers: list[Observer] = attrs.field(factory=list)
    oldest_rv: int = 0  # watches from before this are 410 Gone (expire_history)
    evictions: list[tuple[str, str, float]] = attrs.field(factory=list)  # (namespace, pod, wall time) evicted
    deletes: list[tuple[str, str, str]] = attrs.field(factory=list)  # (plural, namespace, name) plain deletes
    changed: asyncio.Event = attrs.field(factory=asyncio.Event)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for k in BUILTIN_KINDS:
            self.add_kind(k)

    # -- setup ----------------------------------------------------------------
    def add_kind(self, k: Kind) -> None:
        self.kinds[(k.group, k.version, k.plural)] = k
        key = f"{k.group + '/' if k.group else ''}{k.version}/{k.plural}"
        self.resources[key] = kmock.ResourceInfo(
            kind=k.kind, singular=k.kind.lower(), namespaced=k.namespaced,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources={"status"} if k.status_subresource else set(),
        )

    def add_crd(self, crd: dict[str, Any]) -> Kind:
        spec = crd["spec"]
        version = next(v for v in spec["versions"] if v.get("storage", True))
        k = Kind(spec["group"], version["name"], spec["names"]["plural"], spec["names"]["kind"],
                 namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                 status_subresource="status" in (version.get("subresources") or {}),
                 schema=(version.get("schema") or {}).get("openAPIV3Schema"))
        self.add_kind(k)
        return k

    def kind_of(self, plural: str) -> Kind:
        return next(k for k in self.kinds.values() if k.plural == plural)

    # -- direct access for test code and the KubeRay stand-in --------------------
    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (g, p, ns, _), o in sorted(self.store.items())
                if p == plural and (namespace is None or ns == namespace)]

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        k = self.kind_of(plural)
        o = self.store.get((k.group, plural, namespace if k.namespaced else "", name))
        return copy.deepcopy(o) if o is not None else None

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object directly (as a controller would)."""
        k = self.kind_of(plural)
        meta = obj.setdefault("metadata", {})
        key = (k.group, plural, meta.get("namespace", "") if k.namespaced else "", meta["name"])
        old = self.store.get(key)
        return self._write(k, key, obj, old, "ADDED" if old is None else "MODIFIED")

    def remove(self, plural: str, namespace: str, name: str) -> None:
        k = self.kind_of(plural)
        key = (k.group, plural, namespace, name)
        if key in self.store:
            self._delete(k, key)

    def _write(self, k: Kind, key: tuple[str, str, str, str], obj: dict[str, Any], old: dict[str, Any] | None,
               event: str) -> dict[str, Any]:
        if k.schema is not None:
            self._validate(k, obj)
        obj = copy.deepcopy(obj)
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
        self._emit(k.plural, event, obj)
        return copy.deepcopy(obj)

    def _delete(self, k: Kind, key: tuple[str, str, str, str]) -> dict[str, Any]:
        obj = self.store[key]
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj = copy.deepcopy(obj)
                obj["metadata"]["deletionTimestamp"] = now_iso()
                return self._write(k, key, obj, self.store[key], "MODIFIED")
            return copy.deepcopy(obj)
        del self.store[key]
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(k.plural, "DELETED", obj)
        return obj

    def _emit(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, plural, event, snapshot))
        for p, q in self.watchers:
            if p == plural:
                q.put_nowait((self.rv, event, snapshot))
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

    def _validate(self, k: Kind, obj: dict[str, Any]) -> None:
        errors = sorted(_validator(k).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            where = ".".join(str(p) for p in e.path) or "<root>"
            raise ApiError(422, "Invalid", f"{k.kind}.{k.group} {obj.get('metadata', {}).get('name')!r} is "
                                            f"invalid: {where}: {e.message}")

    # -- HTTP -------------------------------------------------------------------
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8 keeps every request for assertions; a long run would grow
        # without bound, so keep only the recent ones.
        if len(self._requests) > 2000:
            del self._requests[:-1000]
        parts = raw_request.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            # kmock 0.8's path parser fails on the cluster-scoped namespaces
            # resource (it reads "namespaces" as a namespace prefix).
            body = await raw_request.read()
            request = kmock.Request(
                method=raw_request.method, url=raw_request.url, params=dict(raw_request.query),
                headers=dict(raw_request.headers), body=body, data=json.loads(body) if body else None,
                resource=kmock.resource("", "v1", "namespaces"), namespace=None,
                name=parts[3] if len(parts) == 4 else None, raw_request=raw_request)
            return await self._handle(request)
        return await super().__call__(raw_request)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if res is None or (res.group, res.version, res.plural) not in self.kinds:
            return await super()._handle(request)
        k = self.kinds[(res.group, res.version, res.plural)]
        try:
            for fault in list(self.faults):
                err = fault(request)
                if isinstance(err, ApiError):
                    raise err
                if err:
                    await asyncio.sleep(err)  # a slow answer
            if request.params.get("watch") in ("true", "1"):
                return await self._watch(request, k)
            doc = await self._serve(request, k)
            # Creation (and an eviction) answers 201 Created, as the real server does.
            return _json(doc, 201 if str(request.method.value).upper() == "POST" else 200)
        except ApiError as e:
            return _json(_status(e.status, e.reason, e.message), e.status)
        except PatchError as e:
            return _json(_status(422, "Invalid", str(e)), 422)

    async def _serve(self, request: kmock.Request, k: Kind) -> dict[str, Any]:
        ns = (request.namespace or "") if k.namespaced else ""
        name, sub, method = request.name, request.subresource, str(request.method.value).upper()
        if name is None:
            if method == "GET":
                return self._list(request, k, ns)
            if method == "POST":
                body = request.data if isinstance(request.data, dict) else {}
                meta = body.get("metadata") or {}
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                if not meta.get("name"):
                    raise ApiError(422, "Invalid", "metadata.name: Required value")
                body["metadata"] = meta
                key = (k.group, k.plural, ns or meta.get("namespace", ""), meta["name"])
                if key in self.store:
                    raise ApiError(409, "AlreadyExists", f'{k.plural} "{meta["name"]}" already exists')
                return self._write(k, key, body, None, "ADDED")
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        key = (k.group, k.plural, ns, name)
        if sub == "eviction" and k.plural == "pods" and method == "POST":
            return self._evict(ns, name)
        old = self.store.get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{k.plural} "{name}" not found')
        if method == "GET":
            return copy.deepcopy(old)
        if method == "DELETE":
            self.deletes.append((k.plural, ns, name))
            return self._delete(k, key)
        if method in ("PATCH", "PUT"):
            body = request.data
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if method == "PUT" or ctype != "application/json-patch+json":
                sent_rv = (body or {}).get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
                if sent_rv is not None and sent_rv != old["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {k.plural} "{name}": '
                                                    "the object has been modified; please apply your changes to "
                                                    "the latest version and try again")
            if method == "PUT":
                new = copy.deepcopy(body)
            elif ctype == "application/json-patch+json":
                new = json_patch(old, body)
            else:
                new = merge_patch(old, body)
            if k.status_subresource:
                # Status and main resource are written separately, as on a real server.
                if sub == "status":
                    new = {**copy.deepcopy(old), "status": new.get("status")}
                else:
                    new["status"] = copy.deepcopy(old.get("status"))
                    if new["status"] is None:
                        new.pop("status")
            new.setdefault("metadata", {})["name"] = name
            result = self._write(k, key, new, old, "MODIFIED")
            meta = result["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self._delete(k, key)
            return result
        raise ApiError(405, "MethodNotAllowed", method)

    def _list(self, request: kmock.Request, k: Kind, ns: str) -> dict[str, Any]:
        try:
            labels = label_matcher(request.params.get("labelSelector"))
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e)) from None
        fields = field_matcher(request.params.get("fieldSelector"))
        items = [copy.deepcopy(o) for (g, p, ons, _), o in sorted(self.store.items())
                 if g == k.group and p == k.plural and (not ns or ons == ns)
                 and labels(o["metadata"].get("labels") or {}) and fields(o)]
        return {"apiVersion": k.api_version, "kind": f"{k.kind}List",
                "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    async def _watch(self, request: kmock.Request, k: Kind) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        assert raw is not None
        ns = (request.namespace or "") if k.namespaced else ""
        labels = label_matcher(request.params.get("labelSelector"))
        fields = field_matcher(request.params.get("fieldSelector"))
        timeout = float(request.params.get("timeoutSeconds") or 3600)
        since = request.params.get("resourceVersion")
        queue: asyncio.Queue[tuple[int, str, dict[str, Any]]] = asyncio.Queue()

        def wanted(obj: dict[str, Any]) -> bool:
            m = obj["metadata"]
            return (not ns or m.get("namespace") == ns) and labels(m.get("labels") or {}) and fields(obj)

        # Subscribe first, then replay, so nothing falls in between.
        entry = (k.plural, queue)
        self.watchers.append(entry)
        backlog: list[tuple[int, str, dict[str, Any]]] = []
        gone = False
        if since and since != "0":
            since_rv = int(since) if since.isdigit() else 0
            oldest = self.history[0][0] if self.history else self.rv
            if (since_rv < oldest - 1 and since_rv < self.rv) or since_rv < self.oldest_rv:
                gone = True
            backlog = [(rv, t, o) for rv, p, t, o in self.history if p == k.plural and rv > since_rv]
        else:
            backlog = [(self.rv, "ADDED", copy.deepcopy(o)) for (g, p, _, _), o in sorted(self.store.items())
                       if g == k.group and p == k.plural]
        seen = max([rv for rv, _, _ in backlog], default=0)
        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json", "Connection": "close"})
        await resp.prepare(raw)
        try:
            if gone:
                await resp.write(json.dumps({"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {since} ({oldest})")}).encode() + b"\n")
                return resp
            for _, t, o in backlog:
                if wanted(o):
                    await resp.write(json.dumps({"type": t, "object": o}).encode() + b"\n")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    rv, t, o = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if t == "DROP":
                    break  # drop_watches(): the stream just ends
                if rv <= seen or not wanted(o):
                    continue
                await resp.write(json.dumps({"type": t, "object": o}).encode() + b"\n")
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.watchers.remove(entry)
        return resp

    def _evict(self, ns: str, name: str) -> dict[str, Any]:
        key = ("", "pods", ns, name)
        pod = self.store.get(key)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        labels = pod["metadata"].get("labels") or {}
        pdbs = [o for (g, p, ons, _), o in self.store.items()
                if p == "poddisruptionbudgets" and ons == ns
                and selector_from_spec(o.get("spec", {}).get("selector"))(labels)]
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                                 "eviction subresource does not support.")
        if pdbs and not pod["metadata"].get("deletionTimestamp"):
            allowed = self._disruptions_allowed(pdbs[0], ns)
            if allowed <= 0:
                raise ApiError(429, "TooManyRequests",
                               "Cannot evict pod as it would violate the pod's disruption budget.")
        self.evictions.append((ns, name, time.time()))
        for observe in self.observers:
            observe("pods", "EVICTING", copy.deepcopy(pod))
        self._delete(self.kind_of("pods"), key)
        return _status(201, "", "evicted") | {"status": "Success"}

    def _disruptions_allowed(self, pdb: dict[str, Any], ns: str) -> int:
        spec = pdb.get("spec", {})
        match = selector_from_spec(spec.get("selector"))
        pods = [o for (g, p, ons, _), o in self.store.items()
                if p == "pods" and ons == ns and match(o["metadata"].get("labels") or {})]
        healthy = sum(1 for p in pods if is_ready(p) and not p["metadata"].get("deletionTimestamp"))
        if "minAvailable" in spec:
            return healthy - _count(spec["minAvailable"], len(pods))
        if "maxUnavailable" in spec:
            return _count(spec["maxUnavailable"], len(pods)) - (len(pods) - healthy)
        return 1


_VALIDATORS: dict[tuple[str, str], Any] = {}


def _validator(k: Kind) -> Any:
    import jsonschema

    key = (k.group, k.plural)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = jsonschema.Draft7Validator(_strip_k8s_extensions(k.schema or {}))
    return _VALIDATORS[key]


def is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _count(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        import math

        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": code,
            "reason": reason, "message": message}


def _json(doc: dict[str, Any], status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(doc, status=status, headers={"Connection": "close"})


def _strip_k8s_extensions(schema: Any) -> Any:
    """openAPIV3Schema -> JSON schema: drop x-kubernetes-* keys (CEL is not
    evaluated here), and let x-kubernetes-int-or-string be either."""
    if isinstance(schema, dict):
        out = {k: _strip_k8s_extensions(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in out:
            pass
        return out
    if isinstance(schema, list):
        return [_strip_k8s_extensions(v) for v in schema]
    return schema
