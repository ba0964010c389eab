"""JSON patches of a RayCluster's pod templates: the remediation's env (the
sidecar's injection is injection.py's). Purely computational: given the RayCluster as
read and what is wanted, return the RFC 6902 operations, with ``test`` ops
that make the server refuse (422) a patch computed from a stale list.

Targeted patches, never server-side apply: KubeRay's CRD gives
``workerGroupSpecs`` no list type, so apply would take ownership of the
whole list that users and the Ray autoscaler also write.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.guardspec import GuardSpec, Jemalloc, Mode, Spilling

RAY_CONTAINER = 0  # KubeRay treats the first container of a template as the Ray container
REMEDIATION_ANNOTATION = C.ANN_REMEDIATION
# What each remediated variable was before MemoryGuard set it ({group: {name:
# env entry, or null: absent}}): kept on the RayCluster it was taken from, so
# a revert gives back exactly that, and only whoever may edit the RayCluster
# (and so its env anyway) can change what a revert writes.
PREVIOUS_ANNOTATION = C.ANN_REMEDIATION_PREVIOUS
Op = dict[str, Any]


def pointer_escape(s: str) -> str:
    """A key as one JSON pointer token (RFC 6901)."""
    return s.replace("~", "~0").replace("/", "~1")


def templates(rc: Mapping[str, Any], *, include_head: bool = True) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(group name, JSON pointer of the template, template) for each group."""
    spec = rc.get("spec") or {}
    if include_head and isinstance(spec.get("headGroupSpec"), Mapping):
        yield "headgroup", "/spec/headGroupSpec/template", spec["headGroupSpec"].get("template") or {}
    for i, g in enumerate(spec.get("workerGroupSpecs") or []):
        yield str(g.get("groupName", "")), f"/spec/workerGroupSpecs/{i}/template", g.get("template") or {}


def _worker_group(rc: Mapping[str, Any], group: str) -> tuple[int, Mapping[str, Any]] | None:
    for i, g in enumerate((rc.get("spec") or {}).get("workerGroupSpecs") or []):
        if g.get("groupName") == group:
            return i, g
    return None


# -- remediation ------------------------------------------------------------
def jemalloc_env(j: Jemalloc, existing_preload: str | None) -> dict[str, str]:
    libs = [p for p in (existing_preload or "").split(":") if p]
    preload = ":".join([j.library_path, *[p for p in libs if p != j.library_path]])
    return {"LD_PRELOAD": preload, "MALLOC_CONF": j.malloc_conf}


CALL_SITES_ENV = {"RAY_record_ref_creation_sites": "1"}

# A remediation's env reaches the Ray container through a ConfigMap of its
# own that the container's ``envFrom`` names, not through its ``env``:
# KubeRay's wait-gcs-ready init container copies the Ray container's env
# (LD_PRELOAD and MALLOC_CONF with it) and volume mounts, never its envFrom
# (seen on v1.5.1 and v1.7.0: docs/facts.md). One ConfigMap per kind and
# worker group, owned by the RayCluster (gone with it). Where the Ray
# container's own env sets one of the variables, env wins over envFrom, so
# that remediation is written into the env as before.
REMEDY_CONFIGMAP = pi.REMEDY_CONFIGMAP
ENV_FROM = pi.ENV_FROM  # a pod's remedy_env key: it reads this remediation ConfigMap
REMEDY_LABEL = C.LABEL_REMEDY


def remedy_configmap(cluster: str, group: str, kind: str) -> str:
    """Its name: a DNS subdomain that ends in a hash of the kind, cluster and
    group apart. Joined with dashes alone, RayCluster ``ray`` group
    ``gpu-workers`` and RayCluster ``ray-gpu`` group ``workers`` shared one,
    and each one's remediation wrote the other's env (issue 63, 3); group
    names may also hold what a name may not, and be too long."""
    readable = re.sub(r"[^a-z0-9.-]", "-", f"{REMEDY_CONFIGMAP}-{kind}-{cluster}-{group}".lower()).strip("-.")
    tag = hashlib.sha256("\0".join((kind, cluster, group)).encode()).hexdigest()[:10]
    return f"{readable[:230].rstrip('-.')}-{tag}"


