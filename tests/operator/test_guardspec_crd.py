"""The MemoryGuard spec: the checked-in CRD is what the generator makes, and
bad specs are refused with messages a person understands."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryguard_kuberay.operator import crd
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_crd_is_generated() -> None:
    assert (ROOT / "crds" / "memoryguard.io_memoryguards.yaml").read_text() == crd.render(), "run `make crds`"


def test_minimal_spec_gets_the_defaults() -> None:
    g = read_guard_spec({"clusterSelector": {"names": ["rc"]}})
    assert g.selection.cluster_names == ("rc",) and g.policy.horizon_s == 5400 and not g.policy.dry_run
    assert g.forensics.enabled and g.forensics.timeout_s == 30 and g.forensics.keep == 20
    assert g.sampling.interval_s == 15 and g.jemalloc.mode == "off" and not g.sidecar.inject


@pytest.mark.parametrize("spec, says", [
    ({}, "clusterSelector needs names or matchLabels"),
    ({"clusterSelector": {"names": ["Bad_Name"]}}, "list of RayCluster names"),
    ({"clusterSelector": {"names": ["rc"]}, "policy": {"criticalPercent": 150}}, "criticalPercent: 150 is outside"),
    ({"clusterSelector": {"names": ["rc"]}, "rotation": {"maxUnavailable": 0}}, "maxUnavailable: 0 is outside"),
    ({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"mode": "sometimes"}}},
     "must be one of off, recommend, auto"),
    ({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"libraryPath": "/x; rm -rf /"}}},
     "libraryPath must be an absolute path"),
    ({"clusterSelector": {"names": ["rc"]}, "remediation": {"jemalloc": {"mallocConf": "a:b\nEVIL=1"}}},
     "mallocConf must look like"),
    ({"clusterSelector": {"names": ["rc"]}, "remediation": {"spilling": {"directories": ["relative"]}}},
     "directories must be a non-empty list of absolute paths"),
    ({"clusterSelector": {"names": ["rc"]}, "sidecar": {"inject": True, "port": 9200}},
     "must agree when the sidecar is injected"),
    ({"clusterSelector": {"names": ["rc"]}, "sampling": {"intervalSeconds": 600}}, "every sample would be stale"),
    ({"clusterSelector": {"names": ["rc"]}, "sidecar": {"image": "UPPER CASE"}}, "not a valid image"),
    ({"clusterSelector": {"names": ["rc"]}, "policy": {"bogus": 1}}, "spec.policy.bogus: unknown setting"),
])
def test_bad_specs(spec: dict, says: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SpecError) as e:
        read_guard_spec(spec)
    assert any(says in p for p in e.value.problems), e.value.problems
