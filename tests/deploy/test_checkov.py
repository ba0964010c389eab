"""checkov (installed by .ci/checkov in its own venv) on the rendered chart
and both Dockerfiles: no failed check; the chart's accepted findings are
skipped with a written reason on the resource (checkov.io/skip*)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .test_chart import ROOT, VALUES, render

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkov() -> str:
    out = subprocess.run([str(ROOT / ".ci" / "checkov")], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _scan(checkov: str, *args: str) -> list[dict]:  # type: ignore[type-arg]
    out = subprocess.run([checkov, "--skip-download", "-o", "json", *args], capture_output=True,
                         text=True, timeout=600)
    doc = json.loads(out.stdout)
    reports = doc if isinstance(doc, list) else [doc]
    return [r for r in reports if isinstance(r, dict) and "results" in r]


def _failed(reports: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [f"{c['check_id']} {c['resource']}: {c['check_name']}" for r in reports
            for c in r["results"]["failed_checks"]]


@pytest.mark.parametrize("values", [None, *VALUES], ids=["defaults", *[v.stem for v in VALUES]])
def test_chart_passes_checkov(checkov: str, helm: str, values: Path | None, tmp_path: Path) -> None:
    import yaml

    docs = render(helm, *(["-f", str(values)] if values else []))
    (tmp_path / "chart.yaml").write_text(yaml.safe_dump_all(docs))
    reports = _scan(checkov, "-d", str(tmp_path), "--framework", "kubernetes")
    assert reports and _failed(reports) == []
    # Every skip is one the chart declares, with a reason a person can read.
    declared = {}
    for d in docs:
        for k, v in ((d.get("metadata") or {}).get("annotations") or {}).items():
            if k.startswith("checkov.io/skip"):
                check, _, reason = v.partition("=")
                declared[check] = reason
    skipped = {c["check_id"] for r in reports for c in r["results"].get("skipped_checks", [])}
    assert skipped <= set(declared) and all(len(declared[c]) >= 20 for c in skipped), (skipped, declared)


def test_dockerfiles_pass_checkov(checkov: str) -> None:
    reports = _scan(checkov, "-f", str(ROOT / "Dockerfile.operator"), "-f", str(ROOT / "Dockerfile.sidecar"),
                    "--framework", "dockerfile")
    assert reports and _failed(reports) == []
