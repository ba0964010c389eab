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

from memoryguard_kuberay.core import specschema
from memoryguard_kuberay.core.constants import GROUP, KIND, PLURAL, VERSION


def spec_schema() -> dict[str, Any]:
    """The spec's OpenAPI schema, from the two tables of fields: the core's
    (the policy, the rotation budgets, includeHead, dryRun, and the CEL
    rules across them) and the operator's (specfields.py: every other field,
    and its rules)."""
    spec: dict[str, Any] = {"type": "object", "required": ["clusterSelector"], "properties": {}}
    specschema.schema_into(spec)
    return spec


def _open(description: str, **props: Any) -> dict[str, Any]:
    """An object the operator writes more into than is listed: documented
    (``kubectl explain``), its other fields kept as written."""
    out: dict[str, Any] = {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}
    if props:
        out["properties"] = props
    return out


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def status_schema() -> dict[str, Any]:
    """What status.py writes, for ``kubectl explain mg.status`` (issue 26, 6).
    Open at the root and in its maps: the operator's status is written by the
    operator alone, and a field this schema lacks must not be pruned."""
    condition = {"type": "object", "properties": {
        "type": {"type": "string", "description": "Ready, Degraded or Reporting."},
        "status": {"type": "string", "description": "True, False or Unknown."},
        "reason": {"type": "string", "description": "One word, CamelCase: why."},
        "message": {"type": "string", "description": "Why, in a sentence."},
        "lastTransitionTime": {"type": "string", "description": "When the status last changed."}}}
    return _open(
        "What the operator found and did, computed once per cycle and written when it changed.",
        observedGeneration={"type": "integer", "nullable": True,
                            "description": "The spec generation this status is of."},
        conditions={"type": "array", "items": condition, "description": (
            "Ready: the guard is served (its spec valid, within the namespace's limit). Degraded: something "
            "keeps it from guarding every pod, and why. Reporting: every guarded pod's sidecar reports memory.")},
        summary=_open("Counts over the guarded pods.", clusters=_int("RayClusters guarded."),
                      pods=_int("Pods guarded."), atRisk=_int("Pods at risk or being rotated."),
                      sidecarUnreachable=_int("Pods whose sidecar gave no samples."),
                      noMemorySource=_int("Pods whose sidecar reads no memory.")),
        pods={"type": "array", "description": (
            "Per pod (all up to 50, then those worth a look), by name: working set, limit, trend, projected OOM, "
            "object store, verdict, the last decision, why its poll failed."),
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {**_open("One guarded pod.", name={"type": "string", "description": "The pod's name."}),
                      "required": ["name"]}},
        rotations=_open("The rotation ledger: total, in flight (resumed after a restart), the recent ones, "
                        "evictions in the last hour; its times are RFC 3339."),
        forensics=_open("The latest evidence kept before a rotation: its ConfigMap, pod, time and size."),
        remembered=_open("What the guard has said and done besides rotations, read back after a restart."),
        remediations=_open("Each applied remediation (cluster/group/kind) and its review: when it was applied, "
                           "the env it set, each pod's creep before it and on its template (bytes an hour), the "
                           "verdict (Pending, Effective, NoEffect, Worse) and why, and whether it was reverted."),
        templates=_open("Per worker group, per template revision (a hash of the Ray container's image, command, "
                        "env and resources): its pods and their median creep, bytes an hour."),
        lastAction={"type": "string", "nullable": True, "description": "The last Event's reason and message."},
        lastActionBrief={"type": "string", "nullable": True,
                         "description": "The last action's reason and object (a whole pod name), at most 100 "
                                        "characters."},
        lastActionTime={"type": "string", "format": "date-time", "nullable": True,
                        "description": "When the last action was said (RFC 3339), on the operator's clock."},
        lastCycleTime={"type": "string", "format": "date-time", "nullable": True, "description": (
            "When an operator last ran this guard's cycle (RFC 3339): written at least every "
            "max(sampling.intervalSeconds, 60 s) while an operator guards it; older than twice that and an "
            "interval, nobody is guarding it (`kubectl get mg` shows its age as SEEN).")},
    )


def crd() -> dict[str, Any]:
    # `kubectl get mg -A` within 100 columns for usual names (issue 26, 6);
    # priority 1: shown with -o wide only.
    cols = [
        {"name": "Pods", "type": "integer", "jsonPath": ".status.summary.pods"},
        {"name": "At risk", "type": "integer", "jsonPath": ".status.summary.atRisk"},
        {"name": "Rotated", "type": "integer", "jsonPath": ".status.rotations.total",
         "description": "rotations that ended with a ready replacement"},
        {"name": "Reporting", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Reporting\")].status",
         "description": "False: a guarded pod's sidecar is unreachable or reads no memory"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
         "description": "False: the guard guards less than its spec names (a cluster or group not found, refused)"},
        # As VPA shows its MODE: a dry run is visible at a glance (issue 42, 4).
        {"name": "Dry run", "type": "boolean", "jsonPath": ".spec.dryRun"},
        # When an operator last ran the guard's cycle, as an age: a guard
        # nobody guards reads minutes, then hours (issue 61, 2; a Node's
        # Ready turns Unknown by another controller, which a guard has not).
        {"name": "Seen", "type": "date", "jsonPath": ".status.lastCycleTime",
         "description": "how long ago an operator last ran this guard's cycle"},
        # -o wide: SEEN took its place within 100 columns, and says more.
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "priority": 1},
        {"name": "Clusters", "type": "integer", "jsonPath": ".status.summary.clusters", "priority": 1},
        # At most status.BRIEF_MAX characters: the full text is in lastAction and the Events.
        {"name": "Last action", "type": "string", "jsonPath": ".status.lastActionBrief", "priority": 1},
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
                        "status": status_schema(),
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
