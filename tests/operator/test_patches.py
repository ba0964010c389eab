"""Remediation and injection patches on KubeRay's own sample RayClusters:
the exact JSON patch, applied, still valid against the RayCluster CRD."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from memoryguard_kuberay.devkit.emulator.patching import json_patch
from memoryguard_kuberay.devkit.emulator.schema import to_json_schema
from memoryguard_kuberay.operator.guardspec import Jemalloc, SidecarInjection, Spilling
from memoryguard_kuberay.operator.rayclusters import injection, patches

KUBERAY = Path(__file__).resolve().parents[3] / "shared" / "kuberay"
SAMPLES = ["ray-cluster.sample.yaml", "ray-cluster.complete.yaml", "ray-cluster.autoscaler.yaml"]


def _load(name: str) -> dict[str, Any]:
    if not (KUBERAY / name).exists():
        pytest.skip("KubeRay's files are not beside this checkout")
    docs = [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]
    return dict(next(d for d in docs if d.get("kind") in ("RayCluster", "CustomResourceDefinition")))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    crd = _load("ray.io_rayclusters.yaml")
    return jsonschema.Draft7Validator(to_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))


def test_jemalloc_auto_exact_patch_on_the_sample(validator: jsonschema.Draft7Validator) -> None:
    rc = _load("ray-cluster.sample.yaml")
    env = patches.jemalloc_env(Jemalloc(), None)
    ops = patches.remediation_patch(rc, "workergroup", env, record="GrowthPlateau on w-1")
    base = "/spec/workerGroupSpecs/0/template/spec/containers/0"
    assert ops == [
        {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "workergroup"},
        {"op": "add", "path": f"{base}/env", "value": [
            {"name": "LD_PRELOAD", "value": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
            {"name": "MALLOC_CONF", "value": "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"}]},
        {"op": "add", "path": "/metadata/annotations", "value": {"memoryguard.io/remediation": json.dumps(
            {"workergroup": {"LD_PRELOAD": "GrowthPlateau on w-1", "MALLOC_CONF": "GrowthPlateau on w-1"}},
            sort_keys=True, separators=(",", ":")), "memoryguard.io/remediation-previous": json.dumps(
            {"workergroup": {"LD_PRELOAD": None, "MALLOC_CONF": None}}, sort_keys=True, separators=(",", ":"))}},
    ]
    after = json_patch(rc, ops)
    assert list(validator.iter_errors(after)) == []
    # Applied twice: nothing more to do.
    assert patches.remediation_patch(after, "workergroup", env, record="again") == []


@pytest.mark.parametrize("before_env", [None, [], [{"name": "LD_PRELOAD", "value": "/opt/other.so"},
                                                  {"name": "KEEP", "value": "1"},
                                                  {"name": "MALLOC_CONF", "valueFrom": {"configMapKeyRef": {
                                                      "name": "c", "key": "k"}}}]])
def test_a_revert_gives_back_exactly_what_the_template_had(validator: jsonschema.Draft7Validator,
                                                           before_env: Any) -> None:
    rc = _load("ray-cluster.sample.yaml")
    c = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    if before_env is None:
        c.pop("env", None)
    else:
        c["env"] = before_env
    original = copy.deepcopy(rc)
    env = patches.jemalloc_env(Jemalloc(), "/opt/other.so" if before_env else None)
    patched = json_patch(rc, patches.remediation_patch(rc, "workergroup", env, record="GrowthPlateau on w-1"))
    ops = patches.revert_patch(patched, "workergroup", env)
    assert isinstance(ops, list)
    reverted = json_patch(patched, ops)
    assert list(validator.iter_errors(reverted)) == []
    got = reverted["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].get("env")
    assert got == (before_env or None)  # an empty env and none are one
    assert {k: v for k, v in reverted["metadata"].get("annotations", {}).items()
            if not k.startswith("memoryguard.io/")} == (original["metadata"].get("annotations") or {})
    assert json.loads(reverted["metadata"]["annotations"]["memoryguard.io/remediation"]) == {}


def test_a_revert_leaves_a_value_someone_changed_since() -> None:
    rc = _load("ray-cluster.sample.yaml")
    env = patches.jemalloc_env(Jemalloc(), None)
    patched = json_patch(rc, patches.remediation_patch(rc, "workergroup", env, record="r"))
    patched["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"][1]["value"] = "narenas:2"
    why = patches.revert_patch(patched, "workergroup", env)
    assert why == "MALLOC_CONF in group workergroup is no longer what MemoryGuard set: left as it is"
    # Without the record of what was before (an annotation removed), nothing is guessed.
    del patched["metadata"]["annotations"]["memoryguard.io/remediation-previous"]
    assert "does not say what group workergroup had before" in str(patches.revert_patch(patched, "workergroup", env))


def test_spilling_and_existing_env_and_preload() -> None:
    rc = _load("ray-cluster.sample.yaml")
    c = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "LD_PRELOAD", "value": "/opt/other.so"}, {"name": "KEEP", "value": "1"}]
    env = {**patches.jemalloc_env(Jemalloc(), "/opt/other.so"), **patches.spilling_env(Spilling())}
    assert env["LD_PRELOAD"] == "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:/opt/other.so"
    assert json.loads(env["RAY_object_spilling_config"]) == {"type": "filesystem",
                                                             "params": {"directory_path": ["/tmp/ray-spill"]}}
    after = json_patch(rc, patches.remediation_patch(rc, "workergroup", env, record="x"))
    got = {e["name"]: e["value"] for e in after["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
        "env"]}
    assert got["KEEP"] == "1" and got["RAY_object_spilling_threshold"] == "0.8"
    assert got["RAY_min_spilling_size"] == str(100 * 1024 * 1024)


def test_unknown_group_is_no_patch() -> None:
    assert patches.remediation_patch(_load("ray-cluster.sample.yaml"), "nope", {"A": "b"}, record="x") == []


@pytest.mark.parametrize("name", SAMPLES)
def test_inject_keeps_every_sample_valid_and_removal_restores_it(name: str,
                                                                 validator: jsonschema.Draft7Validator) -> None:
    rc = _load(name)
    original = copy.deepcopy(rc)
    injected = json_patch(rc, injection.inject_patch(rc, SidecarInjection(), include_head=True))
    assert list(validator.iter_errors(injected)) == []
    for _, _, tpl in patches.templates(injected):
        names = [c["name"] for c in tpl["spec"]["containers"]]
        assert names.count(injection.SIDECAR_NAME) == 1 and names[0] != injection.SIDECAR_NAME
        assert tpl["spec"]["shareProcessNamespace"] is True
        side = tpl["spec"]["containers"][-1]
        shm = next(m for m in side["volumeMounts"] if m["mountPath"] == "/dev/shm")
        assert shm["name"] in {v["name"] for v in tpl["spec"]["volumes"]}
        assert side["env"][0]["valueFrom"]["resourceFieldRef"]["containerName"] == tpl["spec"]["containers"][0]["name"]
    assert injection.inject_patch(injected, SidecarInjection(), include_head=True) == []  # idempotent
    assert json_patch(injected, injection.uninject_patch(injected)) == original


def test_a_head_no_guard_polls_gets_no_sidecar() -> None:
    rc = _load("ray-cluster.sample.yaml")
    injected = json_patch(rc, injection.inject_patch(rc, SidecarInjection()))
    head = injected["spec"]["headGroupSpec"]["template"]["spec"]
    assert injection.SIDECAR_NAME not in [c["name"] for c in head["containers"]]
    assert all(injection.SIDECAR_NAME in [c["name"] for c in g["template"]["spec"]["containers"]]
               for g in injected["spec"]["workerGroupSpecs"])


@pytest.mark.parametrize("param,port", [
    (None, 8080),  # KubeRay's DefaultMetricsPort, which it writes where none is given
    ("9090", 9090), (9091, 9091), ("'9092'", 9092),
    ("0", 8080), ("70000", 8080), ("$(PORT)", 8080), (True, 8080), (["1"], 8080),  # no port: Ray refuses it
])
def test_the_sidecar_reads_ray_metrics_where_kuberay_starts_them(param: Any, port: int) -> None:
    """The object store's figures come from the raylet's Prometheus port:
    the group's ``metrics-export-port`` where its rayStartParams set one."""
    rc = _load("ray-cluster.sample.yaml")
    group = rc["spec"]["workerGroupSpecs"][0]
    if param is not None:
        group.setdefault("rayStartParams", {})["metrics-export-port"] = param
    rc["spec"]["headGroupSpec"].setdefault("rayStartParams", {})["metrics-export-port"] = "7070"
    injected = json_patch(rc, injection.inject_patch(rc, SidecarInjection(), include_head=True))

    def url(spec: dict[str, Any]) -> str:
        side = next(c for c in spec["containers"] if c["name"] == injection.SIDECAR_NAME)
        return next(e["value"] for e in side["env"] if e["name"] == "MEMORYGUARD_RAY_METRICS_URL")

    assert url(injected["spec"]["workerGroupSpecs"][0]["template"]["spec"]) == f"http://127.0.0.1:{port}/metrics"
    assert url(injected["spec"]["headGroupSpec"]["template"]["spec"]) == "http://127.0.0.1:7070/metrics"


