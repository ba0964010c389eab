"""Our names on the package registry (issue 17): an unrelated project owns
``memoryguard`` there, so a dependency by that name would pull a stranger's
code into the operator's image. Every distribution of ours is named
``memoryguard-kuberay[-part]``; these tests fail if any such name resolves
on the registry to a project that is not ours, and show that the other
project installed beside ours shadows neither our import package nor our
command. They need the registry (as CI has); without it they skip, saying so."""

from __future__ import annotations

import email.parser
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("core", "sidecar", "operator", "devkit")
PROJECTS = {p: tomllib.loads((ROOT / p / "pyproject.toml").read_text())["project"] for p in PARTS}
PROJECTS["."] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OURS = sorted(p["name"] for p in PROJECTS.values())
SUMMARIES = {p["name"]: p["description"] for p in PROJECTS.values()}

pytestmark = pytest.mark.slow


def _pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _registry_reachable() -> bool:
    out = _pip("index", "versions", "pip")
    return out.returncode == 0 and "Available versions" in out.stdout


@pytest.fixture(scope="module")
def registry() -> None:
    if not _registry_reachable():
        pytest.skip("the package registry is not reachable from here: names not checked")


def test_one_naming_scheme() -> None:
    assert OURS == ["memoryguard-kuberay", "memoryguard-kuberay-core", "memoryguard-kuberay-devkit",
                    "memoryguard-kuberay-operator", "memoryguard-kuberay-sidecar"]
    scripts = {k: v for p in PROJECTS.values() for k, v in (p.get("scripts") or {}).items()}
    assert scripts == {"memoryguard-kuberay": "memoryguard_kuberay.cli:main"}
    for part in PARTS:  # one namespace package, one subpackage per part
        assert (ROOT / part / "src" / "memoryguard_kuberay" / part / "__init__.py").exists(), part
        assert not (ROOT / part / "src" / "memoryguard_kuberay" / "__init__.py").exists(), part
    # Every dependency between our parts is by one of our names, pinned.
    for p in PROJECTS.values():
        for dep in [*p.get("dependencies", []), *(d for ds in (p.get("optional-dependencies") or {}).values()
                                                   for d in ds)]:
            if dep.startswith("memoryguard"):
                assert dep.split("[")[0].split("=")[0] in OURS and "==" in dep, dep


@pytest.mark.parametrize("name", OURS)
def test_our_names_resolve_to_nothing_or_to_us(registry: None, name: str, tmp_path: Path) -> None:
    found = _pip("index", "versions", name)
    if "No matching distribution" in found.stderr + found.stdout:
        return  # free: nobody can be pulled in by this name
    got = _pip("download", "--no-deps", "--only-binary=:all:", "-d", str(tmp_path), name)
    assert got.returncode == 0, got.stderr[-2000:]
    wheel = next(tmp_path.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        meta = email.parser.Parser().parsestr(z.read(next(n for n in z.namelist()
                                                            if n.endswith(".dist-info/METADATA"))).decode())
    assert meta["Summary"] == SUMMARIES[name], f"{name} on the registry is someone else's: {meta['Summary']!r}"


def test_the_other_memoryguard_beside_ours_shadows_nothing(registry: None, tmp_path: Path) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", "memoryguard==1.0.2", "--no-deps"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    if out.returncode != 0:
        pytest.skip(f"the other project could not be installed: {out.stderr[-300:]}")
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", str(ROOT / "core")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # Theirs is found where it was installed (not imported: it needs its own
    # dependencies), ours imports whole beside it.
    check = ("import importlib.util as u, memoryguard_kuberay.core.samples as s; "
             "theirs = u.find_spec('memoryguard').origin; "
             "assert theirs.endswith('site-packages/memoryguard/__init__.py'), theirs; print(s.Sample.__module__)")
    r = subprocess.run([str(py), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "memoryguard_kuberay.core.samples", r.stderr
    r = subprocess.run([str(py.parent / "memoryguard-kuberay"), "simulate", "--json",
                        str(ROOT / "examples" / "traces" / "leak_steady.csv")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and '"leak_steady"' in r.stdout, r.stderr[-2000:]
