"""The spec's field table (specfields.py) as the CRD's OpenAPI schema:
every field with its type, bounds, pattern, CEL rules and default, and the
rules across fields. Purely computational; ``make crds`` writes the result.
"""

from __future__ import annotations

from typing import Any

from memoryguard_kuberay.core import settings as core_settings
from memoryguard_kuberay.core.specfields import FIELDS, OBJECT_RULES, SECTION_DOCS, SECTIONS, Field, Kind


def _prop(f: Field) -> dict[str, Any]:
    desc = f"{f.doc} Unit: {f.unit}." if f.unit != "-" else f.doc
    prop: dict[str, Any]
    if f.kind is Kind.STRINGS:
        item: dict[str, Any] = {"type": "string", "maxLength": f.max_length}
        if f.pattern:
            item["pattern"] = f.pattern
        if f.rules:
            item["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in f.rules]
        prop = {"type": "array", "description": desc, "items": item}
        for key, val in (("minItems", f.min_items), ("maxItems", f.max_items)):
            if val is not None:
                prop[key] = val
    elif f.kind is Kind.LABELS:
        value: dict[str, Any] = {"type": "string"}
        if f.max_length is not None:
            value["maxLength"] = f.max_length
        if f.pattern:
            value["pattern"] = f.pattern
        prop = {"type": "object", "description": desc, "additionalProperties": value}
        if f.max_items is not None:
            prop["maxProperties"] = f.max_items
        if f.rules:
            prop["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in f.rules]
    else:
        prop = {"type": f.kind.value, "description": desc}
        limits: tuple[tuple[str, Any], ...] = (("minimum", f.minimum), ("maximum", f.maximum),
                                                ("pattern", f.pattern), ("maxLength", f.max_length))
        for key, val in limits:
            if val is not None:
                prop[key] = val
        if f.choices:
            prop["enum"] = list(f.choices)
        if f.rules:
            prop["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in f.rules]
        prop = core_settings.fractional_minimum(prop)
    if f.default is not None:
        prop["default"] = f.default
    return prop


def _obj(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": {}}
    doc = SECTIONS.get(path) or SECTION_DOCS.get(path)
    if doc:
        out["description"] = doc
    if path in SECTIONS:
        out["default"] = {}
    return out


def schema_into(spec: dict[str, Any]) -> None:
    """Add every field of the table, and the object rules, to the spec's
    OpenAPI schema (objects created as needed, kept where they exist)."""
    for f in FIELDS:
        *parents, name = f.path.split(".")
        node = spec
        for i, part in enumerate(parents):
            node = node["properties"].setdefault(part, _obj(".".join(parents[:i + 1])))
        node["properties"][name] = _prop(f)
    for r in OBJECT_RULES:
        node = spec
        for part in r.path.split(".") if r.path else []:
            node = node["properties"][part]
        node.setdefault("x-kubernetes-validations", []).append({"rule": r.cel, "message": r.message})
