"""The MemoryGuard CustomResourceDefinition, generated from the code's own
settings so the schema, the defaults and the operator cannot drift.

``python -m memoryguard_kuberay.operator.crd > crds/memoryguard.io_memoryguards.yaml``
(``make crds``) writes it; a test fails when the checked-in file differs.
Purely computational.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from memoryguard_kuberay.core.settings import crd_properties, fractional_minimum
from memoryguard_kuberay.operator import guardspec
from memoryguard_kuberay.operator import trust as tr

GROUP = "memoryguard.io"
VERSION = "v1alpha1"
PLURAL = "memoryguards"
KIND = "MemoryGuard"


def _int(desc: str, default: int, lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "description": desc, "default": default, "minimum": lo, "maximum": hi}


def _port(desc: str, default: int, lo: int) -> dict[str, Any]:
    """A sidecar port: never one Ray or the kubelet listens on (trust.py)."""
    taken = ", ".join(f"{p} ({who})" for p, who in sorted(tr.RESERVED_PORTS.items()))
    return {**_int(desc, default, lo, 65535), "x-kubernetes-validations": [
        {"rule": f"!(self in [{', '.join(str(p) for p in sorted(tr.RESERVED_PORTS))}])",
         "message": f"this port is taken in a Ray pod: not one of {taken}"}]}


def _mode(desc: str) -> dict[str, Any]:
    return {"type": "string", "description": desc, "enum": list(guardspec.Mode.ALL), "default": "off"}


def spec_schema() -> dict[str, Any]:
    top = crd_properties("")
    rotation = crd_properties("rotation")
    rotation["replacementTimeoutSeconds"] = _int(
        "How long to wait for KubeRay's replacement to be Running and Ready before the rotation is reported "
        "as failed. Unit: s.", 900, 30, 86400)
    rotation["evictionTimeoutSeconds"] = _int(
        "How long a rotation may keep asking for an eviction that is refused (429: a PodDisruptionBudget says "
        "not now) before it is reported as failed, its marks are taken off the pod and its slot is released. "
        "Unit: s.", 600, 30, 86400)
    rotation["podDisruptionBudget"] = {
        "type": "object", "description": "Keep a PodDisruptionBudget per guarded worker group (evictions "
                                         "honour it; kubelet's own pressure evictions do not). It is written "
                                         "with an integer minAvailable (the group's desired pods less "
                                         "maxUnavailable), the only form the disruption controller can compute "
                                         "for RayCluster pods.",
        "properties": {"enabled": {"type": "boolean", "default": False},
                       "maxUnavailable": _int("Pods of a group that may be disrupted at once.", 1, 1, 100)},
    }
    policy = crd_properties("policy")
    policy_rules = [
        {"rule": "!has(self.trendMinSpanSeconds) || !has(self.trendWindowSeconds) || "
                 "self.trendMinSpanSeconds <= self.trendWindowSeconds",
         "message": "trendMinSpanSeconds must not exceed trendWindowSeconds"},
        {"rule": "!has(self.hysteresisPercent) || !has(self.criticalPercent) || "
                 "self.hysteresisPercent < self.criticalPercent",
         "message": "hysteresisPercent must be below criticalPercent"},
    ]
    path_pattern = r"^/[A-Za-z0-9._/+-]{1,255}$"
    return {
        "type": "object",
        "required": ["clusterSelector"],
        "x-kubernetes-validations": [
            {"rule": "!has(self.sidecar) || !self.sidecar.inject || !has(self.sampling) || "
                     "self.sidecar.port == self.sampling.sidecarPort",
             "message": "sidecar.port and sampling.sidecarPort must agree when the sidecar is injected"},
        ],
        "properties": {
            "clusterSelector": {
                "type": "object",
                "description": "Which RayClusters in this namespace to guard: by name, by label, or both.",
                "properties": {
                    "names": {"type": "array", "maxItems": 100,
                              "items": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}},
                    "matchLabels": {
                        "type": "object", "maxProperties": 32,
                        "additionalProperties": {"type": "string", "maxLength": 63,
                                                 "pattern": guardspec.LABEL_VALUE.pattern},
                        "x-kubernetes-validations": [
                            {"rule": f"self.all(k, k.matches(r'{guardspec.LABEL_KEY.pattern}'))",
                             "message": "matchLabels keys must be label keys ([prefix/]name)"}]},
                },
                "x-kubernetes-validations": [
                    {"rule": "(has(self.names) && size(self.names) > 0) || "
                             "(has(self.matchLabels) && size(self.matchLabels) > 0)",
                     "message": "clusterSelector needs names or matchLabels"}],
            },
            "workerGroups": {"type": "array", "maxItems": 100, "description": "Worker groups to guard (empty: all).",
                             "items": {"type": "string", "minLength": 1}},
            **top,
            "sampling": {
                "type": "object", "default": {},
                "properties": {
                    "intervalSeconds": _int("How often each pod's sidecar is polled. Unit: s.", 15, 1, 3600),
                    "sidecarPort": _port("The sidecar's port on the pod IP.", 9108, 1),
                    "timeoutSeconds": fractional_minimum({
                        "type": "number", "default": 5, "minimum": 0.1, "maximum": 60,
                        "description": "Timeout of one poll. Unit: s."}),
                },
            },
            "policy": {"type": "object", "default": {}, "properties": policy,
                       "x-kubernetes-validations": policy_rules},
            "rotation": {"type": "object", "default": {}, "properties": rotation},
            "remediation": {
                "type": "object", "default": {},
                "properties": {
                    "jemalloc": {
                        "type": "object", "default": {},
                        "properties": {
                            "mode": _mode("off: nothing; recommend: Event and status only; auto: patch the "
                                          "worker group's pod template (LD_PRELOAD, MALLOC_CONF)."),
                            "libraryPath": {"type": "string", "default": guardspec.DEFAULT_JEMALLOC_PATH,
                                            "pattern": path_pattern},
                            "mallocConf": {"type": "string", "default": guardspec.DEFAULT_MALLOC_CONF,
                                           "pattern": r"^[a-z_]+:[A-Za-z0-9_.-]+(,[a-z_]+:[A-Za-z0-9_.-]+){0,15}$"},
                        },
                    },
                    "spilling": {
                        "type": "object", "default": {},
                        "properties": {
                            "mode": _mode("off, recommend, or auto (patch RAY_object_spilling_* env)."),
                            "thresholdPercent": _int("Spill when the store is this full. Unit: percent.",
                                                     80, 1, 100),
                            "minSpillingSizeBytes": _int("Smallest batch to spill. Unit: bytes.",
                                                         100 * 1024 * 1024, 0, 2**40),
                            "directories": {"type": "array", "minItems": 1, "maxItems": 16,
                                            "items": {"type": "string", "pattern": path_pattern,
                                                      "x-kubernetes-validations": [
                                                          {"rule": f"!self.matches(r'{tr.PARENT_REGEX}')",
                                                           "message": "a spilling directory may not contain '..'"},
                                                          {"rule": f"!self.matches(r'{tr.SYSTEM_DIR_REGEX}')",
                                                           "message": "a spilling directory may not be a system "
                                                                      "directory (" + ", ".join(
                                                                          "/" + d for d in tr.SYSTEM_DIRS) + ")"}]},
                                            "default": ["/tmp/ray-spill"]},
                        },
                    },
                },
            },
            "sidecar": {
                "type": "object", "default": {},
                "properties": {
                    "inject": {"type": "boolean", "default": False,
                               "description": "Add the sidecar to the guarded RayClusters' pod templates."},
                    "image": {"type": "string", "maxLength": 255,
                              "description": "Default: the sidecar image the chart was installed with."},
                    "port": _port("The sidecar's port.", 9108, 1024),
                    "resources": {"type": "object", "properties": {
                        "cpuRequest": {"type": "string", "default": "10m"},
                        "memoryRequest": {"type": "string", "default": "32Mi"},
                        "memoryLimit": {"type": "string", "default": "64Mi"}}},
                },
            },
        },
    }


def crd() -> dict[str, Any]:
    cols = [
        {"name": "Clusters", "type": "integer", "jsonPath": ".status.summary.clusters"},
        {"name": "Pods", "type": "integer", "jsonPath": ".status.summary.pods"},
        {"name": "At risk", "type": "integer", "jsonPath": ".status.summary.atRisk"},
        {"name": "Rotations", "type": "integer", "jsonPath": ".status.rotations.total"},
        # At most status.BRIEF_MAX characters: the full text is in lastAction and the Events.
        {"name": "Last action", "type": "string", "jsonPath": ".status.lastActionBrief"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "memoryguard",
                      "shortNames": ["mg"], "categories": ["ray"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": cols,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "Guards the pods of RayClusters against slow memory growth.",
                    "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                }},
            }],
        },
    }


def render() -> str:
    header = "# Generated by `make crds` from operator/crd.py: do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
