"""What the operator reads off a pod, and the annotations it writes there.
Purely computational."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import types
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.constants import (
    ANN_DRAIN,
    ANN_GUARD,
    ANN_PHASE,
    ANN_PRESSURE,
    ANN_REASON,
    ANN_REQUESTED_AT,
    ANN_ROTATE,
    LABEL_CLUSTER,
    LABEL_GROUP,
    LABEL_NODE_TYPE,
    LABEL_REPLICA_NAME,
    SIDECAR_NAME,
)

MAX_ANNOTATION = 512  # characters of one annotation kept (the operator writes at most 256)
ROTATE_VALUES = ("now", "true")  # what the operator takes as a user's ask
# What a rotation writes on a pod, and takes back when it ends without the
# pod going (or when its guard is deleted).
ROTATION_ANNOTATIONS = (ANN_REQUESTED_AT, ANN_REASON, ANN_PHASE, ANN_GUARD, ANN_DRAIN)
READ_ANNOTATIONS = (*ROTATION_ANNOTATIONS, ANN_ROTATE, ANN_PRESSURE)  # all the pod cache keeps of a pod's annotations

MAX_LABEL = 63  # a label value's longest valid length
# The env a remediation sets, read off a pod's Ray container: which pods run
# the remediated template (the review compares them with those before).
REMEDY_ENV_NAMES = frozenset({"LD_PRELOAD", "MALLOC_CONF", "RAY_object_spilling_threshold",
                              "RAY_object_spilling_config", "RAY_min_spilling_size",
                              "RAY_record_ref_creation_sites"})  # exactly these: a name is kept only if it is one
# A remediation read from a ConfigMap (the Ray container's envFrom names
# it): the pod shows that, not the values (patches.py says why).
REMEDY_CONFIGMAP = "memoryguard-remedy"
ENV_FROM = "envFrom:"
MAX_ENV_READ = 256  # a Ray container's env entries read (the rest of a hostile pod's is not looked at)
MAX_VALUE = 1024  # characters of one value kept


NOTHING: Mapping[str, str] = types.MappingProxyType({})  # most pods' annotations of ours and remedy env


@dataclasses.dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    namespace: str
    uid: str
    ip: str | None
    cluster: str
    group: str
    is_head: bool
    phase: str
    ready: bool
    terminating: bool
    created: str
    annotations: Mapping[str, str]
    # The pod runs the sidecar the operator injects, which knows its pod's
    # uid (downward API): its answers must name it.
    injected_sidecar: bool = False
    # Of the Ray container: the remediation env it runs with, and a short hash
    # of what its template gave it (image, command, args, env, resources): pods
    # of one template revision share it, so their creep can be compared.
    remedy_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    template: str = ""
    # The multi-host replica it is a host of (KubeRay's
    # ray.io/worker-group-replica-name, numOfHosts > 1); "" for a pod that
    # is its own replica. The hosts of one replica go together.
    replica: str = ""
    # The Ray container (the first) started and running, whether or not the
    # pod is Ready: a RayService's worker is Ready only once a Serve proxy
    # runs on it, which Serve starts only where a replica is (docs/facts.md).
    ray_started: bool = False

    @property
    def rotation_phase(self) -> str | None:
        return self.annotations.get(ANN_PHASE)

    @property
    def user_requested(self) -> bool:
        return self.annotations.get(ANN_ROTATE, "").strip().lower() in ROTATE_VALUES

    @property
    def ask_ignored(self) -> str | None:
        """A ``memoryguard.io/rotate`` value the operator does not take."""
        value = self.annotations.get(ANN_ROTATE)
        return None if value is None or self.user_requested else value


def _obj(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _shared(x: str) -> str:
    """One copy of a string many pods carry (namespace, cluster, group,
    phase, template, remedy env): the cache holds every pod of the watched
    namespaces, and a copy each of these was about a fifth of a pod's entry.
    Interned strings go when no pod holds them any more."""
    return sys.intern(str(x))


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """Tolerant of any shape: a field of the wrong type reads as absent."""
    meta = _obj(pod.get("metadata"))
    labels = _obj(meta.get("labels"))
    status = _obj(pod.get("status"))
    raw_conds = status.get("conditions")
    conds: list[Any] = raw_conds if isinstance(raw_conds, list) else []
    ready = any(_obj(c).get("type") == "Ready" and _obj(c).get("status") == "True" for c in conds)
    ann = _obj(meta.get("annotations"))
    return PodInfo(
        name=str(meta.get("name", "")), namespace=_shared(str(meta.get("namespace", ""))),
        uid=str(meta.get("uid", "")),
        ip=status.get("podIP") if isinstance(status.get("podIP"), str) and status.get("podIP") else None,
        cluster=_shared(str(labels.get(LABEL_CLUSTER, ""))),
        group=_shared(str(labels.get(LABEL_GROUP, ""))), is_head=labels.get(LABEL_NODE_TYPE) == "head",
        phase=_shared(str(status.get("phase", ""))), ready=ready, terminating=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp", "")),
        # Only the annotations the operator reads, each cut short: what else
        # a pod carries (any number of memoryguard.io/ keys, megabytes) is not
        # kept for it (issue 44, 1: 62 keys of 4 KiB a pod were).
        annotations={k: v[:MAX_ANNOTATION] for k in READ_ANNOTATIONS
                     if isinstance(v := ann.get(k), str)} or NOTHING,
        injected_sidecar=any(_obj(c).get("name") == SIDECAR_NAME for c in _containers(pod)),
        replica=_shared(str(labels.get(LABEL_REPLICA_NAME, ""))[:MAX_LABEL]),
        ray_started=_ray_started(pod, status),
        **_ray_container(pod),
    )


def _ray_started(pod: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    containers = _obj(pod.get("spec")).get("containers")
    name = _obj(containers[0]).get("name") if isinstance(containers, list) and containers else None
    statuses = status.get("containerStatuses")
    for cs in statuses if isinstance(statuses, list) else []:
        cs = _obj(cs)
        if cs.get("name") == name:
            return cs.get("started") is True and bool(_obj(cs.get("state")).get("running"))
    return False


def _ray_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    """remedy_env and template of the Ray container (KubeRay's first)."""
    containers = _obj(pod.get("spec")).get("containers")
    ray = _obj(containers[0]) if isinstance(containers, list) and containers else {}
    raw_env = ray.get("env")
    env = [_obj(e) for e in (raw_env if isinstance(raw_env, list) else [])[:MAX_ENV_READ]]
    remedy = {_shared(e["name"]): _shared(e["value"][:MAX_VALUE]) for e in env if isinstance(e.get("name"), str)
              and isinstance(e.get("value"), str) and e["name"] in REMEDY_ENV_NAMES} or NOTHING
    raw_from = ray.get("envFrom")
    sources = [_obj(_obj(e).get("configMapRef")).get("name") for e in
               (raw_from if isinstance(raw_from, list) else [])[:MAX_ENV_READ]]
    marks = {_shared(ENV_FROM + n[:MAX_VALUE]): "1" for n in sources
             if isinstance(n, str) and n.startswith(REMEDY_CONFIGMAP)}
    if marks:
        remedy = {**remedy, **marks}
    if not ray:
        return {"remedy_env": remedy, "template": ""}
    shape = {k: ray.get(k) for k in ("image", "command", "args", "resources")}
    if sources:  # (absent, not empty: the revisions of pods without it keep their hash)
        shape["envFrom"] = [str(n)[:MAX_VALUE] for n in sources]
    shape["env"] = [[str(e.get("name"))[:MAX_VALUE], str(e.get("value", e.get("valueFrom")))[:MAX_VALUE]] for e in env]
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str)[:1 << 20].encode()).hexdigest()
    return {"remedy_env": remedy, "template": _shared(digest[:10])}


def _containers(pod: Mapping[str, Any]) -> list[Any]:
    spec = _obj(pod.get("spec"))
    out: list[Any] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            out += items
    return out
