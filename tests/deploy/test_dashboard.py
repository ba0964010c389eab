"""The chart's Grafana dashboard: every query is PromQL that Prometheus's
own checker takes (promtool, as each query made a recording rule), and
names only series the operator exports (its registry), so no panel stays
empty for want of a metric that was renamed or never existed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from memoryguard_kuberay.core import heatmap
from memoryguard_kuberay.operator.metrics import OperatorMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "memoryguard" / "files" / "dashboard.json"


def _queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]


def _exported() -> set[str]:
    names = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for metric in OperatorMetrics().registry.collect():
        # Series of a labelled metric exist once a label set is used: named from its type.
        names.update(metric.name + s for s in suffixes.get(metric.type, ("",)))
    return names


def test_every_query_names_only_series_the_operator_exports() -> None:
    exported = _exported()
    for title, expr in _queries():
        used = set(re.findall(r"\bmemoryguard_[a-z_]+", expr))
        assert used and used <= exported, (title, used - exported)


def test_the_heat_map_panel_rows_are_groups_coloured_by_time_to_oom() -> None:
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] == "status-history")
    assert "memoryguard_group_projected_oom_seconds" in panel["targets"][0]["expr"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    # The bands and colours of core/heatmap.py (simulate's and top's heat maps): one scale everywhere.
    bands = [(None, heatmap.BANDS[0][2])] + [(int(upper * 3600), colour) for (upper, _, _), (_, _, colour)
                                             in zip(heatmap.BANDS, heatmap.BANDS[1:])]
    assert [(s["value"], s["color"]) for s in steps] == bands


def test_every_query_is_promql_promtool_accepts(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus) is not installed; .ci/run installs it")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr.replace("$namespace", ".*")}
        for i, (_, expr) in enumerate(_queries())]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
