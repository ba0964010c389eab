"""What a Ray pod gets at admission (issue 64): the pure decision
(admission.admit) on pods shaped as KubeRay makes them, for a RayCluster, a
RayService's cluster and a RayJob's; what is never touched. The webhook's
round trip through a real API server, with the real KubeRay, is in
tests/realk8s/test_pod_admission.py and tests/realpods/."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.rayclusters import admission, injection, patches
from memoryguard_kuberay.operator.rayclusters.admission import AdmissionReason as R

NS = "team-a"
IMAGE = "registry.invalid/memoryguard-sidecar:1"


def _guard(name: str, created: str = "2026-12-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    sidecar = {"inject": True, **spec.pop("sidecar", {})}  # the spec's default injects nothing
    return {"metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
            "spec": {"clusterSelector": {"names": ["rc"]}, "sidecar": sidecar, **spec}}


def _admitting(guard: dict[str, Any]) -> admission.Admitting:
    found = admission.Admitting.of(guard, sidecar_image=IMAGE, trust=None)
    assert found is not None
    return found


def _cluster(name: str = "rc", labels: dict[str, str] | None = None,
             owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": owner, "name": "svc", "uid": "u",
                                    "controller": True}]
    return {"metadata": meta, "spec": {}}


def _pod(kind: str = "worker", group: str = "workers", cluster: str = "rc", **extra: Any) -> dict[str, Any]:
    """A pod as KubeRay 1.7 makes it: its labels, the Ray container first
    with its metrics port, the wait-gcs-ready init container on workers."""
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"{cluster}-{group}-", "namespace": NS,
                     "labels": {C.LABEL_CLUSTER: cluster, C.LABEL_NODE_TYPE: kind, C.LABEL_GROUP: group,
                                C.LABEL_IS_RAY_NODE: "yes"}},
        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0",
                                 "resources": {"limits": {"memory": "2Gi"}},
                                 "ports": [{"name": "metrics", "containerPort": 8080}]}],
                 "initContainers": [{"name": "wait-gcs-ready", "image": "rayproject/ray:2.9.0"}]}}
    pod["spec"].update(extra)
    return pod


def _applied(pod: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(pod), ops)


@pytest.mark.parametrize("pod, cluster, guards, reason", [
    # A worker of a guarded RayCluster: the sidecar.
    (_pod(), _cluster(), [_guard("g")], R.INJECTED),
    # A RayService's cluster, selected by the label KubeRay puts on it: the
    # same, though its templates are KubeRay's to write.
    (_pod(cluster="svc-raycluster-x"), _cluster("svc-raycluster-x", {"ray.io/originated-from-cr-name": "svc"},
                                                "RayService"),
     [_guard("g", clusterSelector={"matchLabels": {"ray.io/originated-from-cr-name": "svc"}})], R.INJECTED),
    # A RayJob's submitter (a Job's pod) carries no node type: never a Ray node.
    ({"metadata": {"labels": {C.LABEL_CLUSTER: "rc"}}, "spec": {"containers": [{"name": "submit"}]}},
     _cluster(), [_guard("g")], R.NOT_A_RAY_NODE),
    ({"metadata": {}, "spec": {"containers": [{"name": "nginx"}]}}, None, [_guard("g")], R.NOT_A_RAY_NODE),
    (_pod(), None, [_guard("g")], R.NO_CLUSTER),
    (_pod(), _cluster(), [], R.NOT_SELECTED),  # no guard in the namespace
    (_pod(), _cluster(), [_guard("g", clusterSelector={"names": ["other"]})], R.NOT_SELECTED),
    (_pod(kind="head", group="headgroup"), _cluster(), [_guard("g")], R.GROUP_NOT_GUARDED),  # includeHead false
    (_pod(kind="head", group="headgroup"), _cluster(), [_guard("g", includeHead=True)], R.INJECTED),
    (_pod(group="cpu"), _cluster(), [_guard("g", workerGroups=["gpu"])], R.GROUP_NOT_GUARDED),
])
def test_which_pods_get_the_sidecar(pod: dict[str, Any], cluster: dict[str, Any] | None,
                                    guards: list[dict[str, Any]], reason: R) -> None:
    out = admission.admit(pod, cluster, [_admitting(g) for g in guards], native=True)
    assert out.reason is reason, out.message
    assert bool(out.ops) == (reason is R.INJECTED)
    assert out.message  # a sentence for the log, always


def test_the_admitted_pod_carries_the_sidecar_as_a_template_would() -> None:
    pod = _pod()
    out = admission.admit(pod, _cluster(), [_admitting(_guard("g"))], native=True)
    got = _applied(pod, out.ops)
    # The native sidecar after KubeRay's own init container, at the Ray
    # container's uid and gid, reading the raylet's metrics port of this pod.
    assert [c["name"] for c in got["spec"]["initContainers"]] == ["wait-gcs-ready", injection.SIDECAR_NAME]
    sidecar = got["spec"]["initContainers"][1]
    assert sidecar["restartPolicy"] == "Always" and sidecar["image"] == IMAGE
    assert {"name": C.ENV_RAY_METRICS_URL, "value": C.ray_metrics_url(8080)} in sidecar["env"]
    assert got["spec"]["shareProcessNamespace"] is True
    assert {v["name"] for v in got["spec"]["volumes"]} == {injection.SHM_VOLUME, injection.NO_TOKEN_VOLUME,
                                                          injection.PRESSURE_VOLUME}
    assert got["metadata"]["annotations"] == {C.ANN_INJECTED: "shareProcessNamespace"}
    # Nothing of the pod's own is changed: its labels, the Ray container's image and limits.
    assert got["metadata"]["labels"] == pod["metadata"]["labels"]
    ray = got["spec"]["containers"][0]
    assert (ray["image"], ray["resources"]) == (pod["spec"]["containers"][0]["image"],
                                                pod["spec"]["containers"][0]["resources"])
    # Without native sidecars: a second container, after the Ray container.
    old = _applied(pod, admission.admit(pod, _cluster(), [_admitting(_guard("g"))], native=False).ops)
    assert [c["name"] for c in old["spec"]["containers"]] == ["ray-worker", injection.SIDECAR_NAME]


def test_a_pod_admitted_twice_gets_one_sidecar() -> None:
    # The API server may call a webhook again (reinvocation, or two
    # releases); a pod whose template had the sidecar gets none more.
    guards = [_admitting(_guard("g"))]
    once = _applied(_pod(), admission.admit(_pod(), _cluster(), guards, native=True).ops)
    again = admission.admit(once, _cluster(), guards, native=True)
    assert again.reason is R.HAS_SIDECAR and not again.ops


def test_the_metrics_port_is_the_pods_own() -> None:
    pod = _pod()
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9999}]
    assert admission.pod_metrics_port(pod) == 9999
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": "x"}]  # a tenant's nonsense
    assert admission.pod_metrics_port(pod) == C.RAY_METRICS_PORT


def test_of_two_guards_the_older_has_the_pod() -> None:
    older = _admitting(_guard("old", "2026-11-01T00:00:00Z", sidecar={"port": 9200}, sampling={"sidecarPort": 9200}))
    newer = _admitting(_guard("new", "2026-12-01T00:00:00Z"))
    out = admission.admit(_pod(), _cluster(), [newer, older], native=True)
    assert out.guard == "old"
    assert _applied(_pod(), out.ops)["spec"]["initContainers"][1]["ports"][0]["containerPort"] == 9200


@pytest.mark.parametrize("guard", [
    _guard("off", sidecar={"inject": False}),
    _guard("bad", policy={"criticalPercent": 500}),  # an invalid spec guards nothing
    {**_guard("going"), "metadata": {**_guard("going")["metadata"], "deletionTimestamp": "2026-12-07T00:00:00Z"}},
])
def test_a_guard_that_injects_nothing_is_not_indexed(guard: dict[str, Any]) -> None:
    assert admission.Admitting.of(guard, sidecar_image=IMAGE, trust=None) is None


# -- the remediations' env (issue 64, 4) --------------------------------------------------------
JEMALLOC = {"remediation": {"jemalloc": {"mode": "auto"}, "spilling": {"mode": "auto"}}}


def _remedy(kind: str, guard: admission.Admitting, cluster: dict[str, Any], **change: Any) -> dict[str, Any]:
    body = patches.remedy_configmap_body(cluster, patches.remedy_configmap("rc", "workers", kind), kind,
                                         patches.wanted_env(guard.spec, kind))
    body.update(change)
    return body


def test_a_remediated_groups_new_pods_read_its_configmaps() -> None:
    guard = _admitting(_guard("g", **JEMALLOC))
    cluster = {**_cluster(owner="RayService"), "metadata": {**_cluster(owner="RayService")["metadata"],
                                                           "uid": "rc-uid"}}
    wanted = admission.remedies(_pod(), cluster, [guard])
    assert sorted(wanted) == sorted(patches.remedy_configmap("rc", "workers", k) for k in ("jemalloc", "spilling"))
    found = {name: _remedy(kind, guard, cluster) for kind in ("jemalloc", "spilling")
             for name in [patches.remedy_configmap("rc", "workers", kind)]}
    out = admission.admit(_pod(), cluster, [guard], native=True, configmaps=found)
    ray = _applied(_pod(), out.ops)["spec"]["containers"][0]
    assert [r["configMapRef"]["name"] for r in ray["envFrom"]] == sorted(found)
    assert all(r["configMapRef"]["optional"] for r in ray["envFrom"])
    # Only those of the remediations applied: none before its ConfigMap exists.
    bare = admission.admit(_pod(), cluster, [guard], native=True, configmaps={})
    assert "envFrom" not in _applied(_pod(), bare.ops)["spec"]["containers"][0]
    # The head is never remediated.
    assert admission.remedies(_pod(kind="head", group="headgroup"), cluster, [guard]) == {}


@pytest.mark.parametrize("change", [
    {"data": {"LD_PRELOAD": "/tmp/evil.so", "MALLOC_CONF": "x"}},  # planted or changed since: not the spec's env
    {"metadata": {"name": "x", "ownerReferences": [{"kind": "RayCluster", "uid": "another-uid"}]}},  # not ours
    {"metadata": {"name": "x"}},  # owned by nobody
])
def test_a_configmap_that_is_not_the_operators_reaches_no_pod(change: dict[str, Any]) -> None:
    guard = _admitting(_guard("g", **JEMALLOC))
    cluster = {**_cluster(), "metadata": {**_cluster()["metadata"], "uid": "rc-uid"}}
    name = patches.remedy_configmap("rc", "workers", "jemalloc")
    out = admission.admit(_pod(), cluster, [guard], native=True,
                          configmaps={name: _remedy("jemalloc", guard, cluster, **change)})
    assert "envFrom" not in _applied(_pod(), out.ops)["spec"]["containers"][0]
