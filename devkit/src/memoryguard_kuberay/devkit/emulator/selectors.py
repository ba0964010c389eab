"""Label and field selectors as the Kubernetes API server reads them (the
subset of the grammar our operator and kopf use: =, ==, !=, in, notin,
exists, !exists). Part of the emulator."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    """A predicate over a labels dict. Raises ValueError on a bad selector."""
    if not selector:
        return lambda labels: True
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split_terms(selector):
        m = _SET.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda lb, k=key, vs=values: lb.get(k) in vs)  # type: ignore[misc]
            else:
                checks.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)  # type: ignore[misc]
        elif "!=" in term:
            k, v = (x.strip() for x in term.split("!=", 1))
            checks.append(lambda lb, k=k, v=v: lb.get(k) != v)  # type: ignore[misc]
        elif "=" in term:
            k, v = (x.strip() for x in term.replace("==", "=").split("=", 1))
            checks.append(lambda lb, k=k, v=v: lb.get(k) == v)  # type: ignore[misc]
        elif term.startswith("!"):
            absent = term[1:].strip()
            checks.append(lambda lb, k=absent: k not in lb)  # type: ignore[misc]
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term):
            checks.append(lambda lb, k=term: k in lb)  # type: ignore[misc]
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return lambda labels: all(c(labels) for c in checks)


def selector_from_spec(sel: Mapping[str, Any] | None) -> Callable[[Mapping[str, str]], bool]:
    """A LabelSelector object (matchLabels, matchExpressions) as a predicate."""
    if not sel:
        return lambda labels: True
    terms = [f"{k}={v}" for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return label_matcher(",".join(terms))


def field_matcher(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    if not selector:
        return lambda obj: True
    checks = []
    for term in _split_terms(selector):
        neg = "!=" in term
        path, value = (x.strip() for x in term.replace("==", "=").split("!=" if neg else "=", 1))

        def get(obj: Mapping[str, Any], path: str = path) -> Any:
            cur: Any = obj
            for part in path.split("."):
                cur = cur.get(part) if isinstance(cur, Mapping) else None
            return "" if cur is None else str(cur)

        checks.append(lambda o, g=get, v=value, n=neg: (g(o) != v) if n else (g(o) == v))
    return lambda obj: all(c(obj) for c in checks)  # type: ignore[no-untyped-call]
