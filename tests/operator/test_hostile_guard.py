"""A guard's author decides what runs in other people's pods (issue 12):
the operator and the CRD hold guards to the installer's limits (trust.py)
and to limits nobody lifts. Each row: a spec an attacker might write, and
the words that refuse it."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.core.trust import Trust, repository
from memoryguard_kuberay.devkit.emulator import schema
from memoryguard_kuberay.operator import crd
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec
from memoryguard_kuberay.operator.status import pods_listed

TRUST = Trust(sidecar_images=("ghcr.io/memoryguard/memoryguard-sidecar",), policy_port=9108)


def _spec(**parts: Any) -> dict[str, Any]:
    return {"clusterSelector": {"names": ["rc"]}, **parts}


def _inject(**sidecar: Any) -> dict[str, Any]:
    return _spec(sidecar={"inject": True, **sidecar})


REFUSED = [
    (_inject(image="evil.example/miner:latest"), "not from an allowed repository"),
    (_inject(image="ghcr.io/memoryguard/memoryguard-sidecar-evil:1"), "not from an allowed repository"),
    (_inject(resources={"memoryLimit": "1Ti"}), "above 512Mi"),
    (_inject(resources={"cpuRequest": "1000"}), "above 1 CPU"),
    (_inject(resources={"memoryRequest": "128Mi", "memoryLimit": "64Mi"}), "above its limit"),
    (_inject(port=6379), "Ray GCS"),
    (_inject(port=8265), "Ray dashboard"),
    (_inject(port=10250), "kubelet"),
    (_inject(port=9200, **{}) | {"sampling": {"sidecarPort": 9200}}, "NetworkPolicy protects"),
    (_spec(remediation={"jemalloc": {"mode": "auto", "libraryPath": "/tmp/evil.so"}}), "not an allowed jemalloc"),
    (_spec(remediation={"spilling": {"directories": ["/etc"]}}), "system directory"),
    (_spec(remediation={"spilling": {"directories": ["/dev/shm/x"]}}), "system directory"),
    (_spec(remediation={"spilling": {"directories": ["/tmp/../../etc"]}}), "may not contain '..'"),
    ({"clusterSelector": {"matchLabels": {"a!": ""}}}, "matchLabels keys must be label keys"),
    ({"clusterSelector": {"matchLabels": {"app": "x,y"}}}, "must map label keys to label values"),
]


@pytest.mark.parametrize("spec, says", REFUSED, ids=[s for _, s in REFUSED])
def test_the_operator_refuses(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as e:
        read_guard_spec(spec, sidecar_image="ghcr.io/memoryguard/memoryguard-sidecar:0.1.0", trust=TRUST)
    assert says in str(e.value), str(e.value)


def test_what_the_installer_allows_is_accepted() -> None:
    g = read_guard_spec(_inject(image="ghcr.io/memoryguard/memoryguard-sidecar@sha256:" + "a" * 64)
                        | {"remediation": {"jemalloc": {"mode": "auto"}, "spilling": {"directories": ["/data/s"]}}},
                        trust=TRUST)
    assert g.sidecar.inject and g.spilling.directories == ("/data/s",)
    assert repository("registry:5000/a/b:1.2") == "registry:5000/a/b"


CRD_REFUSED = [
    (_spec(sampling={"sidecarPort": 6379}), "taken in a Ray pod"),
    (_inject(port=10250) | {"sampling": {"sidecarPort": 10250}}, "taken in a Ray pod"),
    (_spec(remediation={"spilling": {"directories": ["/tmp/../../etc"]}}), "may not contain '..'"),
    (_spec(remediation={"spilling": {"directories": ["/proc/self"]}}), "system directory"),
    ({"clusterSelector": {"matchLabels": {"a!": ""}}}, "matchLabels keys must be label keys"),
    ({"clusterSelector": {"matchLabels": {"app": "x,y"}}}, "does not match"),
]


@pytest.mark.parametrize("spec, says", CRD_REFUSED, ids=[s for _, s in CRD_REFUSED])
def test_the_crd_refuses_at_admission(spec: dict[str, Any], says: str) -> None:
    openapi = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    with pytest.raises(schema.SchemaError, match=says):
        schema.admit({"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard", "metadata": {"name": "g"},
                      "spec": spec}, openapi, kind="MemoryGuard")


def test_a_blind_sidecar_makes_the_guard_degraded() -> None:
    d = Decision(Action.NONE, Reason.NO_LIMIT, "no limit known", Evidence())
    status = st.build(generation=1, clusters=["rc"], pods=[st.PodView("w1", "g", d, None, blind=True)],
                      spec_error=None, missing_clusters=[], rotations={}, last_action=None,
                      now_iso="2026-11-30T00:00:00Z", previous={})
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NoMemorySource") and "w1" in degraded["message"]
    assert pods_listed(status)["w1"]["verdict"] == "NoMemorySource"
