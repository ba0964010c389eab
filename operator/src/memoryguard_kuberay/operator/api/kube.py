"""The one module that talks to the Kubernetes API.

Every request the operator makes goes through ``Kube``, and every
(API group, resource, verb) it can use is listed in apiuse.py, which the
chart's RBAC rules must equal. Pods are never deleted here: a rotation
evicts (``POST .../eviction``, honouring PodDisruptionBudgets).
"""

from __future__ import annotations

import asyncio
import datetime
import json as _json
import ssl
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import aiohttp

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api.credentials import Credentials, load_credentials
from memoryguard_kuberay.operator.api.errors import (
    ApiError,
    Conflict,
    EvictionAnswer,
    NotFound,
    ServerError,
    TooManyRequests,
    _api_error,
    api_error,
)
from memoryguard_kuberay.operator.api.readbudget import ReadBudget

# An Event refused by a busy or failing API server (429, 5xx, no answer) is
# tried again after each of these delays (seconds), then dropped: as
# client-go's recorder does, reporting retries a little but never blocks.
EVENT_RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0)
LIST_PAGE = 500  # items per page of a LIST (client-go's pager reads 500)
# The most a page's answer may be, read before it is parsed: a tenant's pods
# of 1.2 MB each made one page of 500 about 360 MB of JSON (1.5 GiB once
# parsed) and the operator was OOM-killed at every start (issue 44, 1). A
# page over it is asked again with half the items, down to one (the API
# server stores no object over about 1.5 MiB, so one always fits).
MAX_PAGE_BYTES = 8 << 20


class PageTooLarge(Exception):
    """A page's answer passed MAX_PAGE_BYTES (read no further)."""


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"  # k8s.io/client-go/metadata
MAX_WATCH_LINE = 4 * 1024 * 1024  # one watch event: an object is at most ~1.5 MiB in etcd

RAYCLUSTERS = (C.RAY_GROUP, C.RAY_VERSION, C.RAYCLUSTERS)
MEMORYGUARDS = (C.GROUP, C.VERSION, C.PLURAL)
PDBS = ("policy", "v1", "poddisruptionbudgets")
LEASES = ("coordination.k8s.io", "v1", "leases")


