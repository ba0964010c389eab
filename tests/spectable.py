"""The guard specs the operator's reader accepts or refuses, as one table
for every judge of a spec: the reader's tests and the emulator's admission
(tests/operator/test_specfields.py) and a real kube-apiserver's admission
with ``dryRun=All`` (tests/realk8s/test_admission.py).

A row whose ``why`` is set names a reason the server and the operator may
disagree: limits only the operator can judge (its installer's trust
limits), never a gap in the CRD.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from memoryguard_kuberay.core import schema, specfields, trust
from memoryguard_kuberay.core.settings import CROSS_RULES, POLICY_FIELDS

BASE: dict[str, Any] = {"clusterSelector": {"names": ["rc"]}}
# The chart's defaults, as the operator runs with them.
CHART_TRUST = trust.Trust(sidecar_images=("ghcr.io/memoryguard/memoryguard-sidecar",))


def with_value(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(BASE if base is None else base)
    *parents, name = path.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    node[name] = value
    return spec


def probes(f: schema.Field) -> list[Any]:
    """Values at and beyond a field's bounds, and against its rules."""
    k = schema.Kind
    if f.kind in (k.INT, k.NUMBER):
        lo, hi = f.minimum or 0, f.maximum or 0
        step = 1 if f.kind is k.INT else 0.05
        return [lo, hi, lo - step, hi + step, "7", True, *(p for p in (22, 6379, 10250) if lo <= p <= hi)]
    if f.kind is k.BOOL:
        return [True, False, "false", 1]
    if f.kind is k.STRING:
        return [*(f.choices or []), "sometimes", "bad value; rm -rf /", "/ok/path", "a:b", "10m", "x" * 300]
    if f.kind is k.STRINGS:
        return [["rc"], ["/data/spill"], [], ["Bad_Name"], ["/tmp/../../etc"], ["/etc"], ["relative"], "rc",
                ["/var/lib/docker"], ["/var/log/ray"], ["/" + "x" * 300], ["w" * 64], ["w" * 2**20]]
    return [{"app": "x"}, {"a!": ""}, {"app": "x,y"}, {}, {"app": "v" * 64}]


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    spec: dict[str, Any]
    why: str = ""  # set: the server may accept what the operator refuses, and why
    server_refuses: str = ""  # set: the server refuses what the reader accepts, and why


# Fields a CEL rule reads: a real server hands CEL the value as decoded, so
# an integer field written 1800.0 is a double there, and the rule fails
# ("expected int, got float64"); a field no rule reads is stored as 1800.
_CEL_TEXT = " ".join([r.cel for r in CROSS_RULES] + [r.cel for r in specfields.OBJECT_RULES])
WHOLE_FLOAT_IN_CEL = ("an integer field written with a decimal point (1800.0) and read by a CEL rule: the server's "
                      "CEL refuses it ('expected int, got float64'); the reader takes it as 1800")


def _field_row(path: str, value: Any) -> Row:
    spec = with_value(path, value)
    if path.startswith("sidecar.") and path != "sidecar.inject":
        spec.setdefault("sidecar", {})["inject"] = False  # trust limits are the operator's, not the schema's
    if path == "sidecar.port" and isinstance(value, int) and not isinstance(value, bool):
        spec["sampling"] = {"sidecarPort": value}  # the two must agree when injected
    return Row(f"{path}={str(value)[:20]}", spec)


def _policy_rows() -> list[Row]:
    rows = []
    for s in POLICY_FIELDS:
        # In the spec's units, as a user writes them; each bound written as a
        # float (1800.0), as JSON may carry it, and halved and doubled.
        values: list[Any] = [True, False, "x"] if s.kind is schema.Kind.BOOL else [
            float(v) for v in (s.minimum, s.maximum) if v is not None] + [
            float(v) * f for v in (s.minimum, s.maximum) if v for f in (0.5, 2)] + ["x", 0]
        rows += [Row(f"{s.path}={str(v)[:20]}", with_value(s.path, v), server_refuses=WHOLE_FLOAT_IN_CEL if (
            s.kind is schema.Kind.INT and isinstance(v, float) and s.name in _CEL_TEXT) else "") for v in values]
    return rows


FIELD_ROWS = [_field_row(f.path, v) for f in specfields.FIELDS for v in probes(f)]
POLICY_ROWS = _policy_rows()
OBJECT_ROWS = [
    Row("clusterSelector empty", {"clusterSelector": {}}),
    Row("sidecar and sampling ports disagree", {**BASE, "sidecar": {"inject": True, "port": 9200},
                                                "sampling": {"sidecarPort": 9108}}),
    Row("trend buckets too few", {**BASE, "policy": {"trendBucketSeconds": 3600, "trendMinSpanSeconds": 7200}}),
    Row("interval longer than staleness", {**BASE, "sampling": {"intervalSeconds": 600}}),
    Row("unknown policy setting", {**BASE, "policy": {"bogus": 1}}),
]
TRUST_ROWS = [
    Row("sidecar image from another repository", {**BASE, "sidecar": {"inject": True, "image": "evil.example/x:1"}},
        why="the allowed repositories are the installer's (chart value sidecar.allowedImages): only the operator "
            "knows them"),
    Row("jemalloc library not allowed", {**BASE, "remediation": {"jemalloc": {"mode": "auto",
                                                                             "libraryPath": "/opt/evil.so"}}},
        why="the allowed jemalloc paths are the installer's (chart value remediation.jemallocPaths)"),
    Row("sidecar limit above 512Mi", {**BASE, "sidecar": {"inject": True, "resources": {"memoryLimit": "4Gi"}}},
        why="quantities are compared by the operator; a schema pattern cannot order them"),
]
ROWS: list[Row] = FIELD_ROWS + POLICY_ROWS + OBJECT_ROWS + TRUST_ROWS
