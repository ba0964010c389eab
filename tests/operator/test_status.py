"""The guard's status says, in words, why it is Degraded."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.operator import status as st

OK = Decision(Action.NONE, Reason.HEALTHY, "working set 20 GiB of 64 GiB (31%)", Evidence())


def _degraded(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"generation": 1, "clusters": ["rc"], "pods": [st.PodView("w1", "g", OK, None)],
                            "spec_error": None, "missing_clusters": [], "rotations": {}, "last_action": None,
                            "now_iso": "2026-11-29T12:00:00Z", "previous": {}}
    args.update(kw)
    return next(c for c in st.build(**args)["conditions"] if c["type"] == "Degraded")


@pytest.mark.parametrize("kw, reason, says", [
    ({}, "AsExpected", "all guarded pods report samples"),
    ({"spec_error": "spec.rotation.maxUnavailable must be >= 1"}, "InvalidSpec", "maxUnavailable"),
    ({"missing_clusters": ["gone"]}, "ClusterNotFound", "gone"),
    ({"clusters": [], "pods": [], "contested": {"rc": "older"}}, "ClusterGuardedElsewhere", "older MemoryGuard older"),
    ({"clusters": [], "pods": []}, "NoClusterSelected", "matches no RayCluster"),
    ({"pods": [st.PodView("w1", "g", OK, "unreachable: ConnectionRefused")]}, "SidecarUnreachable", "w1"),
])
def test_degraded_says_why(kw: dict[str, Any], reason: str, says: str) -> None:
    c = _degraded(**kw)
    assert c["reason"] == reason and says in c["message"]
    assert c["status"] == ("False" if reason == "AsExpected" else "True")
