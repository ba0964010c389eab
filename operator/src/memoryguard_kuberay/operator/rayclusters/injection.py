"""The sidecar's injection into a RayCluster's pod templates, and its
removal: RFC 6902 operations, purely computational, as patches.py's are
(with ``test`` ops, so that a patch computed from a stale read is refused).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.guardspec import SidecarInjection
from memoryguard_kuberay.operator.rayclusters.patches import RAY_CONTAINER, Op, pointer_escape, templates

SIDECAR_NAME = C.SIDECAR_NAME
SHM_VOLUME = "memoryguard-shm"
# The ladder's step asked of the pod (its memoryguard.io/pressure annotation),
# a file in the Ray container that the kubelet keeps up to date (core/pressure.py).
PRESSURE_VOLUME = C.PRESSURE_VOLUME
NO_TOKEN_VOLUME = "memoryguard-no-token"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
INJECTED_ANNOTATION = C.ANN_INJECTED
# Ray's own images run Ray as user "ray": uid 1000, gid 100 ("users"). The
# sidecar reads the Ray processes' cgroup through /proc/<pid>/root, which
# the kernel allows only to a process of the same uid AND gid (or one with
# CAP_SYS_PTRACE, which it does not have): seen on a real kubelet, a sidecar
# at 1000:1000 beside Ray at 1000:100 was denied every file (docs/facts.md).
RAY_IMAGE_UID, RAY_IMAGE_GID = 1000, 100


def _annotation_op(tpath: str, tpl: Mapping[str, Any], key: str, value: str) -> Op:
    meta = tpl.get("metadata")
    if not meta:
        return {"op": "add", "path": f"{tpath}/metadata", "value": {"annotations": {key: value}}}
    if not meta.get("annotations"):
        return {"op": "add", "path": f"{tpath}/metadata/annotations", "value": {key: value}}
    return {"op": "add", "path": f"{tpath}/metadata/annotations/{pointer_escape(key)}", "value": value}


def ray_identity(pod_spec: Mapping[str, Any], ray: Mapping[str, Any]) -> tuple[int, int]:
    """The uid and gid the Ray container runs as, as far as the template
    says (its securityContext, else the pod's), else those of Ray's images."""
    ctx = ray.get("securityContext") or {}
    pod = pod_spec.get("securityContext") or {}

    def pick(key: str, default: int) -> int:
        value = ctx.get(key, pod.get(key))
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31 else default

    return pick("runAsUser", RAY_IMAGE_UID), pick("runAsGroup", RAY_IMAGE_GID)


def metrics_port(group_spec: Mapping[str, Any]) -> int:
    """The port a group's raylet serves its Prometheus metrics on, as
    KubeRay starts it: the group's ``rayStartParams`` ``metrics-export-port``,
    else KubeRay's default. A value that is no port number (the RayCluster's
    author may write anything) reads as the default: Ray would refuse it."""
    raw = (group_spec.get("rayStartParams") or {}).get(C.RAY_METRICS_PARAM)
    text = str(raw).strip().strip("'\"") if isinstance(raw, str | int) and not isinstance(raw, bool) else ""
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else C.RAY_METRICS_PORT


def sidecar_container(s: SidecarInjection, ray_container_name: str, shm_volume: str,
                      identity: tuple[int, int] = (RAY_IMAGE_UID, RAY_IMAGE_GID),
                      ray_metrics_port: int = C.RAY_METRICS_PORT) -> dict[str, Any]:
    """The injected container. ``identity``: the Ray container's uid and gid,
    which the sidecar must share to read its processes (never root: a Ray
    container running as root is read only where it shares nothing else).
    ``ray_metrics_port``: where the raylet of that pod serves its metrics
    (the object store's figures come from there)."""
    uid, gid = identity
    return {
        "name": SIDECAR_NAME,
        "image": s.image,
        "args": ["sidecar", "--listen", f"0.0.0.0:{s.port}"],
        "ports": [{"name": C.SIDECAR_PORT_NAME, "containerPort": s.port, "protocol": "TCP"}],
        "env": [{"name": C.ENV_MEMORY_LIMIT_BYTES, "valueFrom": {"resourceFieldRef": {
            "containerName": ray_container_name, "resource": "limits.memory"}}},
                # Sent with every answer: the operator drops samples from a pod
                # that is not the one it asked (an IP taken over by another pod).
                {"name": C.ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": C.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": C.ENV_RAY_METRICS_URL, "value": C.ray_metrics_url(ray_metrics_port)}],
        "resources": {"requests": {"cpu": s.cpu_request, "memory": s.memory_request},
                      "limits": {"memory": s.memory_limit}},
        # No readinessProbe: a pod is Ready only when all its containers are,
        # and the sidecar's health must never decide whether the Ray pod
        # serves. Liveness restarts only a sampling loop stalled for minutes.
        "livenessProbe": {"httpGet": {"path": C.PATH_HEALTHZ, "port": s.port}, "periodSeconds": 30,
                          "timeoutSeconds": 5, "failureThreshold": 5},
        "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            {"name": shm_volume, "mountPath": "/dev/shm", "readOnly": True},
            # Shadows the service-account token: the sidecar needs no API access.
            {"name": NO_TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True},
        ],
    }


