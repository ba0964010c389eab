"""An EMULATED Kubernetes API server for tests and the demo, built on kmock's
``KubernetesScaffold`` (which serves discovery and renders errors).

kmock 0.8's own ``KubernetesEmulator`` lacks what a kopf operator relies on
(resourceVersion, uid, selectors, the eviction subresource, ...; see
shared/design/FACTS.md), so this subclass keeps its own store and answers
every resource request itself, following the real API's contract:

- objects get ``uid``, ``resourceVersion`` (one global counter),
  ``creationTimestamp``, ``generation`` (bumped on spec changes);
- list returns a list ``resourceVersion``; watches (``watching.py``) replay
  from a ``resourceVersion`` or answer ``410 Gone``; under a selector an
  object that stops matching is DELETED and one that comes to match ADDED;
- ``labelSelector`` and ``fieldSelector`` (=, ==, !=, in, notin, exists);
- pagination (``limit``/``continue``): every page of one list is read from
  the snapshot taken by its first page and carries that page's
  ``resourceVersion``, as the real server reads etcd at that revision; a
  ``continue`` token from before ``expire_history()`` (a compaction, which
  a real server runs every 5 minutes) answers ``410 Gone``, reason
  ``Expired``; ``remainingItemCount`` is left out under a selector, as
  the real server does;
- a list asked for as ``PartialObjectMetadataList`` (the ``Accept`` header
  client-go's metadata client sends) answers each item's metadata only;
- PATCH as merge, strategic-merge (treated as merge) or JSON patch; a failed
  JSON-patch ``test`` or a bad path answers 422; a stale ``resourceVersion``
  answers 409; the ``status`` subresource is written apart from the rest;
- the eviction subresource (``evictions.py``) reads PodDisruptionBudget status;
- graceful pod deletion: a pod bound to a node (``spec.nodeName``) gets
  ``deletionTimestamp`` and stays listed (Terminating) until the kubelet
  stand-in (``kuberay.py``) removes it; an unbound pod goes
  at once;
- a stand-in for kube-controller-manager's disruption controller
  (``disruption.py``): PDB status recomputed on every pod or PDB change;
- CRD schemas (``schema.py``): unknown fields pruned with a ``Warning``
  header (400 under ``fieldValidation=Strict``), defaults filled in, OpenAPI
  validation with the server's integer-bound quirk, CEL rules (422);
- an Event whose ``involvedObject.namespace`` is not its own: 422;
- a ConfigMap whose data is over 1 MiB (``core.MaxSecretSize``, as the real
  server's ValidateConfigMap counts it: keys and values): 422;
- finalizers and ``deletionTimestamp`` on delete.

NOT modelled: authentication and RBAC, admission webhooks, server-side
apply, the watch cache (``resourceVersion=0`` lists are read like any
other), the inconsistent ``continue`` token a real 410 Expired carries,
the passing of time (``continue`` tokens and the watch history end only at
``expire_history()``, never after the real server's 5 minutes; at most
``MAX_CONTINUES`` lists can be mid-way at once, the oldest then expiring
early: an emulator's bound, not the server's), watch BOOKMARK events, pod
lifecycle beyond what the KubeRay/kubelet stand-in does, garbage collection
by ownerReferences, API priority and fairness, the controller's ~1 s delay before a PDB's status
follows a change (here it follows at once).

For fault tests: ``faults`` can answer any request with an error or delay
it; ``drop_watches()`` ends every open watch stream (as a server restart or a
load balancer would); ``expire_history()`` forgets the history, so a watch
resumed from an older resourceVersion gets ``410 Gone``; ``observers`` see
every change (and each eviction before the pod goes), for invariant checks.
"""

from __future__ import annotations

import asyncio
import collections
import json
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock

from . import evictions, schema, watching
from .patching import PatchError, json_patch, merge_patch
from .selectors import field_matcher, label_matcher
from .store import HISTORY, ObjectStore, Observer, jcopy
from .wire import BUILTIN_KINDS, ApiError, Kind, status_doc

MAX_CONTINUES = 256  # paged lists mid-way at once (an emulator bound: the real server keeps etcd revisions)
CONFIGMAP_MAX_BYTES = 1024 * 1024  # k8s core.MaxSecretSize, which ValidateConfigMap also applies


