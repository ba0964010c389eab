"""What the operator reads off a pod, and the annotations it writes there.
Purely computational."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

ANN_PREFIX = "memoryguard.io/"
MAX_ANNOTATION = 4096  # characters of one annotation kept
ANN_REQUESTED_AT = "memoryguard.io/rotation-requested-at"
ANN_REASON = "memoryguard.io/rotation-reason"
ANN_PHASE = "memoryguard.io/rotation-phase"  # draining | evicting
ANN_GUARD = "memoryguard.io/rotation-guard"
ANN_DRAIN = "memoryguard.io/rotation-drain"
ANN_ROTATE = "memoryguard.io/rotate"  # set by a user: "now"
# What a rotation writes on a pod, and takes back when it ends without the
# pod going (or when its guard is deleted).
ROTATION_ANNOTATIONS = (ANN_REQUESTED_AT, ANN_REASON, ANN_PHASE, ANN_GUARD, ANN_DRAIN)

LABEL_CLUSTER = "ray.io/cluster"
LABEL_NODE_TYPE = "ray.io/node-type"
LABEL_GROUP = "ray.io/group"
HEAD_GROUP = "headgroup"  # KubeRay labels the head pod with this group name
LABEL_IS_RAY_NODE = "ray.io/is-ray-node"
SIDECAR_NAME = "memoryguard-sidecar"  # the container the operator injects


@dataclasses.dataclass(frozen=True)
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

    @property
    def rotation_phase(self) -> str | None:
        return self.annotations.get(ANN_PHASE)

    @property
    def user_requested(self) -> bool:
        return self.annotations.get(ANN_ROTATE, "").strip().lower() == "now"


def _obj(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


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
        name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")), uid=str(meta.get("uid", "")),
        ip=status.get("podIP") if isinstance(status.get("podIP"), str) and status.get("podIP") else None,
        cluster=str(labels.get(LABEL_CLUSTER, "")),
        group=str(labels.get(LABEL_GROUP, "")), is_head=labels.get(LABEL_NODE_TYPE) == "head",
        phase=str(status.get("phase", "")), ready=ready, terminating=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp", "")),
        # Only MemoryGuard's own, each cut short: what else a pod carries
        # (possibly megabytes) is not kept for it.
        annotations={str(k): v[:MAX_ANNOTATION] for k, v in ann.items()
                     if isinstance(v, str) and str(k).startswith(ANN_PREFIX)},
        injected_sidecar=any(_obj(c).get("name") == SIDECAR_NAME for c in _containers(pod)),
    )


def _containers(pod: Mapping[str, Any]) -> list[Any]:
    spec = _obj(pod.get("spec"))
    out: list[Any] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            out += items
    return out