def _path(gvr: tuple[str, str, str], namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    group, version, plural = gvr
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    tail = f"/{name}" if name else ""
    return f"{base}{ns}/{plural}{tail}{'/' + sub if sub else ''}"


def pod_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    return _path(("", "v1", "pods"), namespace, name, sub)


GUARD_IDENTITY = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation")


def guard_identity(guard: Mapping[str, Any]) -> dict[str, Any]:
    """What the guards of a namespace need of each other to rank them (age,
    name, being deleted) and to know when a spec changed: a few short
    fields, whatever else the object carries."""
    meta = guard.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {"metadata": {k: meta[k] for k in GUARD_IDENTITY if isinstance(meta.get(k), str | int)
                         and not isinstance(meta.get(k), bool) and len(str(meta[k])) <= 256}}


REQUEST_CONNECTIONS = 32  # requests at once to the API server, ours and kopf's each (watches apart)


def client_session(creds: Credentials, *, limit: int, base_url: str | None = None,
                   timeout: aiohttp.ClientTimeout | None = None,
                   user_agent: str = "memoryguard") -> aiohttp.ClientSession:
    """A session to the API server with these credentials, at most ``limit``
    connections open at once (0: no limit). Ours (``Kube``) and kopf's own
    (the login handler in handlers.py) are made here, alike."""
    ssl_ctx: ssl.SSLContext | bool = False
    if creds.server.startswith("https"):
        ssl_ctx = ssl.create_default_context(cafile=creds.ca_path)
        if creds.cert_path:
            ssl_ctx.load_cert_chain(creds.cert_path, creds.key_path)
        if not creds.verify:
            ssl_ctx.check_hostname = False
            ssl_ctx.verify_mode = ssl.CERT_NONE
    headers = {"User-Agent": user_agent}
    if creds.token:
        headers["Authorization"] = f"Bearer {creds.token}"
    return aiohttp.ClientSession(base_url=base_url.rstrip("/") + "/" if base_url else None, headers=headers,
                                 connector=aiohttp.TCPConnector(ssl=ssl_ctx, limit=limit),
                                 timeout=timeout if timeout is not None else aiohttp.client.DEFAULT_TIMEOUT)


class Kube:
    def __init__(self, creds: Credentials, *, timeout_s: float = 30.0, user_agent: str = "memoryguard") -> None:
        self.creds = creds
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        # Watches hold their connection for minutes, one per namespace with a
        # guard: on a pool of their own, so they never take the requests' 32.
        self._watch_session: aiohttp.ClientSession | None = None

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        return client_session(self.creds, limit=limit, base_url=self.creds.server, timeout=self.timeout,
                              user_agent=self.user_agent)

    async def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._new_session(REQUEST_CONNECTIONS)
        return self._session

    async def close(self) -> None:
        for s in (self._session, self._watch_session):
            if s is not None:
                await s.close()

    async def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None,
                      content_type: str = "application/json", accept: str | None = None,
                      max_bytes: int | None = None, budget: ReadBudget | None = None) -> Any:
        """``max_bytes``: an answer longer is not read on (PageTooLarge).
        ``budget``: charged with the answer's length (read within
        ``max_bytes``, MAX_PAGE_BYTES when not given)."""
        if budget is not None and max_bytes is None:
            max_bytes = MAX_PAGE_BYTES
        s = await self.session()
        headers = {"Content-Type": content_type} if json is not None else {}
        if accept:
            headers["Accept"] = accept
        try:
            async with s.request(method, path.lstrip("/"), json=json, params=params, headers=headers) as r:
                if r.status >= 400:
                    raise await _api_error(r)
                if max_bytes is None:
                    return await r.json(content_type=None)
                if (r.content_length or 0) > max_bytes:
                    raise PageTooLarge()
                body = bytearray()
                async for chunk in r.content.iter_any():
                    body += chunk
                    if len(body) > max_bytes:
                        raise PageTooLarge()
                if budget is not None:
                    budget.charge(len(body))
                return _json.loads(body) if body else None  # parsed where it was read: no copy of 8 MiB
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise api_error(0, "Unreachable", str(exc) or type(exc).__name__) from exc

    async def list_pages(self, path: str, params: Mapping[str, str], *, metadata_only: bool = False,
                         budget: ReadBudget | None = None) -> AsyncGenerator[tuple[list[Any], str], None]:
        """A LIST read in pages of ``LIST_PAGE`` items, as client-go's pager
        reads one: (the page's items, the list's resourceVersion). A reader
        holds one page at a time. A page refused mid-way (410 Expired: the
        list outlived a compaction) raises; the caller lists again.
        ``metadata_only``: each item's metadata and nothing else, as
        client-go's metadata client asks (the server never sends the rest).
        ``budget``: each page's length charged to it, and no page read once
        it is spent (``budget.cut`` then says a page was left unread)."""
        token: str | None = None
        limit = LIST_PAGE
        while True:
            if budget is not None and budget.spent:
                budget.cut = True
                return
            q = {**params, "limit": str(limit), **({"continue": token} if token else {})}
            try:
                doc = await self.request("GET", path, params=q, accept=METADATA_ONLY if metadata_only else None,
                                         max_bytes=min(MAX_PAGE_BYTES, budget.limit) if budget else MAX_PAGE_BYTES,
                                         budget=budget)
            except PageTooLarge:
                if limit == 1 and budget is not None:
                    budget.cut = True  # one object is more than the whole budget
                    return
                if limit == 1:
                    raise api_error(0, "PageTooLarge", f"one object of {path} is over {MAX_PAGE_BYTES} bytes") from None
                limit = max(1, limit // 2)  # the same page again, halved
                continue
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            items = doc.get("items") if isinstance(doc, dict) else None
            yield (items if isinstance(items, list) else []), str(meta.get("resourceVersion", ""))
            token = meta.get("continue") or None
            if not isinstance(token, str):
                return

    async def list_all(self, path: str, params: Mapping[str, str], *,
                       budget: ReadBudget | None = None) -> list[dict[str, Any]]:
        """Every item of a LIST (within ``budget``), read in pages: for reads whose whole answer is wanted."""
        out: list[dict[str, Any]] = []
        async for items, _rv in self.list_pages(path, params, budget=budget):
            out += items
        return out

    async def watch(self, path: str, params: Mapping[str, str], *, timeout_s: int,
                    opened: Callable[[], None] | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """A WATCH: each event ``{"type", "object"}`` as it comes, until the
        server ends the stream (``timeoutSeconds``) or it breaks (ApiError).
        ``opened`` is called once the server has accepted the watch.
        An event line over ``MAX_WATCH_LINE`` bytes ends the stream: the
        biggest object the server stores is about 1.5 MiB."""
        if self._watch_session is None or self._watch_session.closed:
            self._watch_session = self._new_session(0)  # 0: no limit (one per namespace with a guard)
        s = self._watch_session
        q = {**params, "watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}
        # No total timeout: a stream is open for timeout_s; a silent one past that (plus slack) is broken.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout.total, sock_read=timeout_s + 30)
        try:
            async with s.get(path.lstrip("/"), params=q, timeout=timeout) as r:
                if r.status >= 400:
                    raise await _api_error(r)
                if opened is not None:
                    opened()
                buf = bytearray()
                async for chunk in r.content.iter_any():
                    buf += chunk
                    while (end := buf.find(b"\n")) >= 0:
                        line = bytes(buf[:end])
                        del buf[:end + 1]
                        if line.strip():
                            try:
                                event = _json.loads(line)
                            except ValueError:
                                raise api_error(0, "BadWatchEvent", f"not JSON: {line[:80]!r}") from None
                            if isinstance(event, dict):
                                yield event
                    if len(buf) > MAX_WATCH_LINE:
                        raise api_error(0, "BadWatchEvent", f"an event line over {MAX_WATCH_LINE} bytes")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise api_error(0, "Unreachable", str(exc) or type(exc).__name__) from exc

    # -- reads --------------------------------------------------------------
    def pod_pages(self, namespace: str, label_selector: str) -> AsyncGenerator[tuple[list[Any], str], None]:
        """Pages of the pods the selector matches, for rare reads (a guard's
        deletion); the guards' cycles read pods from the cache (podcache.py).
        A page at a time: a tenant's pods may be a megabyte each."""
        return self.list_pages(pod_path(namespace), {"labelSelector": label_selector})

    async def list_rayclusters(self, namespace: str, label_selector: str | None = None, *,
                               budget: ReadBudget | None = None) -> list[dict[str, Any]]:
        """Read in pages, each within MAX_PAGE_BYTES, and within ``budget``
        (issue 44, 4: one answer of 100 RayClusters of 1.2 MB each, every
        cycle; then, in pages, the operator at 309 MiB on the real server)."""
        return await self.list_all(_path(RAYCLUSTERS, namespace),
                                   {"labelSelector": label_selector} if label_selector else {}, budget=budget)

    async def raycluster_names(self, namespace: str, *, most: int = 2000) -> list[str]:
        """The namespace's RayClusters by name (their metadata alone, in
        pages), at most ``most``."""
        names: list[str] = []
        async for items, _rv in self.list_pages(_path(RAYCLUSTERS, namespace), {}, metadata_only=True):
            names += [str((i.get("metadata") or {}).get("name", "")) for i in items if isinstance(i, dict)]
            if len(names) >= most:
                break
        return names[:most]

    async def list_guards(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's guards, whole, read in pages (for the CLI's reads;
        the operator's guards read each other's identities alone)."""
        return await self.list_all(_path(MEMORYGUARDS, namespace), {})

    async def list_guard_identities(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's guards as their age and identity only
        (``guard_identity``), read in pages of metadata (a tenant may have
        made thousands, each as big as the server takes: issue 44, 3); a
        guard's spec is read by ``get_guard`` where it is needed."""
        out: list[dict[str, Any]] = []
        async for items, _rv in self.list_pages(_path(MEMORYGUARDS, namespace), {}, metadata_only=True):
            out += (guard_identity(g) for g in items if isinstance(g, dict))
        return out

    async def get_guard(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(await self.request("GET", _path(MEMORYGUARDS, namespace, name)))

    async def get_raycluster(self, namespace: str, name: str, *, budget: ReadBudget | None = None) -> dict[str, Any]:
        return dict(await self.request("GET", _path(RAYCLUSTERS, namespace, name), budget=budget))

    async def server_minor(self) -> int | None:
        """The server's minor version (``GET /version``), None when it does
        not say (a failure here costs only the native sidecar: see
        kuberayrules.native_sidecars)."""
        try:
            doc = await self.request("GET", "/version")
        except ApiError:
            return None
        raw = str(doc.get("minor", "")) if isinstance(doc, dict) else ""
        digits = raw[:4].rstrip("+")
        return int(digits) if digits.isdigit() else None

    # -- writes -------------------------------------------------------------
    async def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        await self.request("PATCH", pod_path(namespace, name), json={"metadata": {"annotations": dict(annotations)}},
                           content_type="application/merge-patch+json")

    async def json_patch_raycluster(self, namespace: str, name: str,
                                    ops: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        """Targeted JSON patch (never server-side apply: workerGroupSpecs has
        no list-type, so apply would take the whole list from its owners).
        Returns the RayCluster as patched (None if the answer is not one)."""
        doc = await self.request("PATCH", _path(RAYCLUSTERS, namespace, name), json=list(ops),
                                 content_type="application/json-patch+json")
        return doc if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) else None

    async def evict(self, namespace: str, name: str, *, dry_run: bool = False,
                    grace_seconds: int | None = None) -> tuple[EvictionAnswer, str]:
        """Ask for an eviction: evicted, already gone (404), or refused for
        now (429: a PodDisruptionBudget or rate limiting; 500: the server
        could not judge the budgets) with the server's words, which name
        the budget. Other errors raise. ``dry_run``: the server judges it
        and keeps the pod (``deleteOptions.dryRun: [All]``); ``grace_seconds``:
        the pod's grace period for this deletion instead of its own."""
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        options: dict[str, Any] = {}
        if dry_run:
            options["dryRun"] = ["All"]
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if options:
            body["deleteOptions"] = options
        try:
            await self.request("POST", pod_path(namespace, name, "eviction"), json=body)
        except (NotFound, TooManyRequests, ServerError) as e:
            if isinstance(e, ServerError) and e.status != 500:
                raise
            answer = EvictionAnswer.GONE if isinstance(e, NotFound) else EvictionAnswer.REFUSED
            return answer, f"{e.status}: " + "; ".join([e.message, *e.causes])
        return EvictionAnswer.EVICTED, "evicted"

    async def patch_guard_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self.request("PATCH", _path(MEMORYGUARDS, namespace, name, "status"), json={"status": dict(status)},
                           content_type="application/merge-patch+json")

    async def _delete_if_there(self, path: str, options: Mapping[str, Any] | None = None) -> None:
        """DELETE; an object already gone is what was wanted."""
        try:
            await self.request("DELETE", path, json=None if options is None else dict(options))
        except ApiError as e:
            if not isinstance(e, NotFound):
                raise

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        try:
            return dict(await self.request("GET", path))
        except ApiError as e:
            if isinstance(e, NotFound):
                return None
            raise

    def pdb_pages(self, namespace: str, label_selector: str) -> AsyncGenerator[tuple[list[Any], str], None]:
        return self.list_pages(_path(PDBS, namespace), {"labelSelector": label_selector})

    async def create_pdb(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self.request("POST", _path(PDBS, namespace), json=dict(body))

    async def patch_pdb(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self.request("PATCH", _path(PDBS, namespace, name), json=dict(patch),
                           content_type="application/merge-patch+json")

    async def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", json=dict(body))

    async def put_configmap(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create it, or (it exists: 409) replace it whole, at the version
        read: its data, labels and owners become exactly ``body``'s. A merge
        kept what was there: a ConfigMap planted first under the name (by
        anyone who may write ConfigMaps, not RayClusters) kept its
        ``LD_AUDIT`` and ``PYTHONPATH``, which the Ray container's envFrom
        then read (issue 63, 3). A write between the read and the
        replace is refused (409) and raised: the next cycle tries again."""
        try:
            await self.create_configmap(namespace, body)
        except Conflict:
            name = body["metadata"]["name"]
            path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
            there = await self.request("GET", path)
            version = (there.get("metadata") or {}).get("resourceVersion") if isinstance(there, dict) else None
            await self.request("PUT", path, json={**body, "metadata": {**body["metadata"],
                                                                      "resourceVersion": version}})

    async def list_configmaps(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The matching ConfigMaps whole (for ``memoryguard-kuberay forensics``,
        which prints them; the operator reads only their metadata)."""
        return await self.list_all(f"/api/v1/namespaces/{namespace}/configmaps", {"labelSelector": label_selector})

    def configmap_metadata(self, namespace: str, label_selector: str) -> AsyncGenerator[tuple[list[Any], str], None]:
        """Pages of the matching ConfigMaps' metadata (their data, up to 1 MiB
        each, never leaves the API server)."""
        return self.list_pages(f"/api/v1/namespaces/{namespace}/configmaps", {"labelSelector": label_selector},
                               metadata_only=True)

    async def delete_configmap(self, namespace: str, name: str) -> None:
        await self._delete_if_there(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_or_none(_path(LEASES, namespace, name))

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self.request("POST", _path(LEASES, namespace), json=dict(body))

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """PUT with the resourceVersion read: 409 when someone wrote it since."""
        await self.request("PUT", _path(LEASES, namespace, name), json=dict(body))

    async def list_leases(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return await self.list_all(_path(LEASES, namespace), {"labelSelector": label_selector})

    async def delete_lease(self, namespace: str, name: str, *, resource_version: str | None = None) -> None:
        """``resource_version``: only the Lease as read (409 when written since)."""
        await self._delete_if_there(_path(LEASES, namespace, name), None if resource_version is None else {
            "apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": resource_version}})

    async def list_all_guards(self) -> list[dict[str, Any]]:
        doc = await self.request("GET", _path(MEMORYGUARDS, None))
        return list(doc.get("items", []))

    async def delete_guard(self, namespace: str, name: str) -> None:
        await self._delete_if_there(_path(MEMORYGUARDS, namespace, name))

    async def delete_pdb(self, namespace: str, name: str) -> None:
        await self._delete_if_there(_path(PDBS, namespace, name))

    async def event(self, *, namespace: str, involved: Mapping[str, Any], reason: str, message: str,
                    warning: bool = False) -> None:
        """A core/v1 Event. Best effort: failing to report never stops an action."""
        now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = involved.get("metadata", {})
        # The Event lives in its object's namespace (a real server refuses
        # any other with 422); all our objects share the guard's.
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name', 'memoryguard')}.{uuid.uuid4().hex[:12]}",
                         "namespace": namespace},
            "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                               "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
            "source": {"component": "memoryguard"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": C.REPORTING_COMPONENT, "reportingInstance": "memoryguard",
        }
        for delay in (*EVENT_RETRY_DELAYS_S, None):
            try:
                await self.request("POST", f"/api/v1/namespaces/{namespace}/events", json=body)
                return
            except ApiError as e:
                if delay is None or not isinstance(e, (ServerError, TooManyRequests)):
                    return  # out of tries, or refused for good (403, 422): nothing a retry mends
            await asyncio.sleep(delay)


T = TypeVar("T")


def with_kube(work: Callable[[Kube], Awaitable[T]], *, timeout_s: float = 30.0) -> T:
    """``work`` run on a Kube with the user's credentials, closed after: how
    the command-line tools reach the API (NoCredentials and ApiError pass
    through, for the tool to say in its own name)."""
    async def run() -> T:
        kube = Kube(load_credentials(), timeout_s=timeout_s)
        try:
            return await work(kube)
        finally:
            await kube.close()

    return asyncio.run(run())