# A fault looks at a request and answers an error (raised to the client), a
# delay in seconds (the request is then served), or None (no fault).
Fault = Callable[[kmock.Request], "ApiError | float | None"]
@attrs.define(kw_only=True)
class EmulatedApi(ObjectStore, kmock.KubernetesScaffold):  # type: ignore[misc]  # get/put: the store's
    kinds: dict[tuple[str, str, str], Kind] = attrs.field(factory=dict)
    store: dict[tuple[str, str, str, str], dict[str, Any]] = attrs.field(factory=dict)  # (group, plural, ns, name)
    rv: int = 1000
    # (rv, plural, type, object, the object before it when it was modified): a
    # watch under a selector needs both (watching.py).
    history: collections.deque[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]] = attrs.field(
        factory=lambda: collections.deque(maxlen=HISTORY))
    watchers: list[tuple[str, asyncio.Queue[tuple[int, str, dict[str, Any], dict[str, Any] | None]]]] = attrs.field(
        factory=list)
    faults: list[Fault] = attrs.field(factory=list)
    observers: list[Observer] = attrs.field(factory=list)
    oldest_rv: int = 0  # watches from before this are 410 Gone (expire_history)
    evictions: list[tuple[str, str, float]] = attrs.field(factory=list)  # (namespace, pod, wall time) evicted
    deletes: list[tuple[str, str, str]] = attrs.field(factory=list)  # (plural, namespace, name) plain deletes
    budget_keys: set[tuple[str, str, str, str]] = attrs.field(factory=set)  # the PDBs' store keys
    # Lists read in pages: continue token -> (the snapshot's resourceVersion, the items not yet served).
    continues: collections.OrderedDict[str, tuple[int, list[dict[str, Any]]]] = attrs.field(
        factory=collections.OrderedDict)
    changed: asyncio.Event = attrs.field(factory=asyncio.Event)
    _syncing: bool = False

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
        try:
            schema.check_rules_compile(k.schema)
        except Exception as e:
            raise ApiError(422, "Invalid", f"CustomResourceDefinition {crd['metadata']['name']!r}: a CEL rule "
                                           f"does not compile: {e}") from None
        costly = schema.rule_cost_problems(k.schema)
        if costly:
            raise ApiError(422, "Invalid", f"CustomResourceDefinition.apiextensions.k8s.io "
                                           f"{crd['metadata']['name']!r} is invalid: {'; '.join(costly)}")
        self.add_kind(k)
        return k

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
        gvr = (str(res.group or ""), str(res.version or ""), str(res.plural or "")) if res is not None else None
        if gvr is None or gvr not in self.kinds:
            return await super()._handle(request)
        k = self.kinds[gvr]
        try:
            for fault in list(self.faults):
                err = fault(request)
                if isinstance(err, ApiError):
                    raise err
                if err:
                    await asyncio.sleep(err)  # a slow answer
            if request.params.get("watch") in ("true", "1"):
                return await watching.serve_watch(self, request, k)
            pruned: list[str] = []
            doc = await self._serve(request, k, pruned)
            # Creation (and an eviction) answers 201 Created, as the real server does.
            resp = _json(doc, 201 if str(request.method.value).upper() == "POST" else 200)
            for path in pruned:
                resp.headers.add("Warning", f'299 - "unknown field \\"{path}\\""')
            return resp
        except ApiError as e:
            return _json(status_doc(e.status, e.reason, e.message, e.causes), e.status)
        except PatchError as e:
            return _json(status_doc(422, "Invalid", str(e)), 422)

    async def _serve(self, request: kmock.Request, k: Kind, pruned: list[str]) -> dict[str, Any]:
        ns = (request.namespace or "") if k.namespaced else ""
        name, sub, method = request.name, request.subresource, str(request.method.value).upper()
        strict = request.params.get("fieldValidation") == "Strict"
        return self._serve_write(request, k, ns, name, sub, method, pruned, strict)

    def _serve_write(self, request: kmock.Request, k: Kind, ns: str, name: str | None, sub: str | None,
                     method: str, pruned: list[str], strict: bool) -> dict[str, Any]:
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
                involved_ns = (body.get("involvedObject") or {}).get("namespace")
                if k.plural == "events" and involved_ns and involved_ns != key[2]:
                    raise ApiError(422, "Invalid", f'Event "{meta["name"]}" is invalid: involvedObject.namespace: '
                                                   f'Invalid value: "{involved_ns}": does not match event.namespace')
                if k.plural == "configmaps":
                    size = sum(len(str(key_)) + len(str(v)) for d in (body.get("data") or {}, body.get(
                        "binaryData") or {}) for key_, v in d.items())
                    if size > CONFIGMAP_MAX_BYTES:
                        raise ApiError(422, "Invalid", f'ConfigMap "{meta["name"]}" is invalid: []: Too long: must '
                                                       f"have at most {CONFIGMAP_MAX_BYTES} bytes")
                if self._dry_run(request, body):
                    # Admitted as a real write would be (a real server's dry run refuses and defaults alike).
                    return jcopy(self.admit(k, body, pruned, strict))
                return self.write_object(k, key, body, None, "ADDED", pruned, strict)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        key = (k.group, k.plural, ns, name)
        if sub == "eviction" and k.plural == "pods" and method == "POST":
            opts = request.data.get("deleteOptions") if isinstance(request.data, dict) else None
            grace = (opts or {}).get("gracePeriodSeconds") if isinstance(opts, dict) else None
            return evictions.evict(self, ns, name, dry_run=self._dry_run(request, request.data),
                                   grace_seconds=grace if isinstance(grace, int) and grace >= 0 else None)
        old = self.store.get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{k.plural} "{name}" not found')
        if method == "GET":
            return jcopy(old)
        if method == "DELETE":
            # DeleteOptions' preconditions, as the real server: a delete of
            # the object as read, refused (409) once it was written since.
            pre = (request.data.get("preconditions") or {}) if isinstance(request.data, dict) else {}
            for field, have in (("uid", old["metadata"].get("uid")),
                                ("resourceVersion", old["metadata"]["resourceVersion"])):
                if pre.get(field) is not None and pre[field] != have:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {k.plural} "{name}": '
                                                    f"Precondition failed: {field}: {pre[field]}, {field} in object "
                                                    f"meta: {have}")
            self.deletes.append((k.plural, ns, name))
            return self.delete_object(k, key)
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
                new = jcopy(body)
            elif ctype == "application/json-patch+json":
                new = json_patch(old, body)
            else:
                new = merge_patch(old, body)
            if k.status_subresource:
                # Status and main resource are written separately, as on a real server.
                if sub == "status":
                    new = {**jcopy(old), "status": new.get("status")}
                else:
                    new["status"] = jcopy(old.get("status"))
                    if new["status"] is None:
                        new.pop("status")
            new.setdefault("metadata", {})["name"] = name
            if self._dry_run(request, None):
                return dict(new)
            result = self.write_object(k, key, new, old, "MODIFIED", pruned, strict)
            meta = result["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self.delete_object(k, key)
            return result
        raise ApiError(405, "MethodNotAllowed", method)

    def _list(self, request: kmock.Request, k: Kind, ns: str) -> dict[str, Any]:
        try:
            labels = label_matcher(request.params.get("labelSelector"))
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e)) from None
        fields = field_matcher(request.params.get("fieldSelector"))
        raw_limit = request.params.get("limit") or "0"
        if not raw_limit.isdigit():
            raise ApiError(400, "BadRequest", f"limit: Invalid value: {raw_limit!r}")
        limit = int(raw_limit)
        token = request.params.get("continue")
        if token:
            if token not in self.continues:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                               "list result. You can start a new list without the continue "
                                               "parameter.")
            rv, items = self.continues.pop(token)
        else:
            rv = self.rv
            # References, not copies: a stored object is never changed in
            # place (every write stores a new one), so the list's snapshot
            # for its later pages stays what it was; the answer is serialised
            # at once. (Copies of 40,000 pods per LIST took the emulator
            # gigabytes and a minute: issue 25's bench.)
            # The kind's objects first, then sorted: sorting the whole store
            # (40,000 pods) for a LIST of 800 RayClusters was most of the
            # emulator's time in issue 25's bench.
            mine = sorted(((key, o) for key, o in self.store.items()
                           if key[1] == k.plural and key[0] == k.group and (not ns or key[2] == ns)),
                          key=lambda kv: kv[0])
            items = [o for _key, o in mine if labels(o["metadata"].get("labels") or {}) and fields(o)]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            items, rest = items[:limit], items[limit:]
            token = uuid.uuid4().hex
            self.continues[token] = (rv, rest)
            while len(self.continues) > MAX_CONTINUES:
                self.continues.popitem(last=False)
            meta["continue"] = token
            if not request.params.get("labelSelector") and not request.params.get("fieldSelector"):
                meta["remainingItemCount"] = len(rest)
        if "as=PartialObjectMetadataList" in str(request.headers.get("Accept", "")):
            return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": meta,
                    "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                               "metadata": o["metadata"]} for o in items]}
        return {"apiVersion": k.api_version, "kind": f"{k.kind}List", "metadata": meta, "items": items}

    @staticmethod
    def _dry_run(request: kmock.Request, body: Any) -> bool:
        """``?dryRun=All``, or (an eviction) ``deleteOptions.dryRun: [All]``."""
        opts = (body or {}).get("deleteOptions") if isinstance(body, dict) else None
        return request.params.get("dryRun") == "All" or "All" in ((opts or {}).get("dryRun") or [])

def _json(doc: dict[str, Any], status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(doc, status=status, headers={"Connection": "close"})
