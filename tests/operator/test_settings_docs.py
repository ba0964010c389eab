"""docs/operations.md lists every environment variable the operator process
reads (the MemoryGuard spec's settings are checked in tests/core)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operations_doc_lists_every_operator_variable() -> None:
    config = (ROOT / "operator" / "src" / "memoryguard_kuberay" / "operator" / "config.py").read_text()
    main = (ROOT / "operator" / "src" / "memoryguard_kuberay" / "operator" / "main.py").read_text()
    names = {"MEMORYGUARD_" + n for n in re.findall(r'\b(?:get|number)\("([A-Z][A-Z_]*)", ', config)}
    names |= set(re.findall(r"MEMORYGUARD_[A-Z_]+", main))
    assert {"MEMORYGUARD_DRAIN_RPC_TIMEOUT_SECONDS", "MEMORYGUARD_LOG_LEVEL"} <= names  # the reading works
    doc = (ROOT / "docs" / "operations.md").read_text()
    missing = sorted(names - set(re.findall(r"MEMORYGUARD_[A-Z_]+", doc)))
    assert not missing, f"docs/operations.md does not list {missing}"
