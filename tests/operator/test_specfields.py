"""One description of the spec (issue 14): the CRD's schema (CEL included),
the reader and the docs' settings table all come from the declarative
tables (the core's SETTINGS_TABLE and CROSS_RULES, the operator's FIELDS and
OBJECT_RULES), and these tests hold them equal: for every field, the values
at and beyond its bounds, or against its pattern and rules, are accepted or
refused alike by the CRD (through the emulator's real-server admission) and
by the reader, and the defaults a server fills in are the reader's."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.core import specfields
from memoryguard_kuberay.devkit.emulator import schema
from memoryguard_kuberay.operator import crd
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec

from .. import spectable

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
BASE = spectable.BASE


def _with(path: str, value: Any) -> dict[str, Any]:
    return spectable.with_value(path, value)


def _crd_accepts(spec: dict[str, Any]) -> bool:
    """Admitted as kubectl sends it (fieldValidation=Strict: an unknown field
    is refused, not pruned)."""
    try:
        _, pruned = schema.admit({"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
                                  "metadata": {"name": "g"}, "spec": spec}, OPENAPI, kind="MemoryGuard")
    except schema.SchemaError:
        return False
    return not pruned


def _reader_accepts(spec: dict[str, Any]) -> bool:
    try:
        read_guard_spec(spec)
    except SpecError:
        return False
    return True


@pytest.mark.parametrize("row", spectable.FIELD_ROWS + spectable.OBJECT_ROWS, ids=lambda r: r.id)
def test_the_crd_and_the_reader_agree_on_every_field(row: spectable.Row) -> None:
    assert _crd_accepts(row.spec) == _reader_accepts(row.spec), row.spec


@pytest.mark.parametrize("row", spectable.TRUST_ROWS, ids=lambda r: r.id)
def test_only_the_operator_judges_its_trust_limits(row: spectable.Row) -> None:
    assert _crd_accepts(row.spec)
    with pytest.raises(SpecError):
        read_guard_spec(row.spec, trust=spectable.CHART_TRUST)


@pytest.mark.parametrize("row", spectable.POLICY_ROWS, ids=lambda r: r.id)
def test_the_crd_and_the_reader_agree_on_every_policy_setting(row: spectable.Row) -> None:
    assert _crd_accepts(row.spec) == _reader_accepts(row.spec), row.spec


def test_the_defaults_a_server_fills_in_are_the_readers() -> None:
    filled, _ = schema.admit({"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
                              "metadata": {"name": "g"}, "spec": dict(BASE)}, OPENAPI, kind="MemoryGuard")
    assert read_guard_spec(filled["spec"]) == read_guard_spec(copy.deepcopy(BASE))
    assert filled["spec"]["sampling"] == {"intervalSeconds": 15, "sidecarPort": 9108, "timeoutSeconds": 5}


def test_object_rules_are_in_the_crd_and_the_reader() -> None:
    empty = {"clusterSelector": {}}
    assert not _crd_accepts(empty) and not _reader_accepts(empty)
    mismatch = {**BASE, "sidecar": {"inject": True, "port": 9200}, "sampling": {"sidecarPort": 9108}}
    assert not _crd_accepts(mismatch) and not _reader_accepts(mismatch)
    few_buckets = {**BASE, "policy": {"trendBucketSeconds": 3600, "trendMinSpanSeconds": 7200}}
    assert not _crd_accepts(few_buckets) and not _reader_accepts(few_buckets)


def test_the_docs_settings_table_is_generated() -> None:
    doc = (ROOT / "docs" / "how-it-works.md").read_text()
    start = doc.index("<!-- settings table: generated, do not edit -->\n") + len(
        "<!-- settings table: generated, do not edit -->\n")
    end = doc.index("<!-- end of the settings table -->")
    assert doc[start:end] == specfields.settings_table(), "run: python -m memoryguard_kuberay.core.specfields"


def _unbounded(node: dict[str, Any], where: str) -> list[str]:
    """Strings without maxLength, lists without maxItems, maps without
    maxProperties, below ``node``."""
    out = []
    t = node.get("type")
    if t == "string" and "maxLength" not in node:
        out.append(where)
    if t == "array":
        if "maxItems" not in node:
            out.append(where)
        out += _unbounded(node["items"], where + "[]")
    if t == "object":
        if isinstance(node.get("additionalProperties"), dict):
            if "maxProperties" not in node:
                out.append(where)
            out += _unbounded(node["additionalProperties"], where + "{}")
        for name, sub in node.get("properties", {}).items():
            out += _unbounded(sub, f"{where}.{name}")
    return out


def test_every_string_and_list_of_the_spec_is_bounded() -> None:
    # A real API server estimates a CEL rule's cost from these bounds and
    # refuses the CRD when one is missing (issue 22); a guard's author may
    # send a megabyte in any unbounded field (issue 24).
    assert _unbounded(OPENAPI["properties"]["spec"], "spec") == []


@pytest.mark.parametrize("spec, says", [
    (_with("sampling.sidecarPort", 22), "sidecarPort: 22 is outside [1024, 65535]"),
    (_with("workerGroups", ["w" * 2**20]), "workerGroups must be a list of worker group names"),
    (_with("remediation.spilling.directories", ["/var/lib/docker"]), "may not be a system directory"),
])
def test_hostile_values_are_refused_with_a_reason(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as e:
        read_guard_spec(spec)
    assert any(says in p for p in e.value.problems), e.value.problems
    assert not _crd_accepts(spec)


def test_a_guard_read_back_from_a_server_replays_as_it_is(tmp_path: Path) -> None:
    # Issue 26: simulate --guard refused every guard read back from a cluster
    # (the CRD's defaults add rotation.replacementTimeoutSeconds, ...).
    import yaml

    from memoryguard_kuberay.core import commands

    filled, _ = schema.admit({"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
                              "metadata": {"name": "g", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
                              "spec": {**BASE, "policy": {"horizonSeconds": 3600}}}, OPENAPI, kind="MemoryGuard")
    filled["status"] = {"summary": {"pods": 3}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(filled))
    assert commands.load_guard_settings(str(path)).horizon_s == 3600


@pytest.mark.parametrize("spec, says", [
    ({**BASE, "polcy": {"horizonSeconds": 3600}}, "spec.polcy: unknown field (did you mean spec.policy?)"),
    ({**BASE, "policy": {"horizonSecond": 3600}}, "did you mean spec.policy.horizonSeconds?"),
    ({**BASE, "sampling": {"intervalSecs": 5}}, "spec.sampling.intervalSecs: unknown field"),
    ({**BASE, "sampling": {"intervalSeconds": 5}, "policy": {"staleAfterSeconds": 1}},
     "staleAfterSeconds"),  # out of bounds, said by the same reader as the operator's
])
def test_simulate_refuses_what_the_operator_would_with_the_nearest_name(tmp_path: Path, spec: dict[str, Any],
                                                                       says: str) -> None:
    import yaml

    from memoryguard_kuberay.core import commands

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"spec": spec}))
    with pytest.raises(commands.UsageError) as e:
        commands.load_guard_settings(str(path))
    assert says in str(e.value), str(e.value)
