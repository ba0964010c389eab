"""Structural-schema handling of a CustomResourceDefinition, as the real
kube-apiserver applies it on every write (part of the EMULATOR; see
shared/design/FACTS.md, "A real control plane"). In the server's order,
after its JSON decoder has made every integral number an integer (``5.0``
is stored as ``5``, as k8s.io/apimachinery's util/json does):

1. **prune** fields the schema does not know (not under
   ``x-kubernetes-preserve-unknown-fields``); each pruned path is reported,
   so the caller answers with a ``Warning: 299`` header, or ``400`` under
   ``fieldValidation=Strict``;
2. **default**: a missing property whose schema has ``default`` gets it
   (and the defaults inside it);
3. **OpenAPI validation** (types, bounds, patterns, enums), including a
   quirk the real server has: an *integer* value is checked against a
   fractional ``minimum``/``maximum`` truncated to an integer (go-openapi's
   ``MinimumInt``), so ``0`` passes ``minimum: 0.1`` (seen on 1.36);
4. **CEL** ``x-kubernetes-validations``, evaluated with cel-python after
   defaulting, ``self`` being the value at the rule's node; a ``number``
   field's value is a CEL double even when the JSON holds an integer, as
   on the real server. A rule that does not compile is an error here too
   (the real server refuses such a CRD when it is created).

NOT modelled: ``metadata`` pruning (the server keeps ObjectMeta's own
fields; we keep all of metadata), ``oldSelf`` transition rules, CEL cost
limits, ``x-kubernetes-list-type`` uniqueness, ``nullable``, formats.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from typing import Any

import jsonschema


class SchemaError(Exception):
    """An object the schema refuses: the message is the server's 422 text."""


