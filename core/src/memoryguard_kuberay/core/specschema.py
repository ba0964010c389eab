"""The spec's field tables (the core's ``POLICY_FIELDS`` and
``specfields.FIELDS``) as the CRD's OpenAPI schema: every field with its
type, bounds, pattern, CEL rules and default, and the rules across fields.
Purely computational; ``make crds`` writes the result.
"""

from __future__ import annotations

from typing import Any

from memoryguard_kuberay.core.schema import crd_property
from memoryguard_kuberay.core.settings import CROSS_RULES, POLICY_FIELDS
from memoryguard_kuberay.core.specfields import FIELDS, OBJECT_RULES, SECTION_DOCS, SECTIONS


def _obj(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": {}}
    doc = SECTIONS.get(path) or SECTION_DOCS.get(path)
    if doc:
        out["description"] = doc
    if path in SECTIONS:
        out["default"] = {}
    return out


def schema_into(spec: dict[str, Any]) -> None:
    """Add every field of both tables, and the rules across fields, to the
    spec's OpenAPI schema (objects created as needed, kept where they exist)."""
    for f in (*POLICY_FIELDS, *FIELDS):
        *parents, name = f.path.split(".")
        node = spec
        for i, part in enumerate(parents):
            node = node["properties"].setdefault(part, _obj(".".join(parents[:i + 1])))
        node["properties"][name] = crd_property(f)
    for cross in CROSS_RULES:
        spec["properties"][cross.section].setdefault("x-kubernetes-validations", []).append(
            {"rule": cross.cel, "message": cross.message})
    for r in OBJECT_RULES:
        node = spec
        for part in r.path.split(".") if r.path else []:
            node = node["properties"][part]
        node.setdefault("x-kubernetes-validations", []).append({"rule": r.cel, "message": r.message})