def env_from_mark(configmap: str) -> dict[str, str]:
    """What a pod reading the ConfigMap shows of it (podinfo.remedy_env), and
    what a review of the remediation looks for."""
    return {ENV_FROM + configmap: "1"}


def remedy_configmap_body(rc: Mapping[str, Any], name: str, kind: str, env: Mapping[str, str]) -> dict[str, Any]:
    meta = rc.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": name, "namespace": meta.get("namespace"),
        "labels": {"app.kubernetes.io/managed-by": "memoryguard", REMEDY_LABEL: kind},
        "ownerReferences": [{"apiVersion": rc.get("apiVersion", "ray.io/v1"), "kind": "RayCluster",
                             "name": meta.get("name"), "uid": meta.get("uid"), "blockOwnerDeletion": False}]},
        "data": dict(env)}


def env_sets(rc: Mapping[str, Any], group: str, names: Sequence[str]) -> list[str]:
    """Which of ``names`` the group's Ray container sets in its own env."""
    found = _worker_group(rc, group)
    containers = ((found[1].get("template") or {}).get("spec") or {}).get("containers") or [] if found else []
    env = {e.get("name") for e in (containers[RAY_CONTAINER].get("env") or [] if containers else [])}
    return [n for n in names if n in env]


def wanted_env(spec: GuardSpec, kind: str, preload: str | None = None) -> dict[str, str]:
    """The env a remediation of ``kind`` ("jemalloc", "spilling",
    "callsites") sets, as the guard's spec says (``preload``: the
    LD_PRELOAD the Ray container has already)."""
    return (jemalloc_env(spec.jemalloc, preload) if kind == "jemalloc"
            else spilling_env(spec.spilling) if kind == "spilling" else dict(CALL_SITES_ENV))


def mode_of(spec: GuardSpec, kind: str) -> Mode:
    modes = {"jemalloc": spec.jemalloc.mode, "spilling": spec.spilling.mode, "callsites": spec.forensics.call_sites}
    return modes[kind]


def spilling_env(s: Spilling) -> dict[str, str]:
    return {
        "RAY_object_spilling_threshold": f"{s.threshold_percent / 100:g}",
        "RAY_min_spilling_size": str(s.min_spilling_size_bytes),
        "RAY_object_spilling_config": json.dumps(
            {"type": "filesystem", "params": {"directory_path": list(s.directories)}}, separators=(",", ":")),
    }


def env_ops(container_path: str, container: Mapping[str, Any], wanted: Mapping[str, str]) -> list[Op]:
    """Ops that make ``container``'s env hold ``wanted`` (other vars kept)."""
    env = list(container.get("env") or [])
    if not container.get("env"):
        return [{"op": "add", "path": f"{container_path}/env",
                 "value": [{"name": k, "value": v} for k, v in wanted.items()]}]
    ops: list[Op] = []
    for name, value in wanted.items():
        idx = next((i for i, e in enumerate(env) if e.get("name") == name), None)
        if idx is None:
            ops.append({"op": "add", "path": f"{container_path}/env/-", "value": {"name": name, "value": value}})
        elif env[idx].get("value") != value or "valueFrom" in env[idx]:
            ops.append({"op": "test", "path": f"{container_path}/env/{idx}/name", "value": name})
            ops.append({"op": "replace", "path": f"{container_path}/env/{idx}", "value": {"name": name,
                                                                                          "value": value}})
    return ops


def _annotation_map(rc: Mapping[str, Any], key: str) -> dict[str, Any]:
    raw = ((rc.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        doc = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _annotation_ops(rc: Mapping[str, Any], values: Mapping[str, str]) -> list[Op]:
    annotations = (rc.get("metadata") or {}).get("annotations")
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/annotations/{pointer_escape(k)}", "value": v} for k, v in values.items()]


def _unchanged(rc: Mapping[str, Any]) -> list[Op]:
    """A ``test`` that the RayCluster is the one read (its resourceVersion):
    the remediation annotations are rewritten whole from it, so two patches
    computed from one read (two groups remediated in one cycle) would keep
    only the second's record. The server refuses a stale one (422)."""
    rv = (rc.get("metadata") or {}).get("resourceVersion")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}] if isinstance(rv, str) and rv else []


