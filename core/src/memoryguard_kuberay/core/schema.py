"""The one way a MemoryGuard spec field is described, read and published.

A ``Field`` says what one spec field is: its type, default, bounds, pattern,
the words that refuse it, its rules. Both tables of the spec are made of
them: the policy's (``settings.POLICY_FIELDS``: what ``PolicySettings``
holds) and the operator's (``specfields.FIELDS``: every other section).
``check`` reads one value by it, ``crd_property`` writes it as the CRD's
OpenAPI schema, and the docs' table prints it: one description, so the CRD,
the reader and the docs cannot disagree. Purely computational.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

# A JSON number beyond this is no setting anyone meant (and loses precision).
MAX_MAGNITUDE = 2**53


class Kind(str, enum.Enum):
    INT = "integer"
    NUMBER = "number"
    BOOL = "boolean"
    STRING = "string"
    STRINGS = "strings"  # a list of strings
    LABELS = "labels"  # a map of label keys to label values


@dataclasses.dataclass(frozen=True)
class Rule:
    """A check of one value: CEL for the CRD, Python for the reader."""

    cel: str
    message: str
    holds: Callable[[Any], bool]


@dataclasses.dataclass(frozen=True)
class Field:
    path: str  # below spec, dotted: "sampling.intervalSeconds"
    kind: Kind
    default: Any  # in the spec's units; None: no default
    doc: str
    unit: str = "-"
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None  # a string, or each string of a list
    choices: tuple[str, ...] = ()
    min_items: int | None = None
    max_items: int | None = None
    max_length: int | None = None
    problem: str = ""  # how the reader refuses a value of the wrong shape
    rules: tuple[Rule, ...] = ()
    attr: str = ""  # the typed setting that holds it, where one holds it by name (the policy's)
    percent: bool = False  # written in percent, held as a fraction

    def __post_init__(self) -> None:
        # A real API server costs a CEL rule over a string with no maxLength
        # (a list with no maxItems) as if it were as long as a whole request,
        # and refuses the CRD; and a guard's author may send a megabyte in any
        # field. So every string and every list of the table is bounded.
        if self.kind in (Kind.STRING, Kind.STRINGS, Kind.LABELS) and self.max_length is None:
            raise ValueError(f"spec.{self.path}: a string field needs max_length")
        if self.kind in (Kind.STRINGS, Kind.LABELS) and self.max_items is None:
            raise ValueError(f"spec.{self.path}: a list or map field needs max_items")

    @property
    def section(self) -> str:
        """The object it is in ("" for the spec itself)."""
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]

    def held(self, value: Any) -> Any:
        """A value read (in the spec's units) as its setting holds it."""
        if value is None or self.kind not in (Kind.INT, Kind.NUMBER):
            return value
        if self.percent:
            return float(value) / 100.0  # a division: 3 / 100.0 is exactly the double 0.03
        return int(value) if self.kind is Kind.INT else float(value)

    @property
    def held_default(self) -> Any:
        return self.held(self.default)


def said(f: Field, problem: str) -> str:
    """A problem of ``check`` as the reader reports it: ``spec.<path>...``."""
    return f"spec.{f.path}{'' if problem.startswith(':') else ' '}{problem}"


def check(f: Field, raw: Any) -> tuple[Any, str | None]:
    """``raw`` read by ``f``: (the value in the spec's units, None), or
    (None, why it is refused, for ``said``)."""
    value, problem = _shape(f, raw)
    if problem is None:
        broken = next((r for r in f.rules if not all(r.holds(x) for x in (
            value if f.kind is Kind.STRINGS else [value]))), None)
        if broken is not None:
            problem = f": {broken.message}"
    return (None, problem) if problem is not None else (value, None)


def _fits(f: Field, text: str) -> bool:
    """Within the field's length (checked first: a pattern is never run on a
    megabyte) and its pattern."""
    return (f.max_length is None or len(text) <= f.max_length) and (
        not f.pattern or re.match(f.pattern, text) is not None)


def _shape(f: Field, raw: Any) -> tuple[Any, str | None]:
    k = f.kind
    unit = f" ({f.unit})" if f.unit != "-" else ""
    if k is Kind.BOOL:
        if isinstance(raw, bool):
            return raw, None
        return None, f.problem or f": must be true or false, got {raw!r:.40}"
    if k in (Kind.INT, Kind.NUMBER):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            return None, f.problem or f": must be a number{unit}, got {str(raw)[:40]!r}"
        if abs(raw) > MAX_MAGNITUDE or not math.isfinite(raw):  # the size first: 10**400 is no float
            return None, f.problem or f": must be a finite number of sensible size, got {str(raw)[:40]}"
        if k is Kind.INT and not float(raw).is_integer():
            return None, f.problem or f": must be a whole number{unit}, got {raw!r}"
        if (f.minimum is not None and raw < f.minimum) or (f.maximum is not None and raw > f.maximum):
            return None, f": {raw} is outside [{_num(f.minimum)}, {_num(f.maximum)}]"
        return (int(raw) if k is Kind.INT else float(raw)), None
    if k is Kind.STRING:
        ok = isinstance(raw, str) and _fits(f, raw) and (not f.choices or raw in f.choices)
        return (raw, None) if ok else (None, f.problem or "is not a valid value")
    if k is Kind.STRINGS:
        ok = isinstance(raw, list) and all(isinstance(x, str) and _fits(f, x) for x in raw)
        ok = ok and (f.min_items is None or len(raw) >= f.min_items) and (
            f.max_items is None or len(raw) <= f.max_items)
        return (tuple(raw), None) if ok else (None, f.problem or "is not a list of valid strings")
    ok = isinstance(raw, Mapping) and all(isinstance(v, str) and _fits(f, v) for v in raw.values())
    ok = ok and (f.max_items is None or len(raw) <= f.max_items)
    return (dict(raw), None) if ok else (None, f.problem or "is not a map of label keys to values")


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# -- the CRD ----------------------------------------------------------------------------
def crd_property(f: Field) -> dict[str, Any]:
    """The field as an OpenAPI property of the CRD's schema."""
    desc = f"{f.doc} Unit: {f.unit}." if f.unit != "-" else f.doc
    prop: dict[str, Any]
    validations = [{"rule": r.cel, "message": r.message} for r in f.rules]
    if f.kind is Kind.STRINGS:
        item: dict[str, Any] = {"type": "string", "maxLength": f.max_length}
        if f.pattern:
            item["pattern"] = f.pattern
        if validations:
            item["x-kubernetes-validations"] = validations
        prop = {"type": "array", "description": desc, "items": item}
        for key, val in (("minItems", f.min_items), ("maxItems", f.max_items)):
            if val is not None:
                prop[key] = val
    elif f.kind is Kind.LABELS:
        value: dict[str, Any] = {"type": "string", "maxLength": f.max_length}
        if f.pattern:
            value["pattern"] = f.pattern
        prop = {"type": "object", "description": desc, "additionalProperties": value, "maxProperties": f.max_items}
        if validations:
            prop["x-kubernetes-validations"] = validations
    else:
        prop = {"type": f.kind.value, "description": desc}
        limits: tuple[tuple[str, Any], ...] = (("minimum", f.minimum), ("maximum", f.maximum),
                                                ("pattern", f.pattern), ("maxLength", f.max_length))
        for key, val in limits:
            if val is not None:
                prop[key] = spec_round(val) if f.kind is Kind.NUMBER else val
        if f.choices:
            prop["enum"] = list(f.choices)
        if validations:
            prop["x-kubernetes-validations"] = validations
        prop = fractional_minimum(prop)
    if f.default is not None:
        prop["default"] = spec_round(f.default) if f.kind is Kind.NUMBER else f.default
    return prop


def fractional_minimum(prop: dict[str, Any]) -> dict[str, Any]:
    """A real API server checks an integer value against a fractional
    ``minimum`` truncated to an integer (0 passes ``minimum: 0.1``), so such
    a bound is also stated as a CEL rule, which sees the value as a double."""
    lo = prop.get("minimum")
    if prop.get("type") == "number" and isinstance(lo, float) and not lo.is_integer():
        rule = {"rule": f"self >= {lo!r}", "message": f"must be at least {lo:g}"}
        prop["x-kubernetes-validations"] = [*prop.get("x-kubernetes-validations", []), rule]
    return prop


def spec_round(x: float) -> float | int:
    """A number as the CRD and the docs print it: 10, not 10.0."""
    r = round(x, 6)
    return int(r) if float(r).is_integer() else r


# -- the docs ---------------------------------------------------------------------------
def docs_row(f: Field) -> str:
    """The field as a row of the docs' settings table."""
    v = f.default
    if isinstance(v, bool):
        text = str(v).lower()
    elif isinstance(v, (list, tuple)):
        text = ", ".join(str(x) for x in v)
    elif isinstance(v, float):
        text = f"{v:g}"
    else:
        text = "-" if v is None else str(v)
    return f"| `spec.{f.path}` | {text} | {f.unit} | {f.doc} |"
