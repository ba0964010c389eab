"""One home for every name MemoryGuard and its parts agree on: the API group
and kind, the keys it writes on objects, the sidecar's container name, port,
paths and env, and the keys of KubeRay it reads. Modelled on KubeRay's
``ray-operator/controllers/ray/utils/constant.go``: a fact written once here
and imported wherever it is used (a test holds that no other module spells
one of these strings: tests/core/test_constants.py).

Pure data, in the core: the operator, the sidecar and the devkit import it,
and the sidecar's image has only the core and the sidecar."""

from __future__ import annotations

# -- the API ---------------------------------------------------------------
GROUP = "memoryguard.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MemoryGuard"
PLURAL = "memoryguards"
REPORTING_COMPONENT = f"{GROUP}/operator"  # events.k8s.io/v1 reportingController

# -- keys MemoryGuard writes or reads on objects ----------------------------
PREFIX = f"{GROUP}/"
# On a pod, by a rotation (and taken back when it ends without the pod going).
ANN_REQUESTED_AT = PREFIX + "rotation-requested-at"
ANN_REASON = PREFIX + "rotation-reason"
ANN_PHASE = PREFIX + "rotation-phase"  # draining | evicting
ANN_GUARD = PREFIX + "rotation-guard"
ANN_DRAIN = PREFIX + "rotation-drain"
# The grace period asked of an eviction once Ray accepted the node's drain
# (issue 58, 4): the drain has moved the node's work off, and KubeRay's
# `bash -c "...; ray start --block"` does not pass SIGTERM on, so the pod's
# own grace period (30 s by default) only delays KubeRay's replacement (it
# waits for the old pod to be gone): measured on the cluster kit, the Ray
# container was killed at its end, exit 137. A few seconds are kept for the
# sidecar's last answers. Without an accepted drain the pod's own is kept.
DRAINED_GRACE_SECONDS = 5
# On a pod, by a user: rotate it now.
ANN_ROTATE = PREFIX + "rotate"
# On a pod, by the operator: its pressure level and the ladder's step asked
# (core/pressure.py's JSON), shown to its containers as a file by a
# downward API volume (PRESSURE_VOLUME at PRESSURE_DIR/PRESSURE_FILE).
ANN_PRESSURE = PREFIX + "pressure"
PRESSURE_VOLUME = "memoryguard-pressure"
PRESSURE_DIR = "/etc/memoryguard"
PRESSURE_FILE = "pressure"
# On a RayCluster, by the operator.
ANN_INJECTED = PREFIX + "injected"
ANN_REMEDIATION = PREFIX + "remediation"
# What each remediated variable was before MemoryGuard set it: a revert
# gives back exactly that (validated as something MemoryGuard could set).
ANN_REMEDIATION_PREVIOUS = PREFIX + "remediation-previous"
# On a remediation's ConfigMap.
LABEL_REMEDY = PREFIX + "remedy"
# On a forensics ConfigMap.
LABEL_GUARD = PREFIX + "guard"
LABEL_POD = PREFIX + "pod"
LABEL_ARTIFACT = PREFIX + "artifact"
ANN_COLLECTED_AT = PREFIX + "collected-at"
# On the operator's Leases (sharding).
LABEL_LEASE_SET = PREFIX + "lease-set"
ANN_SHARDS = PREFIX + "shards"
ANN_PODS = PREFIX + "pods"

# -- KubeRay's keys (ray-operator/controllers/ray/utils/constant.go) -------
LABEL_CLUSTER = "ray.io/cluster"
LABEL_NODE_TYPE = "ray.io/node-type"
LABEL_GROUP = "ray.io/group"
LABEL_IS_RAY_NODE = "ray.io/is-ray-node"
LABEL_REPLICA_NAME = "ray.io/worker-group-replica-name"  # v1.6+: the hosts of one multi-host replica
HEAD_GROUP = "headgroup"  # the group label of the head pod
RAY_METRICS_PATH = "/metrics"  # the raylet's Prometheus page (Ray's, like ours by convention)
RAY_GROUP, RAY_VERSION, RAYCLUSTERS = "ray.io", "v1", "rayclusters"

# -- the kubelet's defaults --------------------------------------------------
# The hard eviction threshold (memory.available<100Mi): a pod with no memory
# limit is evicted, or the node's OOM killer acts, about there.
KUBELET_EVICTION_MEMORY_AVAILABLE_BYTES = 100 * 1024 * 1024
# Ray's object_spilling_threshold, its default: past this share of the
# object store Ray spills the objects it can to disk (window.py judges a
# stalled spilling by it; tracegen.py spills by it).
RAY_SPILL_THRESHOLD = 0.8

# -- the sidecar -------------------------------------------------------------
SIDECAR_NAME = "memoryguard-sidecar"  # the injected container
SIDECAR_PORT = 9108
SIDECAR_PORT_NAME = "mg-sidecar"
PATH_SAMPLES = "/v1/samples"  # ?since=<unix s>: {"source", "samples": [...], "more"?, "pod"?: {uid, name}}
PATH_PROCESSES = "/v1/processes"
PATH_METRICS = "/metrics"
PATH_HEALTHZ = "/healthz"
# Samples in one /v1/samples answer at most (about 240 KB); the operator
# takes at most OPERATOR_MAX_SAMPLES in one, so a sidecar's page is always taken.
PAGE_SAMPLES = 1000
OPERATOR_MAX_SAMPLES = 2 * PAGE_SAMPLES
ENV_PREFIX = "MEMORYGUARD_"


def sidecar_env(flag: str) -> str:
    """The env variable that sets a sidecar flag: ``--pod-uid`` is
    ``MEMORYGUARD_POD_UID``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


ENV_MEMORY_LIMIT_BYTES = sidecar_env("--memory-limit-bytes")  # the downward API's limits.memory
ENV_POD_UID = sidecar_env("--pod-uid")
ENV_POD_NAME = sidecar_env("--pod-name")
ENV_RAY_METRICS_URL = sidecar_env("--ray-metrics-url")
# KubeRay's DefaultMetricsPort: the raylet's Prometheus port (``ray start
# --metrics-export-port``) that KubeRay writes where a group's rayStartParams
# names none (docs/facts.md).
RAY_METRICS_PORT = 8080
RAY_METRICS_PARAM = "metrics-export-port"


def ray_metrics_url(port: int = RAY_METRICS_PORT) -> str:
    """The raylet's Prometheus endpoint as the sidecar reads it, in its own pod."""
    return f"http://127.0.0.1:{port}/metrics"
