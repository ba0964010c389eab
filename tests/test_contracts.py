"""Architecture contracts: the core is pure (imports no kopf, kubernetes,
aiohttp, ray, prometheus_client, nor the operator or sidecar, and reads no
clock), the sidecar stays small (no kopf, kubernetes, ray), no shipped code
imports the tests, and every module has one path (no symlinks)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = "core/src/memoryguard_kuberay/core"  # the pure package (the core distribution also holds the CLI)
SIDECAR = "sidecar/src"
SHIPPED = ("core/src", "sidecar/src", "operator/src", "devkit/src")
FORBIDDEN_IN_CORE = ("kopf", "kubernetes", "aiohttp", "ray", "prometheus_client", "requests", "urllib.request",
                     "socket", "memoryguard_kuberay.operator", "memoryguard_kuberay.sidecar", "memoryguard_kuberay.cli",
                     "time", "datetime")
FORBIDDEN_IN_SIDECAR = ("kopf", "kubernetes", "memoryguard_kuberay.operator")


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
    assert _violations(CORE, FORBIDDEN_IN_CORE) == []


def test_sidecar_stays_small() -> None:
    assert _violations(SIDECAR, FORBIDDEN_IN_SIDECAR) == []


@pytest.mark.parametrize("folder", SHIPPED)
def test_no_shipped_code_imports_the_tests(folder: str) -> None:
    assert _violations(folder, ("tests",)) == []


def test_every_module_has_one_path() -> None:
    links = [str(p.relative_to(ROOT)) for folder in (*SHIPPED, "tests", "benchmarks")
             for p in (ROOT / folder).rglob("*") if p.is_symlink()]
    assert links == []
    top = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "tests")
    assert top == []  # nothing at the top is a package: every import goes through memoryguard_kuberay


@pytest.mark.parametrize("call", ["time.monotonic", "time.perf_counter", "datetime.now", "datetime.utcnow",
                                  "date.today"])
def test_core_reads_no_clock(call: str) -> None:
    attr = call.split(".")[1]
    for path in sorted((ROOT / CORE).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == attr:
                pytest.fail(f"{path.name} calls {call}")


def test_contract_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import kopf\nfrom datetime import datetime\n")
    assert _imports(bad) == ["kopf", "datetime"]


# Nothing a spec, an annotation or a sidecar answer carries may be run: the
# shipped packages call no shell, no interpreter on strings, no unpickling.
BUILTINS_THAT_RUN = ("eval", "exec", "compile", "__import__")  # bare names; re.compile is fine
OS_CALLS_THAT_RUN = ("system", "popen", "execv", "execve", "execl", "execlp", "execvp", "spawnl", "spawnv",
                     "posix_spawn", "startfile")
EXECUTING_MODULES = ("subprocess", "pickle", "marshal", "shelve", "pty", "code", "runpy")


def _executing(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = [f"imports {n}" for n in _imports(path) if n.split(".")[0] in EXECUTING_MODULES]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in BUILTINS_THAT_RUN:
                out.append(f"calls {f.id} (line {node.lineno})")
            if isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "os" and f.attr in OS_CALLS_THAT_RUN:
                out.append(f"calls os.{f.attr} (line {node.lineno})")
            if isinstance(f, ast.Attribute) and f.attr == "load" and getattr(f.value, "id", "") == "yaml":
                out.append(f"calls yaml.load (line {node.lineno})")
        if isinstance(node, ast.keyword) and node.arg == "shell":
            out.append(f"passes shell= (line {node.value.lineno})")
    return sorted(out)


# The devkit is exempt: it is the test world (it starts sidecar and operator
# processes); no image installs it.
@pytest.mark.parametrize("folder", ["operator/src", "sidecar/src", "core/src"])
def test_shipped_code_executes_nothing(folder: str) -> None:
    found = [f"{p.relative_to(ROOT)} {what}" for p in sorted((ROOT / folder).rglob("*.py")) for what in _executing(p)]
    assert found == []


def test_execution_checker_catches_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os, re, subprocess, yaml\nsubprocess.run('x', shell=True)\neval('1')\nyaml.load('a')\n"
                   "os.system('x')\nre.compile('ok')\n")
    assert _executing(bad) == ["calls eval (line 3)", "calls os.system (line 5)", "calls yaml.load (line 4)",
                               "imports subprocess", "passes shell= (line 2)"]
