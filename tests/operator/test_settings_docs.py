"""docs/operations.md lists every environment variable the operator process
reads (the MemoryGuard spec's settings are checked in tests/core)."""

from __future__ import annotations

import re
from pathlib import Path

from memoryguard_kuberay.operator import config

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "operator" / "src" / "memoryguard_kuberay" / "operator"


def test_operations_doc_lists_every_operator_variable() -> None:
    # What the process reads is config.ENV: neither config.py nor main.py
    # names a variable outside it (they read by the table's names).
    for module in ("config.py", "cli/main.py"):
        assert not re.findall(r"MEMORYGUARD_[A-Z_]+", (SRC / module).read_text()), module
    names = {"MEMORYGUARD_" + s.name for s in config.ENV}
    assert {"MEMORYGUARD_DRAIN_RPC_TIMEOUT_SECONDS", "MEMORYGUARD_LOG_LEVEL"} <= names  # the reading works
    doc = (ROOT / "docs" / "operations.md").read_text()
    missing = sorted(names - set(re.findall(r"MEMORYGUARD_[A-Z_]+", doc)))
    assert not missing, f"docs/operations.md does not list {missing}"
