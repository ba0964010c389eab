"""The chart's usual knobs (issue 26, 7) as helm renders them, and its alerts
under Prometheus' own rule tester (promtool, Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .test_chart import CHART, ROOT, render

PLATFORM = str(ROOT / "examples" / "values" / "platform.yaml")


def _kind(docs: list[dict[str, Any]], kind: str, *, name_has: str = "") -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and name_has in d["metadata"]["name"]]


def test_the_platform_knobs_reach_the_operator_and_its_hook(helm: str) -> None:
    docs = render(helm, "-f", PLATFORM)
    dep = _kind(docs, "Deployment")[0]
    pod = dep["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "memoryguard-operator"
    sa = _kind(docs, "ServiceAccount", name_has="memoryguard-operator")[0]
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith("role/memoryguard")
    # Overriding the uid keeps the rest of the restricted context.
    assert pod["securityContext"]["runAsUser"] == 1000680000
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HTTPS_PROXY"] == "http://proxy.internal:3128" and "MEMORYGUARD_METRICS_PORT" in env
    # Every binding names the ServiceAccount the pod runs as.
    for b in _kind(docs, "ClusterRoleBinding", name_has="cluster") + _kind(docs, "RoleBinding"):
        assert b["subjects"][0]["name"] == "memoryguard-operator", b["metadata"]["name"]
    pdb = _kind(docs, "PodDisruptionBudget")[0]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    hook = _kind(docs, "Job")[0]["spec"]["template"]["spec"]
    assert hook["imagePullSecrets"] == [{"name": "regcred"}] and hook["securityContext"]["runAsUser"] == 1000680000


def test_no_pdb_by_default_and_one_lease_per_release(helm: str) -> None:
    docs = render(helm)
    assert not _kind(docs, "PodDisruptionBudget")
    env = {e["name"]: e.get("value") for e in _kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    assert env["MEMORYGUARD_LEASE_NAME"] == "mg-memoryguard"


def test_an_existing_service_account_and_rbac_granted_by_the_admins(helm: str) -> None:
    docs = render(helm, "--set", "serviceAccount.create=false,serviceAccount.name=granted,rbac.create=false,"
                  "uninstallHook.enabled=false")
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, kinds
    assert _kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "granted"


def test_no_rbac_with_the_uninstall_hook_is_refused_with_what_to_do(helm: str) -> None:
    out = subprocess.run([helm, "template", "mg", str(CHART), "--set", "rbac.create=false"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "set uninstallHook.enabled=false too" in out.stderr, out.stderr


@pytest.mark.parametrize("bad", ["imagePullSecrets[0].nome=x", "serviceAccount.name=Not_A_Name",
                                 "podDisruptionBudget.maxUnavailable=half", "extraEnv[0].name=1BAD",
                                 "metrics.prometheusRule.runbookBaseURL=docs/runbooks.md"])
def test_the_new_values_are_checked_by_the_schema(helm: str, bad: str) -> None:
    out = subprocess.run([helm, "template", "mg", str(CHART), "--set", bad], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "schema" in out.stderr, out.stderr


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool not found: install Debian's prometheus package (.ci/run does)")
    return found


def _rules(helm: str, tmp: Path) -> Path:
    docs = render(helm, "-f", str(ROOT / "examples" / "values" / "prometheus-operator.yaml"),
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                  "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    rule = _kind(docs, "PrometheusRule")[0]
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_the_alerts_are_valid_rules_and_each_has_a_runbook(helm: str, promtool: str, tmp_path: Path) -> None:
    rules = _rules(helm, tmp_path)
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    alerts = [r for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]]
    assert len(alerts) == 5
    runbooks = (ROOT / "docs" / "runbooks.md").read_text().lower()
    for a in alerts:
        anchor = a["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor == a["alert"].lower() and f"## {anchor}" in runbooks, a["alert"]


def test_the_alerts_fire_when_they_should_and_only_then(helm: str, promtool: str, tmp_path: Path) -> None:
    _rules(helm, tmp_path)
    spec = tmp_path / "alerts_test.yaml"
    shutil.copy(Path(__file__).with_name("alerts_test.yaml"), spec)
    out = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_no_operator_down_alert_without_the_charts_scrape(helm: str) -> None:
    docs = render(helm, "--set", "metrics.prometheusRule.enabled=true",
                  "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    names = [r["alert"] for r in _kind(docs, "PrometheusRule")[0]["spec"]["groups"][0]["rules"]]
    assert "MemoryGuardOperatorDown" not in names and "MemoryGuardDegraded" in names
