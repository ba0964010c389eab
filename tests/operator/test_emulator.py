"""The emulated API keeps the contract the operator relies on (it is what
the end-to-end tests trust): resourceVersion and 409 on stale writes, 422
on a failed JSON-patch test, selectors, the status subresource, watch
replay from a resourceVersion, evictions checked against PDBs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi, Kind
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer

PODS = "/api/v1/namespaces/ns/pods"


async def _call(s: aiohttp.ClientSession, method: str, path: str, body: Any = None,
                ctype: str = "application/merge-patch+json") -> tuple[int, Any]:
    async with s.request(method, path, data=None if body is None else json.dumps(body),
                         headers={"Content-Type": ctype}) as r:
        return r.status, await r.json(content_type=None)


async def test_contract() -> None:
    api = EmulatedApi()
    api.add_kind(Kind("memoryguard.io", "v1alpha1", "memoryguards", "MemoryGuard", status_subresource=True))
    async with api, EmulatorServer(api, host="127.0.0.1") as server:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as s:
            for i, group in enumerate(["a", "a", "b"]):
                st, pod = await _call(s, "POST", PODS, {"metadata": {"name": f"p{i}", "labels": {"g": group}},
                                                        "status": {"phase": "Running", "conditions": [
                                                            {"type": "Ready", "status": "True"}]}})
                assert st == 201, pod
            assert pod["metadata"]["uid"] and int(pod["metadata"]["resourceVersion"]) > 0
            st, _ = await _call(s, "POST", PODS, {"metadata": {"name": "p0"}})
            assert st == 409  # already exists
            # Selectors.
            st, lst = await _call(s, "GET", PODS + "?labelSelector=g%20in%20(a)")
            assert [p["metadata"]["name"] for p in lst["items"]] == ["p0", "p1"]
            st, lst = await _call(s, "GET", PODS + "?labelSelector=g!%3Da")
            assert [p["metadata"]["name"] for p in lst["items"]] == ["p2"]
            list_rv = lst["metadata"]["resourceVersion"]
            # Optimistic concurrency: a stale resourceVersion is a 409.
            st, _ = await _call(s, "PATCH", PODS + "/p0", {"metadata": {"resourceVersion": "1",
                                                                        "annotations": {"x": "y"}}})
            assert st == 409
            # A failed JSON-patch test is a 422, and nothing changes.
            st, _ = await _call(s, "PATCH", PODS + "/p0", [{"op": "test", "path": "/metadata/name", "value": "no"},
                                                         {"op": "add", "path": "/metadata/labels/z", "value": "1"}],
                                "application/json-patch+json")
            assert st == 422 and "z" not in api.get("pods", "ns", "p0")["metadata"]["labels"]  # type: ignore[index]
            # Watch from the list's resourceVersion replays what came after it.
            await _call(s, "PATCH", PODS + "/p2", {"metadata": {"annotations": {"seen": "yes"}}})
            async with s.get(PODS, params={"watch": "true", "resourceVersion": list_rv,
                                           "timeoutSeconds": "1"}) as r:
                events = [json.loads(line) for line in (await r.read()).splitlines() if line.strip()]
            assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("MODIFIED", "p2")]
            # Status subresource: main writes keep status, status writes keep spec.
            mg = "/apis/memoryguard.io/v1alpha1/namespaces/ns/memoryguards"
            await _call(s, "POST", mg, {"metadata": {"name": "g"}, "spec": {"a": 1}})
            await _call(s, "PATCH", mg + "/g/status", {"status": {"ok": True}, "spec": {"a": 2}})
            await _call(s, "PATCH", mg + "/g", {"status": {"ok": False}, "spec": {"a": 3}})
            g = api.get("memoryguards", "ns", "g")
            assert g is not None and g["spec"] == {"a": 3} and g["status"] == {"ok": True}
            assert g["metadata"]["generation"] == 2  # only the spec change counted
            # Evictions honour PDBs: 429 while the budget is spent.
            api.put("poddisruptionbudgets", {"metadata": {"name": "b", "namespace": "ns"},
                                             "spec": {"minAvailable": 2, "selector": {"matchLabels": {"g": "a"}}}})
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p0"}}
            st, doc = await _call(s, "POST", PODS + "/p0/eviction", body, "application/json")
            assert st == 429 and "disruption budget" in doc["message"]
            st, _ = await _call(s, "POST", PODS + "/p2/eviction", {**body, "metadata": {"name": "p2"}},
                                "application/json")
            assert st == 201 and api.get("pods", "ns", "p2") is None
            assert [e[1] for e in api.evictions] == ["p2"]
        await asyncio.sleep(0)