def _shm_volume(ray: Mapping[str, Any]) -> dict[str, Any]:
    """The /dev/shm volume both containers share, sized as KubeRay sizes its
    own ``shared-mem`` (which it adds only where nothing is mounted there):
    at the Ray container's memory limit, so a full store cannot take more
    of the node's memory than the Ray container may."""
    empty: dict[str, Any] = {"medium": "Memory"}
    limit = ((ray.get("resources") or {}).get("limits") or {}).get("memory")
    if isinstance(limit, str | int) and not isinstance(limit, bool) and str(limit):
        empty["sizeLimit"] = limit
    return {"name": SHM_VOLUME, "emptyDir": empty}


def _has_sidecar(spec: Mapping[str, Any]) -> bool:
    return any(c.get("name") == SIDECAR_NAME for key in ("containers", "initContainers")
               for c in spec.get(key) or [] if isinstance(c, Mapping))


def inject_patch(rc: Mapping[str, Any], s: SidecarInjection, *, groups: Sequence[str] = (),
                 include_head: bool = False, native: bool = False) -> list[Op]:
    """Ops adding the sidecar to every worker template (or the named worker
    groups), and to the head's when the guard guards the head, that lacks
    it. Idempotent: a template that has it (as a container or a native
    sidecar) is left alone. (A head no guard polls gets no sidecar: it would
    cost a container and, with hostNetwork, take the port the workers'
    sidecars need on that host.)

    ``native``: the server runs native sidecars (1.29+): the sidecar goes
    at the end of ``initContainers`` with ``restartPolicy: Always``, so it
    is restarted even in a pod whose policy is Never (Ray's autoscaler v2
    sets that), starts before KubeRay's ``wait-gcs-ready`` (which KubeRay
    appends after the template's init containers) and never holds the pod
    from ending. Otherwise it is appended to ``containers`` after the Ray
    container (KubeRay keeps container 0 as the Ray container)."""
    ops: list[Op] = []
    for group, tpath, tpl in templates(rc, include_head=include_head):
        if groups and group not in groups and group != "headgroup":
            continue
        ops += template_ops(tpath, tpl, s, native=native, ray_metrics_port=metrics_port(_group_spec(rc, tpath)))
    return ops


