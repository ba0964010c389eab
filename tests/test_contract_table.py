"""The emulated API's contracts, one table run against both backends
(issue 22, 6): the emulator (devkit) and the real kube-apiserver 1.36.2 of
../shared/realk8s. A row whose ``tolerated`` is set is a difference still
there; docs/facts.md lists it with why it is tolerated, and the test checks
the difference is real (so the list cannot go stale). The many behaviours
tested on the emulator alone are in tests/operator/test_emulator_real_server.py.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.devkit.emulator.api import ApiError, EmulatedApi
from memoryguard_kuberay.devkit.emulator.world import load_crds
from memoryguard_kuberay.operator import crd

from .devworld import kuberay_file, served_in_a_thread
from .realk8s.controlplane import Client

NS = "contracts"
GUARDS = f"/apis/memoryguard.io/v1alpha1/namespaces/{NS}/memoryguards"
PODS = f"/api/v1/namespaces/{NS}/pods"


@dataclasses.dataclass
class Backend:
    name: str
    client: Client
    create_crd: Callable[[dict[str, Any]], int]  # the answer's status


def _emulator() -> Iterator[Backend]:
    api = EmulatedApi()
    load_crds(api, kuberay_file("ray.io_rayclusters.yaml"))
    api.put("namespaces", {"metadata": {"name": NS}})

    def create_crd(doc: dict[str, Any]) -> int:
        try:
            api.add_crd(doc)
        except ApiError as e:
            return int(e.status)
        return 201

    with served_in_a_thread(api) as url:
        yield Backend("emulator", Client(url, "emulated", None), create_crd)


@pytest.fixture(params=["emulator", pytest.param("real", marks=pytest.mark.realk8s)], scope="module")
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "emulator":
        yield from _emulator()
        return
    real = request.getfixturevalue("real")
    api = real.admin()
    if api.get(f"/api/v1/namespaces/{NS}") is None:
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    mg = f"{C.PLURAL}.{C.GROUP}"
    if api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{mg}") is None:
        api.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.crd())
    real.wait_established(mg)
    import yaml

    rcs = "rayclusters.ray.io"  # KubeRay's own CRD, as the emulator loads it
    if api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{rcs}") is None:
        api.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
               yaml.safe_load(kuberay_file("ray.io_rayclusters.yaml").read_text()))
    real.wait_established(rcs)

    def create_crd(doc: dict[str, Any]) -> int:
        return int(api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)[0])

    yield Backend("real", api, create_crd)


def _guard(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


# -- the rows: each returns what it saw, to compare across backends ---------------------
def costly_cel_over_an_unbounded_string(b: Backend) -> Any:
    doc = copy.deepcopy(crd.crd())
    doc["metadata"]["name"] = "costlies.memoryguard.io"
    doc["spec"]["names"] = {"plural": "costlies", "kind": "Costly", "singular": "costly", "listKind": "CostlyList"}
    items = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "remediation"]["properties"]["spilling"]["properties"]["directories"]
    items.pop("maxItems")
    items["items"].pop("maxLength")  # the CRD as it was before issue 22: refused by the server's cost estimate
    return b.create_crd(doc)


def cel_rule_refusal_message(b: Backend) -> Any:
    status, doc, _ = b.client.call("POST", GUARDS, _guard("empty", {"clusterSelector": {}}))
    return status, "clusterSelector needs names or matchLabels" in str(doc)


def unknown_field_strict_and_not(b: Backend) -> Any:
    g = _guard("unknown", {"clusterSelector": {"names": ["rc"]}, "bogus": 1})
    strict, _, _ = b.client.call("POST", GUARDS, g, params={"fieldValidation": "Strict", "dryRun": "All"})
    lax, doc, headers = b.client.call("POST", GUARDS, g, params={"dryRun": "All"})
    warning = headers.get("Warning") or headers.get("warning") or ""
    return strict, lax, "bogus" in warning, "bogus" in (doc or {}).get("spec", {})


def defaults_filled_in(b: Backend) -> Any:
    status, doc, _ = b.client.call("POST", GUARDS, _guard("defaults", {"clusterSelector": {"names": ["rc"]}}),
                                   params={"dryRun": "All"})
    return status, doc["spec"]["sampling"], doc["spec"]["forensics"]


def stale_resource_version(b: Backend) -> Any:
    b.client.call("DELETE", f"{GUARDS}/stale")
    created = b.client.ok("POST", GUARDS, _guard("stale", {"clusterSelector": {"names": ["rc"]}}))
    b.client.merge(f"{GUARDS}/stale", {"metadata": {"labels": {"a": "b"}}})
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"a": "c"}}}
    status, _, _ = b.client.call("PATCH", f"{GUARDS}/stale", patch, ctype="application/merge-patch+json")
    b.client.call("DELETE", f"{GUARDS}/stale")
    return status


def failed_json_patch_test(b: Backend) -> Any:
    b.client.call("DELETE", f"{GUARDS}/tested")
    b.client.ok("POST", GUARDS, _guard("tested", {"clusterSelector": {"names": ["rc"]}}))
    status, _, _ = b.client.call("PATCH", f"{GUARDS}/tested", [
        {"op": "test", "path": "/spec/clusterSelector/names/0", "value": "other"},
        {"op": "replace", "path": "/spec/clusterSelector/names/0", "value": "x"}],
        ctype="application/json-patch+json")
    b.client.call("DELETE", f"{GUARDS}/tested")
    return status


def eviction_of_a_missing_pod(b: Backend) -> Any:
    return b.client.call("POST", f"{PODS}/absent/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "absent", "namespace": NS}})[0]


def event_in_another_namespace(b: Backend) -> Any:
    return b.client.call("POST", f"/api/v1/namespaces/{NS}/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "cross.1", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"}, "reason": "R", "message": "m",
        "type": "Normal"})[0]


def dry_run_eviction_keeps_the_pod(b: Backend) -> Any:
    b.client.call("DELETE", f"{PODS}/dry", {"gracePeriodSeconds": 0})
    b.client.ok("POST", PODS, _pod("dry"))
    status, _, _ = b.client.call("POST", f"{PODS}/dry/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "dry", "namespace": NS},
        "deleteOptions": {"dryRun": ["All"]}})
    kept = b.client.get(f"{PODS}/dry") is not None
    b.client.call("DELETE", f"{PODS}/dry", {"gracePeriodSeconds": 0})
    return status, kept


def eviction_of_an_unbound_pod_deletes_it_at_once(b: Backend) -> Any:
    b.client.ok("POST", PODS, _pod("unbound"))
    status, _, _ = b.client.call("POST", f"{PODS}/unbound/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "unbound", "namespace": NS}})
    return status, b.client.get(f"{PODS}/unbound") is None


def eviction_grace_period_over_the_pods_own(b: Backend) -> Any:
    # What a rotation asks once Ray accepted the drain (issue 58, 4): the
    # eviction's deleteOptions.gracePeriodSeconds, not the pod's 30.
    b.client.call("DELETE", f"{PODS}/graced", {"gracePeriodSeconds": 0})
    pod = _pod("graced")
    pod["spec"] |= {"nodeName": "n-absent", "terminationGracePeriodSeconds": 30}  # bound: deleted gracefully
    b.client.ok("POST", PODS, pod)
    status, _, _ = b.client.call("POST", f"{PODS}/graced/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "graced", "namespace": NS},
        "deleteOptions": {"gracePeriodSeconds": C.DRAINED_GRACE_SECONDS}})
    grace = (b.client.get(f"{PODS}/graced") or {}).get("metadata", {}).get("deletionGracePeriodSeconds")
    b.client.call("DELETE", f"{PODS}/graced", {"gracePeriodSeconds": 0})
    return status, grace


def whole_float_in_an_integer_field_read_by_cel(b: Backend) -> Any:
    g = _guard("floaty", {"clusterSelector": {"names": ["rc"]}, "policy": {"trendBucketSeconds": 900.0}})
    return b.client.call("POST", GUARDS, g, params={"dryRun": "All"})[0]


RCS = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def _raycluster(b: Backend, name: str) -> dict[str, Any]:
    import yaml

    sample = kuberay_file("ray-cluster.sample.yaml")
    if sample is None:
        pytest.skip("KubeRay's ray-cluster.sample.yaml is absent (read from ../shared/kuberay beside the checkout, "
                    "never copied into it): this row needs a RayCluster as KubeRay ships it")
    doc = next(d for d in yaml.safe_load_all(sample.read_text()) if d and d.get("kind") == "RayCluster")
    doc["metadata"] = {"name": name, "namespace": NS}
    b.client.call("DELETE", f"{RCS}/{name}")
    return dict(b.client.ok("POST", RCS, doc))


def json_patch_test_of_a_stale_resource_version(b: Backend) -> Any:
    # What the remediation patches guard themselves with (patches._unchanged).
    read = _raycluster(b, "rv")
    b.client.merge(f"{RCS}/rv", {"metadata": {"labels": {"a": "b"}}})
    op = [{"op": "add", "path": "/metadata/labels/c", "value": "d"}]
    stale, _, _ = b.client.call("PATCH", f"{RCS}/rv", [{"op": "test", "path": "/metadata/resourceVersion",
                                                        "value": read["metadata"]["resourceVersion"]}, *op],
                                ctype="application/json-patch+json")
    now = b.client.get(f"{RCS}/rv")
    fresh, _, _ = b.client.call("PATCH", f"{RCS}/rv", [{"op": "test", "path": "/metadata/resourceVersion",
                                                        "value": now["metadata"]["resourceVersion"]}, *op],
                                ctype="application/json-patch+json")
    b.client.call("DELETE", f"{RCS}/rv")
    return stale, fresh


def remediation_then_revert_gives_back_the_template(b: Backend) -> Any:
    from memoryguard_kuberay.operator.guardspec import Jemalloc
    from memoryguard_kuberay.operator.rayclusters import patches

    rc = _raycluster(b, "undo")
    before = copy.deepcopy(rc["spec"]["workerGroupSpecs"][0]["template"])
    env = patches.jemalloc_env(Jemalloc(), None)
    applied, patched, _ = b.client.call("PATCH", f"{RCS}/undo", patches.remediation_patch(
        rc, "workergroup", env, record="contract"), ctype="application/json-patch+json")
    ops = patches.revert_patch(patched, "workergroup", env)
    reverted, after, _ = b.client.call("PATCH", f"{RCS}/undo", ops, ctype="application/json-patch+json")
    b.client.call("DELETE", f"{RCS}/undo")
    return applied, reverted, after["spec"]["workerGroupSpecs"][0]["template"] == before


LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


def leases_as_the_shard_keeper_uses_them(b: Backend) -> Any:
    """shards.py: Leases created with a label, listed by it, renewed by a PUT
    of what was read (a stale one refused), deleted when a replica is gone."""
    from memoryguard_kuberay.operator.clock import micro_time

    for n in ("set-a-shard-0", "set-a-replica-x", "set-b-shard-0"):
        b.client.call("DELETE", f"{LEASES}/{n}")

    def lease(name: str, label: str) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": NS, "labels": {"memoryguard.io/lease-set": label}},
                "spec": {"holderIdentity": "x", "leaseDurationSeconds": 15, "renewTime": micro_time(1.8e9),
                         "acquireTime": micro_time(1.8e9), "leaseTransitions": 0}}

    created = b.client.call("POST", LEASES, lease("set-a-shard-0", "set-a"))[0]
    again = b.client.call("POST", LEASES, lease("set-a-shard-0", "set-a"))[0]
    b.client.ok("POST", LEASES, lease("set-a-replica-x", "set-a"))
    b.client.ok("POST", LEASES, lease("set-b-shard-0", "set-b"))
    listed = b.client.ok("GET", LEASES, params={"labelSelector": "memoryguard.io/lease-set=set-a"})
    names = sorted(i["metadata"]["name"] for i in listed["items"])
    read = b.client.ok("GET", f"{LEASES}/set-a-shard-0")
    renewed = {**read, "spec": {**read["spec"], "renewTime": micro_time(1.8e9 + 3)}}
    fresh = b.client.call("PUT", f"{LEASES}/set-a-shard-0", renewed)[0]
    stale = b.client.call("PUT", f"{LEASES}/set-a-shard-0", renewed)[0]  # the resourceVersion of before
    deleted = b.client.call("DELETE", f"{LEASES}/set-a-replica-x")[0]
    gone = b.client.call("GET", f"{LEASES}/set-a-replica-x")[0]

    def only_as(rv: str) -> dict[str, Any]:  # the last replica's delete of a free Lease (shards.close)
        return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": rv}}

    stale_delete = b.client.call("DELETE", f"{LEASES}/set-a-shard-0", only_as(read["metadata"]["resourceVersion"]))[0]
    now_rv = b.client.ok("GET", f"{LEASES}/set-a-shard-0")["metadata"]["resourceVersion"]
    delete_as_read = b.client.call("DELETE", f"{LEASES}/set-a-shard-0", only_as(now_rv))[0]
    for n in ("set-a-shard-0", "set-b-shard-0"):
        b.client.call("DELETE", f"{LEASES}/{n}")
    return created, again, names, fresh, stale, deleted, gone, stale_delete, delete_as_read


@dataclasses.dataclass(frozen=True)
class Row:
    check: Callable[[Backend], Any]
    expected: Any  # what the real server answered (seen on 1.36.2)
    tolerated: str = ""  # set: the emulator differs, and this is why that is tolerated (docs/facts.md)


ROWS = [
    Row(costly_cel_over_an_unbounded_string, 422),
    Row(cel_rule_refusal_message, (422, True)),
    Row(unknown_field_strict_and_not, (400, 201, True, False)),
    Row(defaults_filled_in, (201, {"intervalSeconds": 15, "sidecarPort": 9108, "timeoutSeconds": 5},
                             {"enabled": True, "keep": 20, "timeoutSeconds": 30})),
    Row(stale_resource_version, 409),
    Row(failed_json_patch_test, 422),
    Row(json_patch_test_of_a_stale_resource_version, (422, 200)),
    Row(remediation_then_revert_gives_back_the_template, (200, 200, True)),
    Row(eviction_of_a_missing_pod, 404),
    Row(leases_as_the_shard_keeper_uses_them,
        (201, 409, ["set-a-replica-x", "set-a-shard-0"], 200, 409, 200, 404, 409, 200)),
    Row(event_in_another_namespace, 422),
    Row(dry_run_eviction_keeps_the_pod, (201, True)),
    Row(eviction_of_an_unbound_pod_deletes_it_at_once, (201, True)),
    Row(eviction_grace_period_over_the_pods_own, (201, C.DRAINED_GRACE_SECONDS)),
    Row(whole_float_in_an_integer_field_read_by_cel, 422,
        tolerated="the emulator's CEL (cel-python) sees 900.0 as the integer the schema says; the server's CEL "
                  "sees the double as decoded and fails. The operator and the chart never send such a value; "
                  "the admission table (tests/realk8s/test_admission.py) checks the real answer"),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.check.__name__)
def test_contract(backend: Backend, row: Row) -> None:
    seen = row.check(backend)
    if backend.name == "emulator" and row.tolerated:
        assert seen != row.expected, f"the emulator now agrees: drop the tolerance ({row.tolerated})"
        return
    assert seen == row.expected, (backend.name, seen)
