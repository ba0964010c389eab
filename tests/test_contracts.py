"""Architecture contracts: the core is pure (imports no kopf, kubernetes,
aiohttp, ray, prometheus_client, nor the operator or sidecar, and reads no
clock), and the sidecar stays small (no kopf, kubernetes, ray)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_CORE = ("kopf", "kubernetes", "aiohttp", "ray", "prometheus_client", "requests", "urllib.request",
                     "socket", "memoryguard.operator", "memoryguard.sidecar", "memoryguard.cli", "time", "datetime")
FORBIDDEN_IN_SIDECAR = ("kopf", "kubernetes", "memoryguard.operator")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _violations(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return out


def test_core_is_pure() -> None:
    assert _violations("core", FORBIDDEN_IN_CORE) == []


def test_sidecar_stays_small() -> None:
    assert _violations("sidecar", FORBIDDEN_IN_SIDECAR) == []


@pytest.mark.parametrize("call", ["time.monotonic", "time.perf_counter", "datetime.now", "datetime.utcnow",
                                  "date.today"])
def test_core_reads_no_clock(call: str) -> None:
    attr = call.split(".")[1]
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == attr:
                pytest.fail(f"{path.name} calls {call}")


def test_contract_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import kopf\nfrom datetime import datetime\n")
    assert _imports(bad) == ["kopf", "datetime"]
