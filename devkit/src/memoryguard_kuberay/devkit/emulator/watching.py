"""Watches of the EMULATED API: a watch subscribes first and then replays
what came after the given ``resourceVersion`` (``410 Gone`` as an ERROR
event when that is older than the kept history), or every object as ADDED
without one; it honours ``timeoutSeconds`` and ends when ``drop_watches()``
is called.

Under a label or field selector an event is judged on the object before
and after the change, as the real server's watch cache does
(apiserver/pkg/storage/cacher/cache_watcher.go, ``convertToWatchEvent``):
an object that comes to match is ADDED, one that stops matching is DELETED
(its previous content, at the event's resourceVersion), one that matches
before and after is MODIFIED, any other is not sent."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import TYPE_CHECKING, Any

import aiohttp.web
import kmock

from .selectors import field_matcher, label_matcher
from .wire import status_doc

if TYPE_CHECKING:
    from .store import ObjectStore
    from .wire import Kind


async def serve_watch(api: ObjectStore, request: kmock.Request, k: Kind) -> aiohttp.web.StreamResponse:
    raw = request._raw_request
    assert raw is not None
    ns = (request.namespace or "") if k.namespaced else ""
    labels = label_matcher(request.params.get("labelSelector"))
    fields = field_matcher(request.params.get("fieldSelector"))
    timeout = float(request.params.get("timeoutSeconds") or 3600)
    since = request.params.get("resourceVersion")
    queue: asyncio.Queue[tuple[int, str, dict[str, Any], dict[str, Any] | None]] = asyncio.Queue()

    def wanted(obj: dict[str, Any]) -> bool:
        m = obj["metadata"]
        return (not ns or m.get("namespace") == ns) and labels(m.get("labels") or {}) and fields(obj)

    def event(rv: int, kind: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> bytes | None:
        """The event this watcher is sent for a change, or None."""
        now = kind != "DELETED" and wanted(obj)
        before = prev is not None and wanted(prev)
        if now:
            return json.dumps({"type": "MODIFIED" if before else "ADDED", "object": obj}).encode() + b"\n"
        if before:
            assert prev is not None
            gone = {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(rv)}}
            return json.dumps({"type": "DELETED", "object": gone}).encode() + b"\n"
        return None

    # Subscribe first, then replay, so nothing falls in between.
    entry = (k.plural, queue)
    api.watchers.append(entry)
    backlog: list[tuple[int, str, dict[str, Any], dict[str, Any] | None]] = []
    gone = False
    if since and since != "0":
        since_rv = int(since) if since.isdigit() else 0
        oldest = api.history[0][0] if api.history else api.rv
        if (since_rv < oldest - 1 and since_rv < api.rv) or since_rv < api.oldest_rv:
            gone = True
        backlog = [(rv, t, o, b) for rv, p, t, o, b in api.history if p == k.plural and rv > since_rv]
    else:
        backlog = [(api.rv, "ADDED", copy.deepcopy(o), None) for (g, p, _, _), o in sorted(api.store.items())
                   if g == k.group and p == k.plural]
    seen = max([rv for rv, _, _, _ in backlog], default=0)
    resp = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json", "Connection": "close"})
    await resp.prepare(raw)
    try:
        if gone:
            await resp.write(json.dumps({"type": "ERROR", "object": status_doc(
                410, "Expired", f"too old resource version: {since} ({oldest})")}).encode() + b"\n")
            return resp
        for rv, t, o, b in backlog:
            if (line := event(rv, t, o, b)) is not None:
                await resp.write(line)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                rv, t, o, b = await asyncio.wait_for(queue.get(), left)
            except TimeoutError:
                break
            if t == "DROP":
                break  # drop_watches(): the stream just ends
            if rv > seen and (line := event(rv, t, o, b)) is not None:
                await resp.write(line)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        api.watchers.remove(entry)
    return resp
