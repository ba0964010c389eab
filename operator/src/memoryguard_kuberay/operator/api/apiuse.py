"""Every (API group, resource, verbs) the operator uses, in one place:
kube.py calls nothing else, and the chart's RBAC rules must equal these
lists (tests/deploy/test_chart.py), so the operator can never need a
permission the chart does not grant, nor the chart grant one the code does
not use. Pure data.
"""

from __future__ import annotations

from memoryguard_kuberay.core import constants as C

# (apiGroup, resource, verbs): exactly what this module's methods call, plus
# what kopf itself needs to watch MemoryGuards (list, watch, patch for its
# finalizer and progress annotations) and to discover namespaces and CRDs.
# The chart's RBAC rules must equal this (tests/deploy/test_chart.py).
API_USE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # get: a served guard's spec, read when a younger guard must know which
    # clusters it takes (guardroster.py lists guards as metadata alone).
    (C.GROUP, C.PLURAL, ("get", "list", "watch", "patch")),
    (C.GROUP, f"{C.PLURAL}/status", ("patch",)),
    (C.RAY_GROUP, C.RAYCLUSTERS, ("get", "list", "patch")),
    # Pods are listed in pages and watched (podcache.py), never listed whole every cycle.
    ("", "pods", ("list", "watch", "patch")),
    ("", "pods/eviction", ("create",)),
    ("", "events", ("create",)),
    # Read with one label-selected LIST per guard per cycle, not a GET per group.
    ("policy", "poddisruptionbudgets", ("list", "create", "patch", "delete")),
    # The evidence kept before a rotation (forensics.py): one ConfigMap per
    # rotation, owned by the guard, the oldest deleted past spec.forensics.keep.
    # And a remediation's env (remediation.py): one ConfigMap per kind and
    # worker group, owned by the RayCluster, replaced whole (get, update) when
    # one is there already (Kube.put_configmap); read by the admission webhook
    # (get) before it names one in a new pod's envFrom.
    ("", "configmaps", ("get", "create", "update", "list", "patch", "delete")),
)
# What the chart's pre-delete hook (``memoryguard-kuberay uninstall``) needs: delete
# every guard and watch them go while the operator still runs their
# finalizers. Its own ServiceAccount and ClusterRole, only for the hook.
API_USE_UNINSTALL: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (C.GROUP, C.PLURAL, ("list", "delete")),
)
# Shards among replicas (shards.py): a Lease per shard and one per replica in
# the operator's own namespace, with a Role there. Listed to see who is
# alive; a replica gone for long has its presence Lease deleted by another.
API_USE_LEADER: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("coordination.k8s.io", "leases", ("get", "list", "create", "update", "delete")),
)
# Cluster-scoped reads kopf makes in any mode (not namespaced).
API_USE_CLUSTER: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "namespaces", ("get", "list", "watch")),
    ("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list", "watch")),
)