@pytest.mark.parametrize("container,pod,expected", [
    ({}, {}, (1000, 100)),  # Ray's images: user ray, uid 1000, gid 100 ("users")
    ({"runAsUser": 2000, "runAsGroup": 3000}, {}, (2000, 3000)),
    ({}, {"runAsUser": 1234, "runAsGroup": 5678}, (1234, 5678)),
    ({"runAsUser": 2000}, {"runAsGroup": 42}, (2000, 42)),
    ({"runAsUser": 0, "runAsGroup": 0}, {}, (1000, 100)),  # never root
    ({"runAsUser": True, "runAsGroup": "7"}, {}, (1000, 100)),
])
def test_the_sidecar_runs_as_the_ray_containers_uid_and_gid(container: dict[str, Any], pod: dict[str, Any],
                                                            expected: tuple[int, int]) -> None:
    """The kernel lets the sidecar read /proc/<pid>/root of the Ray processes
    only with their uid AND gid (seen on a real kubelet: 1000:1000 beside
    Ray's 1000:100 was refused every file)."""
    rc = _load("ray-cluster.sample.yaml")
    group = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    group["containers"][0]["securityContext"] = container
    group["securityContext"] = pod
    injected = json_patch(rc, injection.inject_patch(rc, SidecarInjection()))
    side = injected["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][-1]
    ctx = side["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"]) == expected and ctx["runAsNonRoot"] is True


def test_a_stale_patch_is_refused() -> None:
    from memoryguard_kuberay.devkit.emulator.patching import PatchError

    rc = _load("ray-cluster.sample.yaml")
    ops = patches.remediation_patch(rc, "workergroup", {"A": "b"}, record="x")
    rc["spec"]["workerGroupSpecs"][0]["groupName"] = "renamed"  # someone else changed the list meanwhile
    with pytest.raises(PatchError, match="test failed"):
        json_patch(rc, ops)


def test_the_pods_remediation_env_is_read_by_the_names_the_remediations_set() -> None:
    """podinfo reads a pod's remediation env by name (the review tells the
    remediated template by it): every variable a remediation sets is read,
    and no other name (a hostile pod's are not kept: issue 44, 1)."""
    from memoryguard_kuberay.operator.api import podinfo

    names = {*patches.jemalloc_env(Jemalloc(), None), *patches.spilling_env(Spilling()), *patches.CALL_SITES_ENV}
    assert names == podinfo.REMEDY_ENV_NAMES, names
