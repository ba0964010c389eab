"""Contract tests: the emulated API behaves as a real kube-apiserver with
kube-controller-manager did (FACTS.md, "A real control plane", seen with
1.36). One test per behaviour, named after it; the operator's end-to-end
tests and the fault matrix run on this emulator, so what it gets wrong they
would get wrong too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from memoryguard_kuberay.devkit.emulator import schema
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import load_crds

from ..devworld import ROOT, kuberay_file

PODS = "/api/v1/namespaces/ns/pods"
PDBS = "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"
GUARDS = "/apis/memoryguard.io/v1alpha1/namespaces/ns/memoryguards"
OWNER = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "u-rc", "controller": True}]
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@pytest.fixture
async def served() -> AsyncIterator[tuple[EmulatedApi, aiohttp.ClientSession]]:
    api = EmulatedApi()
    load_crds(api, kuberay_file("ray.io_rayclusters.yaml"))
    async with api, EmulatorServer(api, host="127.0.0.1") as server, aiohttp.ClientSession(
            f"http://127.0.0.1:{server.port}") as s:
        yield api, s


async def _call(s: aiohttp.ClientSession, method: str, path: str, body: Any = None,
                ctype: str = "application/json") -> tuple[int, Any, aiohttp.ClientResponse]:
    async with s.request(method, path, data=None if body is None else json.dumps(body),
                         headers={"Content-Type": ctype}) as r:
        return r.status, await r.json(content_type=None), r


def _pod(api: EmulatedApi, name: str, *, bound: bool = True, ready: bool = True) -> None:
    api.put("pods", {"metadata": {"name": name, "namespace": "ns", "labels": {"g": "w"}, "ownerReferences": OWNER},
                     "spec": {"nodeName": "n1"} if bound else {}, "status": READY if ready else {"phase": "Pending"}})


def _evict(name: str, dry_run: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if dry_run:
        body["deleteOptions"] = {"dryRun": ["All"]}
    return body


async def test_eviction_of_a_bound_pod_is_graceful(served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    _pod(api, "bound")
    _pod(api, "unbound", bound=False)
    st, _, _ = await _call(s, "POST", f"{PODS}/bound/eviction", _evict("bound"))
    pod = api.get("pods", "ns", "bound")
    assert st == 201 and pod is not None and pod["metadata"]["deletionTimestamp"]  # Terminating, still listed
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    st, _, _ = await _call(s, "POST", f"{PODS}/unbound/eviction", _evict("unbound"))
    assert st == 201 and api.get("pods", "ns", "unbound") is None  # no node: gone at once


async def test_dry_run_eviction_answers_201_and_keeps_the_pod(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    _pod(api, "p", bound=False)
    st, _, _ = await _call(s, "POST", f"{PODS}/p/eviction", _evict("p", dry_run=True))
    assert st == 201 and api.get("pods", "ns", "p") is not None and api.evictions == []


async def test_max_unavailable_pdb_over_raycluster_pods_fails_to_sync_and_refuses_every_eviction(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    for i in range(3):
        _pod(api, f"p{i}")
    await _call(s, "POST", PDBS, {"metadata": {"name": "mu"},
                                  "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"g": "w"}}}})
    status = (api.get("poddisruptionbudgets", "ns", "mu") or {})["status"]
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"
    assert "does not implement the scale subresource" in status["conditions"][0]["message"]
    st, doc, _ = await _call(s, "POST", f"{PODS}/p0/eviction", _evict("p0"))
    assert st == 429 and "disruption budget" in doc["message"]
    assert "The disruption budget mu" in doc["details"]["causes"][0]["message"]


async def test_integer_min_available_works_for_any_pods_and_the_eviction_spends_it(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    for i in range(3):
        _pod(api, f"p{i}")
    await _call(s, "POST", PDBS, {"metadata": {"name": "ma"},
                                  "spec": {"minAvailable": 2, "selector": {"matchLabels": {"g": "w"}}}})
    status = (api.get("poddisruptionbudgets", "ns", "ma") or {})["status"]
    assert (status["disruptionsAllowed"], status["currentHealthy"], status["desiredHealthy"]) == (1, 3, 2)
    st, _, _ = await _call(s, "POST", f"{PODS}/p0/eviction", _evict("p0"))
    assert st == 201
    # p0 is Terminating (bound): no longer healthy, so the budget is spent.
    assert (api.get("poddisruptionbudgets", "ns", "ma") or {})["status"]["disruptionsAllowed"] == 0
    st, _, _ = await _call(s, "POST", f"{PODS}/p1/eviction", _evict("p1"))
    assert st == 429
    api.remove("pods", "ns", "p0")  # the kubelet is done with it, and a replacement is ready
    _pod(api, "p3")
    assert (api.get("poddisruptionbudgets", "ns", "ma") or {})["status"]["disruptionsAllowed"] == 1


async def test_cel_rules_of_our_crd_are_evaluated_after_defaulting(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    _, s = served
    st, doc, _ = await _call(s, "POST", GUARDS, {"metadata": {"name": "g"}, "spec": {"clusterSelector": {}}})
    assert st == 422 and "clusterSelector needs names or matchLabels" in doc["message"]
    st, doc, _ = await _call(s, "POST", GUARDS, {"metadata": {"name": "g"}, "spec": {
        "clusterSelector": {"names": ["a"]}, "sidecar": {"inject": True, "port": 9200}}})
    assert st == 422 and "sidecar.port and sampling.sidecarPort must agree" in doc["message"]  # sampling defaulted


def test_a_rule_that_does_not_compile_refuses_the_crd() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "memoryguard.io_memoryguards.yaml").read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "self.names.exists(", "message": "broken"}]
    with pytest.raises(Exception, match="does not compile"):
        EmulatedApi().add_crd(crd)


async def test_unknown_fields_are_pruned_with_a_warning_or_refused_under_strict(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    body = {"metadata": {"name": "g"}, "spec": {"clusterSelector": {"names": ["a"]}, "bogus": 1}}
    st, _, r = await _call(s, "POST", GUARDS + "?fieldValidation=Strict", body)
    assert st == 400 and api.get("memoryguards", "ns", "g") is None
    st, doc, r = await _call(s, "POST", GUARDS, body)
    assert st == 201 and "bogus" not in doc["spec"]
    assert r.headers.getall("Warning") == ['299 - "unknown field \\"spec.bogus\\""']


async def test_schema_defaults_are_filled_in_on_every_write(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    _, s = served
    st, doc, _ = await _call(s, "POST", GUARDS, {"metadata": {"name": "g"}, "spec": {"clusterSelector": {
        "names": ["a"]}}})
    assert st == 201 and doc["spec"]["sampling"] == {"intervalSeconds": 15, "sidecarPort": 9108, "timeoutSeconds": 5}
    assert doc["spec"]["rotation"]["evictionTimeoutSeconds"] == 600


def test_an_integer_passes_a_fractional_minimum_as_on_the_real_server() -> None:
    # go-openapi checks an integer against int64(minimum): 0 passes 0.1.
    plain = {"type": "object", "properties": {"t": {"type": "number", "minimum": 0.1}}}
    assert schema.openapi_errors({"t": 0}, plain) == []
    assert schema.openapi_errors({"t": 0.05}, plain) != []


async def test_an_event_for_an_object_of_another_namespace_is_refused(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    _, s = served
    event = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
             "reason": "X", "message": "m"}
    st, doc, _ = await _call(s, "POST", "/api/v1/namespaces/ns/events", event)
    assert st == 422 and "does not match event.namespace" in doc["message"]
    event["involvedObject"]["namespace"] = "ns"
    st, _, _ = await _call(s, "POST", "/api/v1/namespaces/ns/events", event)
    assert st == 201


async def test_request_bodies_up_to_3_mib_are_read_and_larger_ones_refused(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    # kube-apiserver MaxRequestBodyBytes: 3 MiB (kmock's aiohttp alone would stop at 1 MiB).
    _, s = served
    over = {"metadata": {"name": "huge"}, "data": {"a": "x" * (3 * 1024 * 1024)}}
    async with s.request("POST", "/api/v1/namespaces/ns/configmaps", data=json.dumps(over),
                         headers={"Content-Type": "application/json"}) as r:
        assert r.status == 413


async def test_a_configmap_over_1_mib_is_refused(served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    # k8s ValidateConfigMap: keys and values together at most core.MaxSecretSize (1 MiB).
    _, s = served
    big = {"metadata": {"name": "big"}, "data": {"a.json": "x" * (1024 * 1024)}}
    st, doc, _ = await _call(s, "POST", "/api/v1/namespaces/ns/configmaps", big)
    assert st == 422 and "must have at most 1048576 bytes" in doc["message"]
    fits = {"metadata": {"name": "fits", "labels": {"k": "v"}}, "data": {"a.json": "x" * (256 * 1024)}}
    st, _, _ = await _call(s, "POST", "/api/v1/namespaces/ns/configmaps", fits)
    assert st == 201
    st, doc, _ = await _call(s, "GET", "/api/v1/namespaces/ns/configmaps?labelSelector=k%3Dv", None)
    assert st == 200 and [i["metadata"]["name"] for i in doc["items"]] == ["fits"]


async def test_an_unready_pod_is_evicted_without_the_budget_only_while_the_budget_is_met(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    api, s = served
    for i in range(3):
        _pod(api, f"p{i}")
    api.put("pods", {"metadata": {"name": "sick", "namespace": "ns", "labels": {"g": "w"}, "ownerReferences": OWNER},
                     "spec": {"nodeName": "n1"}, "status": {"phase": "Running", "conditions": [
                         {"type": "Ready", "status": "False"}]}})
    await _call(s, "POST", PDBS, {"metadata": {"name": "ma"},
                                  "spec": {"minAvailable": 4, "selector": {"matchLabels": {"g": "w"}}}})
    st, _, _ = await _call(s, "POST", f"{PODS}/sick/eviction", _evict("sick"))
    assert st == 429  # 3 healthy of 4 needed: the unready pod goes through the budget, and none is left
    await _call(s, "PATCH", f"{PDBS}/ma", {"spec": {"minAvailable": 3}}, "application/merge-patch+json")
    st, _, _ = await _call(s, "POST", f"{PODS}/sick/eviction", _evict("sick"))
    assert st == 201  # the budget is met: an unready pod costs it nothing (IfHealthyBudget)
    assert (api.get("poddisruptionbudgets", "ns", "ma") or {})["status"]["disruptionsAllowed"] == 0


async def test_a_list_read_in_pages_is_one_snapshot_and_its_token_expires_with_a_compaction(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    """limit/continue, as the real server pages a LIST (kubernetes.io docs,
    "Retrieving large results sets in chunks"): every page of one list comes
    from the revision of its first page and carries that resourceVersion;
    what changed since shows in a watch from it, not in the pages; a token
    past a compaction answers 410 Expired; under a selector there is no
    remainingItemCount."""
    api, s = served
    for i in range(5):
        _pod(api, f"p{i}")
    st, first, _ = await _call(s, "GET", PODS + "?limit=2&labelSelector=g%3Dw")
    assert st == 200 and [i["metadata"]["name"] for i in first["items"]] == ["p0", "p1"]
    assert first["metadata"]["continue"] and "remainingItemCount" not in first["metadata"]
    rv = first["metadata"]["resourceVersion"]
    api.remove("pods", "ns", "p3")  # after the first page: the pages do not see it
    _pod(api, "p5")
    names = []
    token = first["metadata"]["continue"]
    while token:
        st, page, _ = await _call(s, "GET", PODS + f"?limit=2&labelSelector=g%3Dw&continue={token}")
        assert st == 200 and page["metadata"]["resourceVersion"] == rv
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["p2", "p3", "p4"]
    st, unselected, _ = await _call(s, "GET", PODS + "?limit=2")
    assert unselected["metadata"]["remainingItemCount"] == 3
    api.expire_history()
    st, doc, _ = await _call(s, "GET", PODS + f"?limit=2&continue={unselected['metadata']['continue']}")
    assert st == 410 and doc["reason"] == "Expired"


async def test_a_list_asked_for_as_partial_object_metadata_answers_metadata_only(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    """The Accept header of client-go's metadata client: the server answers
    a PartialObjectMetadataList, the objects' data never sent."""
    api, s = served
    api.put("configmaps", {"metadata": {"name": "big", "namespace": "ns", "labels": {"k": "v"}},
                           "data": {"a": "x" * 100_000}})
    async with s.get("/api/v1/namespaces/ns/configmaps?labelSelector=k%3Dv", headers={
            "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}) as r:
        doc = await r.json()
    assert doc["kind"] == "PartialObjectMetadataList" and doc["apiVersion"] == "meta.k8s.io/v1"
    assert [i["kind"] for i in doc["items"]] == ["PartialObjectMetadata"]
    assert doc["items"][0]["metadata"]["name"] == "big" and "data" not in doc["items"][0]


async def test_a_watch_under_a_selector_sees_objects_come_and_go_as_their_labels_change(
        served: tuple[EmulatedApi, aiohttp.ClientSession]) -> None:
    """The watch cache judges each change on the object before and after it
    (cacher/cache_watcher.go, convertToWatchEvent): coming to match is ADDED,
    ceasing to match is DELETED (the previous content at the event's
    resourceVersion), matching throughout is MODIFIED, never matching is
    not sent."""
    api, s = served
    api.put("pods", {"metadata": {"name": "p", "namespace": "ns", "labels": {"g": "w"}}})
    rv = api.rv
    api.put("pods", {"metadata": {"name": "p", "namespace": "ns", "labels": {"g": "w", "x": "1"}}})
    api.put("pods", {"metadata": {"name": "p", "namespace": "ns", "labels": {"g": "other"}}})
    api.put("pods", {"metadata": {"name": "p", "namespace": "ns", "labels": {"g": "other", "y": "2"}}})
    api.put("pods", {"metadata": {"name": "p", "namespace": "ns", "labels": {"g": "w"}}})
    async with s.get(PODS + f"?watch=true&labelSelector=g%3Dw&resourceVersion={rv}&timeoutSeconds=1") as r:
        events = [json.loads(line) for line in (await r.read()).splitlines() if line.strip()]
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED", "ADDED"]
    gone = events[1]["object"]
    assert gone["metadata"]["labels"] == {"g": "w", "x": "1"}  # what it was while it matched
    assert gone["metadata"]["resourceVersion"] == str(rv + 2)  # at the change that took it out