# -- 1. pruning -----------------------------------------------------------------
def prune(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Drop unknown fields from ``obj`` in place; returns their paths."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    pruned: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(obj):
            where = f"{path}.{key}" if path else key
            if path == "" and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                pruned += prune(obj[key], props[key], where)
            elif isinstance(extra, dict):
                pruned += prune(obj[key], extra, where)
            elif extra is True or (props is None and extra is None and schema.get("type") != "object"):
                continue
            else:
                del obj[key]
                pruned.append(where)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            pruned += prune(item, schema["items"], f"{path}[{i}]")
    return pruned


# -- 2. defaulting -----------------------------------------------------------------
def apply_defaults(obj: Any, schema: dict[str, Any]) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in obj and isinstance(sub, dict) and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(obj[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in obj:
                if key not in (schema.get("properties") or {}):
                    apply_defaults(obj[key], extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(item, schema["items"])


# -- 3. OpenAPI validation, with the real server's integer-bound quirk -------------
def _int_aware_bound(name: str) -> Any:
    original = jsonschema.Draft7Validator.VALIDATORS[name]

    def check(validator: Any, bound: Any, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
        if isinstance(instance, int) and not isinstance(instance, bool) and isinstance(bound, float):
            bound = int(bound)  # go-openapi MinimumInt/MaximumInt: int64(*minimum), truncated
        yield from original(validator, bound, instance, schema)

    return check


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {
    "minimum": _int_aware_bound("minimum"), "maximum": _int_aware_bound("maximum")})


def to_json_schema(schema: Any) -> Any:
    """openAPIV3Schema -> JSON schema: drop x-kubernetes-* keys, let
    x-kubernetes-int-or-string be either, and read OpenAPI v3.0's boolean
    ``exclusiveMinimum``/``exclusiveMaximum`` as the server does."""
    if isinstance(schema, dict):
        out = {k: to_json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if out.get(flag) is True and bound in out:
                out[flag] = out.pop(bound)
            elif out.get(flag) is False:
                out.pop(flag)
        return out
    if isinstance(schema, list):
        return [to_json_schema(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=32)
def _validator(schema_json: str) -> Any:
    return _Validator(to_json_schema(json.loads(schema_json)))


def openapi_errors(obj: Any, schema: dict[str, Any]) -> list[str]:
    errors = sorted(_validator(json.dumps(schema, sort_keys=True)).iter_errors(obj), key=lambda e: list(e.path))
    return [f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}" for e in errors]


# -- 4. CEL -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


def _as_typed(value: Any, schema: dict[str, Any]) -> Any:
    """JSON -> the value CEL sees: a ``number`` field is a double."""
    if not isinstance(schema, dict):
        return value
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        return {k: _as_typed(v, props.get(k) or (extra if isinstance(extra, dict) else {})) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_typed(v, schema.get("items") or {}) for v in value]
    return value


def cel_errors(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    import celpy

    if not isinstance(schema, dict):
        return []
    out: list[str] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        prog = _program(rule["rule"])
        try:
            ok = prog.evaluate({"self": celpy.json_to_cel(_as_typed(obj, schema))})  # type: ignore[attr-defined]
        except Exception as e:  # a rule that errors refuses the write, as on the server
            ok, rule = False, {**rule, "message": f"{rule.get('message', rule['rule'])} ({e})"}
        if isinstance(ok, celpy.CELEvalError) or not bool(ok):  # type: ignore[attr-defined]
            shown = "object" if isinstance(obj, dict) else obj
            out.append(f"{path or '<root>'}: Invalid value: \"{shown}\": {rule.get('message') or rule['rule']}")
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                out += cel_errors(value, sub, f"{path}.{key}" if path else key)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += cel_errors(item, schema["items"], f"{path}[{i}]")
    return out


def _as_decoded(value: Any) -> Any:
    """JSON as the server holds it: its decoder makes an integral number an
    int64 (``5.0`` is ``5``; k8s.io/apimachinery util/json), others float64."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _as_decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_decoded(v) for v in value]
    return value


def check_rules_compile(schema: Any) -> None:
    """Compile every CEL rule (the server does so when the CRD is created)."""
    if isinstance(schema, dict):
        for rule in schema.get("x-kubernetes-validations") or []:
            _program(rule["rule"])
        for v in schema.values():
            check_rules_compile(v)
    elif isinstance(schema, list):
        for v in schema:
            check_rules_compile(v)


# CEL functions whose cost grows with the length of what they read: a real
# server estimates a rule's cost from maxLength/maxItems/maxProperties and
# refuses the CRD when such a call may read an unbounded value ("estimated
# rule cost exceeds budget"). Equality and `in` on an unbounded string are
# cheap enough there (KubeRay's own CRD has them).
_COSTLY_CALLS = ("matches(", ".all(", ".exists(", ".exists_one(", ".map(", ".filter(", ".contains(",
                 ".startsWith(", ".endsWith(", ".split(", ".indexOf(", ".replace(", ".lowerAscii(", ".upperAscii(")


def _unbounded(node: Any, where: str) -> list[str]:
    """Strings, lists and maps at or below ``node`` without a bound."""
    if not isinstance(node, dict):
        return []
    t, out = node.get("type"), []
    if t == "string" and "maxLength" not in node and "enum" not in node:
        out.append(where)
    if t == "array":
        if "maxItems" not in node:
            out.append(where)
        out += _unbounded(node.get("items"), where + ".items")
    if t == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            if "maxProperties" not in node:
                out.append(where)
            out += _unbounded(extra, where + ".additionalProperties")
        for name, sub in (node.get("properties") or {}).items():
            out += _unbounded(sub, f"{where}.properties[{name}]")
    return out


def rule_cost_problems(schema: Any, where: str = "openAPIV3Schema") -> list[str]:
    """The emulator's stand-in for the server's CEL cost estimate (an
    approximation: it refuses what the server refused here, a length-bound
    call over an unbounded value, and does not compute the budget)."""
    out: list[str] = []
    if not isinstance(schema, dict):
        return out
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        text = rule.get("rule", "")
        if any(c in text for c in _COSTLY_CALLS):
            loose = _unbounded(schema, where)
            if loose:
                out.append(f"{where}.x-kubernetes-validations[{i}].rule: Forbidden: estimated rule cost exceeds "
                           f"budget (try adding maxItems, maxProperties, and maxLength where arrays, maps, and "
                           f"strings are declared: {', '.join(loose[:3])})")
    for name, sub in (schema.get("properties") or {}).items():
        out += rule_cost_problems(sub, f"{where}.properties[{name}]")
    for key in ("items", "additionalProperties"):
        out += rule_cost_problems(schema.get(key), f"{where}.{key}")
    return out


def admit(obj: dict[str, Any], schema: dict[str, Any], *, kind: str) -> tuple[dict[str, Any], list[str]]:
    """The whole write path: (the object as stored, pruned field paths).
    Raises SchemaError with the server's message when it is refused."""
    obj = _as_decoded(copy.deepcopy(obj))
    pruned = prune(obj, schema)
    apply_defaults(obj, schema)
    problems = openapi_errors(obj, schema) or cel_errors(obj, schema)
    if problems:
        name = (obj.get("metadata") or {}).get("name")
        raise SchemaError(f"{kind} {name!r} is invalid: {problems[0]}")
    return obj, pruned
