"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) as the API server
applies them. Part of the emulator. Errors raise PatchError (HTTP 422)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return cur


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    return _walk(doc, parts[:-1], path), parts[-1]


def _get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test failed at {path!r}")
            continue
        parts = _pointer(path)
        if not parts:
            raise PatchError("operations on the document root are not supported")
        parent, key = _parent(doc, parts, path)
        if kind == "add":
            if isinstance(parent, list):
                if key == "-":
                    parent.append(copy.deepcopy(op.get("value")))
                elif key.isdigit() and int(key) <= len(parent):
                    parent.insert(int(key), copy.deepcopy(op.get("value")))
                else:
                    raise PatchError(f"bad list index in {path!r}")
            elif isinstance(parent, dict):
                parent[key] = copy.deepcopy(op.get("value"))
            else:
                raise PatchError(f"cannot add at {path!r}")
        elif kind in ("remove", "replace"):
            if isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
                if kind == "remove":
                    parent.pop(int(key))
                else:
                    parent[int(key)] = copy.deepcopy(op.get("value"))
            elif isinstance(parent, dict) and key in parent:
                if kind == "remove":
                    del parent[key]
                else:
                    parent[key] = copy.deepcopy(op.get("value"))
            else:
                raise PatchError(f"path {path!r} does not exist")
        else:
            raise PatchError(f"operation {kind!r} is not supported by the emulator")
    return doc