def template_ops(tpath: str, tpl: Mapping[str, Any], s: SidecarInjection, *, native: bool,
                 ray_metrics_port: int) -> list[Op]:
    """Ops adding the sidecar to one pod template at ``tpath``, or to a pod
    itself (``tpath`` "": a pod has a template's shape, metadata and spec;
    admission.py). None when it has the sidecar already or no container."""
    spec = tpl.get("spec") or {}
    containers = list(spec.get("containers") or [])
    if not containers or _has_sidecar(spec):
        return []
    ops: list[Op] = []
    ray = containers[RAY_CONTAINER]
    shm = next((m["name"] for m in ray.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"), None)
    volumes: list[dict[str, Any]] = [{"name": NO_TOKEN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                                     _pressure_volume()]
    mounts: list[dict[str, Any]] = [{"name": PRESSURE_VOLUME, "mountPath": C.PRESSURE_DIR, "readOnly": True}]
    if shm is None:
        # KubeRay adds its own /dev/shm volume only when the Ray container has
        # none, so mounting ours there gives both containers the same one.
        shm = SHM_VOLUME
        volumes.append(_shm_volume(ray))
        mounts.insert(0, {"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    rpath = f"{tpath}/spec/containers/{RAY_CONTAINER}/volumeMounts"
    if ray.get("volumeMounts"):
        ops.extend({"op": "add", "path": rpath + "/-", "value": m} for m in mounts)
    else:
        ops.append({"op": "add", "path": rpath, "value": mounts})
    ops.append({"op": "test", "path": f"{tpath}/spec/containers/{RAY_CONTAINER}/name", "value": ray.get("name")})
    sidecar = sidecar_container(s, str(ray.get("name", "ray")), shm, ray_identity(spec, ray), ray_metrics_port)
    if native:
        sidecar["restartPolicy"] = "Always"
        ops.append({"op": "add", "path": f"{tpath}/spec/initContainers" + ("/-" if spec.get("initContainers") else ""),
                    "value": sidecar if spec.get("initContainers") else [sidecar]})
    else:
        ops.append({"op": "add", "path": f"{tpath}/spec/containers/-", "value": sidecar})
    if spec.get("volumes"):
        ops.extend({"op": "add", "path": f"{tpath}/spec/volumes/-", "value": v} for v in volumes)
    else:
        ops.append({"op": "add", "path": f"{tpath}/spec/volumes", "value": volumes})
    if not spec.get("shareProcessNamespace"):
        # Remember that we set it, so removal gives back what the user had.
        ops.append({"op": "add", "path": f"{tpath}/spec/shareProcessNamespace", "value": True})
        ops.append(_annotation_op(tpath, tpl, INJECTED_ANNOTATION, "shareProcessNamespace"))
    return ops


def _pressure_volume() -> dict[str, Any]:
    """The pod's ``memoryguard.io/pressure`` annotation as a file (empty
    while the annotation is not set): the downward API, which the kubelet
    refreshes, needs no network and no credentials in the Ray container."""
    field = f"metadata.annotations['{C.ANN_PRESSURE}']"
    return {"name": PRESSURE_VOLUME, "downwardAPI": {"items": [{"path": C.PRESSURE_FILE,
                                                                "fieldRef": {"fieldPath": field}}]}}


def _group_spec(rc: Mapping[str, Any], tpath: str) -> Mapping[str, Any]:
    """The head's or worker group's spec whose template is at ``tpath``."""
    node: Any = rc
    for part in tpath.strip("/").split("/")[:-1]:  # up to the group, not its template
        node = node[int(part)] if isinstance(node, list) else node.get(part)
    return node if isinstance(node, Mapping) else {}


def _remove_items(path: str, items: Sequence[Mapping[str, Any]], names: set[str]) -> list[Op]:
    """Remove the named items of a list; the whole list when nothing else is
    in it (so the template reads as it did before the injection)."""
    idx = [i for i, item in enumerate(items) if item.get("name") in names]
    if not idx:
        return []
    if len(idx) == len(items):
        return [{"op": "remove", "path": path}]
    return [{"op": "remove", "path": f"{path}/{i}"} for i in reversed(idx)]


def uninject_patch(rc: Mapping[str, Any]) -> list[Op]:
    """Ops removing everything ``inject_patch`` added (indices from the end
    so earlier removals do not shift later ones)."""
    ops: list[Op] = []
    for _, tpath, tpl in templates(rc):
        spec = tpl.get("spec") or {}
        containers = list(spec.get("containers") or [])
        for i in reversed(range(len(containers))):
            if containers[i].get("name") == SIDECAR_NAME:
                ops.append({"op": "test", "path": f"{tpath}/spec/containers/{i}/name", "value": SIDECAR_NAME})
                ops.append({"op": "remove", "path": f"{tpath}/spec/containers/{i}"})
        inits = [c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
        if any(c.get("name") == SIDECAR_NAME for c in inits):  # the native sidecar
            ops += [{"op": "test", "path": f"{tpath}/spec/initContainers/{i}/name", "value": SIDECAR_NAME}
                    for i, c in enumerate(inits) if c.get("name") == SIDECAR_NAME]
            ops += _remove_items(f"{tpath}/spec/initContainers", inits, {SIDECAR_NAME})
        if containers:
            ops += _remove_items(f"{tpath}/spec/containers/{RAY_CONTAINER}/volumeMounts",
                                 containers[RAY_CONTAINER].get("volumeMounts") or [], {SHM_VOLUME, PRESSURE_VOLUME})
        ops += _remove_items(f"{tpath}/spec/volumes", spec.get("volumes") or [],
                             {SHM_VOLUME, NO_TOKEN_VOLUME, PRESSURE_VOLUME})
        meta = tpl.get("metadata") or {}
        ann = meta.get("annotations") or {}
        if ann.get(INJECTED_ANNOTATION) == "shareProcessNamespace":
            ops.append({"op": "remove", "path": f"{tpath}/spec/shareProcessNamespace"})
            if len(ann) > 1:
                key = pointer_escape(INJECTED_ANNOTATION)
                ops.append({"op": "remove", "path": f"{tpath}/metadata/annotations/{key}"})
            elif len(meta) > 1:
                ops.append({"op": "remove", "path": f"{tpath}/metadata/annotations"})
            else:
                ops.append({"op": "remove", "path": f"{tpath}/metadata"})
    return ops
