"""The images' install and entrypoint steps without a Docker engine: the
same ``pip install ".[extra]"`` each Dockerfile runs, into a fresh venv,
then the entrypoint started and probed."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ..procs import free_port, get_json, http_get, stop, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _dockerfile_parts(name: str) -> list[str]:
    """The local folders the image installs (``pip install ./core ./x``)."""
    text = (ROOT / name).read_text()
    m = re.search(r"pip install [^\n]*?((?: \./\w+)+)", text)
    assert m, f"{name} installs no local parts"
    assert re.search(r"^USER \d+:\d+$", text, re.M), f"{name} must run as a numeric non-root user"
    bases = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(bases) == 2 and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    assert 'ENTRYPOINT ["memoryguard-kuberay"]' in text
    return [p.removeprefix("./") for p in m.group(1).split()]


def _fresh_venv(tmp: Path, parts: list[str]) -> Path:
    venv.create(tmp / "venv", with_pip=True)
    py = tmp / "venv" / "bin" / "python"
    # From outside the checkout, so what runs is what was installed.
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", *(str(ROOT / p) for p in parts)],
                         capture_output=True, text=True, timeout=900, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return py


def _importable(py: Path, module: str) -> bool:
    return subprocess.run([str(py), "-c", f"import {module}"], capture_output=True, timeout=120,
                          cwd=py.parents[2]).returncode == 0


def test_sidecar_image_install_is_small_and_serves(tmp_path: Path) -> None:
    py = _fresh_venv(tmp_path, _dockerfile_parts("Dockerfile.sidecar"))
    for heavy in ("kopf", "kubernetes", "ray", "aiohttp"):
        assert not _importable(py, heavy), f"the sidecar image would carry {heavy}"
    port = free_port("127.0.0.61")
    proc = subprocess.Popen([str(py.parent / "memoryguard-kuberay"), "sidecar", "--listen", f"127.0.0.61:{port}",
                             "--cgroup-root", str(ROOT / "tests" / "fixtures" / "cgroup-v2-ray"),
                             "--ray-metrics-url", "", "--interval", "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        url = f"http://127.0.0.61:{port}"
        wait_until(lambda: http_get(url + "/healthz", 1)[0] == 200, 20, what="the sidecar's /healthz")
        assert get_json(url + "/v1/samples")["samples"][0]["memory_current"] == 27380736000
    finally:
        assert stop(proc) == 0


@pytest.mark.skipif(sys.platform != "linux", reason="linux only")
def test_operator_image_install_has_its_entrypoint(tmp_path: Path) -> None:
    py = _fresh_venv(tmp_path, _dockerfile_parts("Dockerfile.operator"))
    for needed in ("kopf", "kubernetes", "ray._raylet", "memoryguard_kuberay.operator.handlers"):
        assert _importable(py, needed), needed
    out = subprocess.run([str(py.parent / "memoryguard-kuberay"), "operator", "--help"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0 and "--standalone" in out.stdout