def _compact(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def env_from_ops(cpath: str, container: Mapping[str, Any], configmap: str) -> list[Op]:
    refs = list(container.get("envFrom") or [])
    if any((r.get("configMapRef") or {}).get("name") == configmap for r in refs if isinstance(r, Mapping)):
        return []
    value = {"configMapRef": {"name": configmap, "optional": True}}
    # optional: a ConfigMap deleted by hand costs the settings, never the pod's start.
    return [{"op": "add", "path": f"{cpath}/envFrom/-", "value": value} if refs else
            {"op": "add", "path": f"{cpath}/envFrom", "value": [value]}]


def remediation_patch(rc: Mapping[str, Any], group: str, wanted_env: Mapping[str, str], *, record: str,
                      configmap: str | None = None) -> list[Op]:
    """Ops setting ``wanted_env`` on the Ray container of a worker group, and
    recording what and why in the RayCluster's annotation, and what each
    variable was before (for a revert). Empty when the env already holds it
    (idempotent). ``configmap``: the env is in that ConfigMap (written
    first by the caller), and the container's envFrom is made to name it."""
    found = _worker_group(rc, group)
    if found is None:
        return []
    i, g = found
    containers = ((g.get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
        return []
    cpath = f"/spec/workerGroupSpecs/{i}/template/spec/containers/{RAY_CONTAINER}"
    if configmap is not None:
        ops = env_from_ops(cpath, containers[RAY_CONTAINER], configmap)
        if not ops:
            return []
        history = _annotation_map(rc, REMEDIATION_ANNOTATION)
        history[group] = {**(history.get(group) or {}), ENV_FROM + configmap: record}
        guard = [*_unchanged(rc), {"op": "test", "path": f"/spec/workerGroupSpecs/{i}/groupName", "value": group}]
        return [*guard, *ops, *_annotation_ops(rc, {REMEDIATION_ANNOTATION: _compact(history)})]
    ops = env_ops(cpath, containers[RAY_CONTAINER], wanted_env)
    if not ops:
        return []
    history = _annotation_map(rc, REMEDIATION_ANNOTATION)
    history[group] = {**(history.get(group) or {}), **{k: record for k in wanted_env}}
    previous = _annotation_map(rc, PREVIOUS_ANNOTATION)
    was_raw = previous.get(group)
    was: dict[str, Any] = was_raw if isinstance(was_raw, dict) else {}
    env = {e.get("name"): e for e in containers[RAY_CONTAINER].get("env") or []}
    # The first value seen is the user's: a second remediation of the same
    # variable (LD_PRELOAD) must not take MemoryGuard's own as "before".
    previous[group] = {**{k: env.get(k) for k in wanted_env}, **was}
    guard = [*_unchanged(rc), {"op": "test", "path": f"/spec/workerGroupSpecs/{i}/groupName", "value": group}]
    notes = _annotation_ops(rc, {REMEDIATION_ANNOTATION: _compact(history), PREVIOUS_ANNOTATION: _compact(previous)})
    return [*guard, *ops, *notes]


def revert_patch(rc: Mapping[str, Any], group: str, wanted_env: Mapping[str, str]) -> list[Op] | str:
    """Ops undoing a remediation exactly: each variable back to what the
    RayCluster's annotation says it was (removed where it was absent), each
    guarded by a ``test`` that it still holds what MemoryGuard set (a value
    someone changed since is theirs: the server refuses the patch). A
    string says why there is nothing to undo."""
    found = _worker_group(rc, group)
    if found is None:
        return f"the RayCluster has no worker group {group} any more"
    i, g = found
    containers = ((g.get("template") or {}).get("spec") or {}).get("containers") or []
    if wanted_env and all(k.startswith(ENV_FROM) for k in wanted_env):
        return _revert_env_from(rc, group, i, containers, [k.removeprefix(ENV_FROM) for k in wanted_env])
    env = list((containers[RAY_CONTAINER] if containers else {}).get("env") or [])
    was = _annotation_map(rc, PREVIOUS_ANNOTATION).get(group)
    if not isinstance(was, dict) or not all(k in was for k in wanted_env):
        return f"the RayCluster's {PREVIOUS_ANNOTATION} annotation does not say what group {group} had before"
    cpath = f"/spec/workerGroupSpecs/{i}/template/spec/containers/{RAY_CONTAINER}/env"
    ops: list[Op] = [*_unchanged(rc), {"op": "test", "path": f"/spec/workerGroupSpecs/{i}/groupName", "value": group}]
    removals: list[int] = []
    for name, value in wanted_env.items():
        idx = next((n for n, e in enumerate(env) if e.get("name") == name), None)
        if idx is None or env[idx].get("value") != value:
            return f"{name} in group {group} is no longer what MemoryGuard set: left as it is"
        ops.append({"op": "test", "path": f"{cpath}/{idx}", "value": env[idx]})
        before = was[name]
        forged = _not_ours(name, value, before)
        if forged:
            return f"the record of what {name} was in group {group} is not one MemoryGuard wrote ({forged}): refused"
        if isinstance(before, dict) and isinstance(before.get("name"), str):
            ops.append({"op": "replace", "path": f"{cpath}/{idx}", "value": before})
        else:
            removals.append(idx)
    if removals and len(removals) == len(env):
        ops.append({"op": "remove", "path": cpath})  # nothing left: the template had no env
    else:
        # Highest index first: each removal leaves the indices before it as they were.
        ops += [{"op": "remove", "path": f"{cpath}/{idx}"} for idx in sorted(removals, reverse=True)]
    history = _annotation_map(rc, REMEDIATION_ANNOTATION)
    previous = _annotation_map(rc, PREVIOUS_ANNOTATION)
    for doc in (history, previous):
        left = {k: v for k, v in (doc.get(group) or {}).items() if k not in wanted_env}
        if left:
            doc[group] = left
        else:
            doc.pop(group, None)
    return ops + _annotation_ops(rc, {REMEDIATION_ANNOTATION: _compact(history),
                                      PREVIOUS_ANNOTATION: _compact(previous)})


def _not_ours(name: str, set_value: str, before: Any) -> str:
    """Why ``before`` (read from the RayCluster's annotation, which anyone who
    may edit the RayCluster can write) cannot be what MemoryGuard recorded,
    or "" (issue 44, 2). It must be absent (null) or an env entry of that
    name; and since jemalloc's ``LD_PRELOAD`` is the library put before what
    was there, what was there is what follows it, and nothing else."""
    if before is None:
        return "" if name != "LD_PRELOAD" or ":" not in set_value else "LD_PRELOAD had libraries after jemalloc's"
    if not isinstance(before, dict) or before.get("name") != name or set(before) - {"name", "value", "valueFrom"}:
        return "not an env entry of that name"
    if name == "LD_PRELOAD":
        rest = set_value.split(":", 1)[1] if ":" in set_value else None
        if before.get("value") != rest or "valueFrom" in before:
            return "not the libraries that followed jemalloc's"
    return ""


def _revert_env_from(rc: Mapping[str, Any], group: str, i: int, containers: Sequence[Mapping[str, Any]],
                     configmaps: Sequence[str]) -> list[Op] | str:
    """The envFrom entries naming these ConfigMaps out of the Ray
    container (their ConfigMaps stay, owned by the RayCluster: pods that
    run with them keep what they started with either way)."""
    cpath = f"/spec/workerGroupSpecs/{i}/template/spec/containers/{RAY_CONTAINER}/envFrom"
    refs = list((containers[RAY_CONTAINER] if containers else {}).get("envFrom") or [])
    idx = [n for n, r in enumerate(refs) if isinstance(r, Mapping)
           and (r.get("configMapRef") or {}).get("name") in configmaps]
    if len(idx) != len(configmaps):
        return f"group {group} no longer reads {', '.join(configmaps)}: left as it is"
    ops: list[Op] = [*_unchanged(rc), {"op": "test", "path": f"/spec/workerGroupSpecs/{i}/groupName", "value": group}]
    ops += [{"op": "test", "path": f"{cpath}/{n}", "value": refs[n]} for n in idx]
    ops += ([{"op": "remove", "path": cpath}] if len(idx) == len(refs) else
            [{"op": "remove", "path": f"{cpath}/{n}"} for n in sorted(idx, reverse=True)])
    history = _annotation_map(rc, REMEDIATION_ANNOTATION)
    left = {k: v for k, v in (history.get(group) or {}).items() if k.removeprefix(ENV_FROM) not in configmaps}
    if left:
        history[group] = left
    else:
        history.pop(group, None)
    return ops + _annotation_ops(rc, {REMEDIATION_ANNOTATION: _compact(history)})
