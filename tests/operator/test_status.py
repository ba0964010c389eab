"""The guard's status says, in words, why it is Degraded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.sidecars.sidecar_client import PollFailure

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
    ({"unread": "3 RayCluster(s) read, 9.0 MiB"}, "ClustersNotRead", "3 RayCluster(s) read"),
    ({"clusters": [], "pods": [], "contested": {"rc": "older"}}, "ClusterGuardedElsewhere", "older MemoryGuard older"),
    ({"clusters": [], "pods": []}, "NoClusterSelected", "matches no RayCluster"),
    ({"pods": [st.PodView("w1", "g", OK, "unreachable: ConnectionRefused")]}, "SidecarUnreachable", "w1"),
])
def test_degraded_says_why(kw: dict[str, Any], reason: str, says: str) -> None:
    c = _degraded(**kw)
    assert c["reason"] == reason and says in c["message"]
    assert c["status"] == ("False" if reason == "AsExpected" else "True")


def _status(pods: list[st.PodView], **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"generation": 1, "clusters": ["rc"], "pods": pods, "spec_error": None,
                            "missing_clusters": [], "rotations": {}, "last_action": None,
                            "now_iso": "2026-11-29T12:00:00Z", "previous": {}}
    args.update(kw)
    return st.build(**args)


def _risky(i: int, eta_s: float) -> st.PodView:
    ev = Evidence(working_set_bytes=60 * 2**30, limit_bytes=64 * 2**30, projected_oom_s=eta_s)
    return st.PodView(f"w{i:05d}", "g", Decision(Action.NONE, Reason.ROTATION_DEFERRED, "x" * 2000, ev), None)


def test_a_small_guard_lists_every_pod() -> None:
    pods = [st.PodView(f"w{i}", "g", OK, None) for i in range(st.MAX_PODS_LISTED)]
    s = _status(pods)
    assert [p["name"] for p in s["pods"]] == sorted(p.name for p in pods) and s["summary"]["podsListed"] == len(pods)


def test_status_stays_bounded_at_20000_pods() -> None:
    """A real etcd refuses objects over about 1.5 MiB: at 20,000 pods (300 at
    risk, 100 without samples, each with a 2,000-character message) the
    status stays within 64 KiB, counts every pod, and lists the ones worth a
    look, the ones rotating and nearest their OOM first."""
    healthy = [st.PodView(f"h{i:05d}", "g", OK, None) for i in range(19600)]
    risky = [_risky(i, eta_s=3600 + i) for i in range(300)]
    rotating = [st.PodView("r1", "g", Decision(Action.ROTATE, Reason.PROJECTED_OOM, "rotate", Evidence()), None)]
    none = Decision(Action.NONE, Reason.NO_SAMPLES, "no samples from the sidecar yet", Evidence())
    dark = [st.PodView(f"d{i:03d}", "g", none, "unreachable: " + "y" * 3000) for i in range(99)]
    s = _status(healthy + risky + rotating + dark)
    assert len(json.dumps(s, separators=(",", ":"))) <= st.MAX_STATUS_BYTES
    assert s["summary"]["pods"] == 20000 and s["summary"]["sidecarUnreachable"] == 99
    assert s["summary"]["verdicts"]["SidecarUnreachable"] == 99
    assert s["summary"]["verdicts"]["Healthy"] == 19600 and s["summary"]["verdicts"]["RotationDeferred"] == 300
    listed = set(st.pods_listed(s))
    assert 0 < len(listed) <= st.MAX_PODS_LISTED and s["summary"]["podsListed"] == len(listed)
    assert "r1" in listed and "w00000" in listed  # rotating, and the nearest OOM
    assert not any(n.startswith("h") for n in listed)  # healthy pods are counted, not listed
    assert all(len(p["lastDecision"]) <= st.MESSAGE_MAX for p in s["pods"])


@pytest.mark.parametrize("old, new, patch", [
    # A verdict no pod has any more is removed, not kept at its old count.
    ({"verdicts": {"Healthy": 3, "WarmingUp": 2}}, {"verdicts": {"Healthy": 5}},
     {"verdicts": {"Healthy": 5, "WarmingUp": None}}),
    # A pod that left is nulled; nested keys it lost too.
    ({"pods": {"a": {"x": 1, "y": 2}, "b": {}}}, {"pods": {"a": {"x": 1}}}, {"pods": {"a": {"x": 1, "y": None},
                                                                                        "b": None}}),
    (None, {"a": 1}, {"a": 1}),
    ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),  # lists are replaced whole, as merge patch does
])
def test_merge_patch(old: Any, new: Any, patch: Any) -> None:
    assert st.merge_patch(old, new) == patch


@pytest.mark.parametrize("failure, verdict", [
    (None, "SidecarUnreachable"), ("BadAnswer", "BadAnswer"), ("WrongPod", "WrongPod"),
    ("SamplesStale", "SamplesStale"), ("SidecarUnreachable", "SidecarUnreachable")])
def test_why_a_poll_failed_is_the_pods_verdict(failure: str | None, verdict: str) -> None:
    from memoryguard_kuberay.operator.sidecars.sidecar_client import PollFailure

    none = Decision(Action.NONE, Reason.NO_SAMPLES, "no samples yet", Evidence())
    view = st.PodView("w1", "g", none, "some words", failure=PollFailure(failure) if failure else None)
    assert st.pods_listed(_status([view]))["w1"]["verdict"] == verdict


@pytest.mark.parametrize("pods, status, reason", [
    ([st.PodView("w1", "g", OK, None), st.PodView("w2", "g", OK, None)], "True", "AllReporting"),
    ([st.PodView("w1", "g", OK, None), st.PodView("w2", "g", OK, "unreachable: refused")], "False",
     "SidecarUnreachable"),
    ([st.PodView("w1", "g", OK, None, blind=True)], "False", "NoMemorySource"),
    ([], "False", "NoPods"),
    # Issue 61, 2: both pods Pending read REPORTING True, AllReporting, beside "0 of 2 report".
    ([st.PodView("w1", "g", OK, "not running", failure=PollFailure.NOT_RUNNING),
      st.PodView("w2", "g", OK, "no sidecar", failure=PollFailure.NO_SIDECAR)], "False", "NotReporting"),
])
def test_reporting_reads_false_when_a_sidecar_does_not_report(pods: list[st.PodView], status: str,
                                                             reason: str) -> None:
    """Issue 26, 6: the REPORTING column of `kubectl get mg` (READY only says the guard is served)."""
    c = next(c for c in _status(pods)["conditions"] if c["type"] == "Reporting")
    assert (c["status"], c["reason"]) == (status, reason)
    degraded = next(c for c in _status(pods)["conditions"] if c["type"] == "Degraded")
    assert status == "True" or "all guarded pods report" not in degraded["message"], degraded
    ready = next(c for c in _status(pods)["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_a_pod_with_no_limit_says_it_was_judged_against_the_node() -> None:
    """Issue 39: which ceiling a verdict was judged against is in the status."""
    node = Decision(Action.NONE, Reason.NO_LIMIT, "no memory limit: judged against the node",
                    Evidence(node_ceiling_bytes=40 << 30))
    assert st.pod_status(st.PodView("w1", "g", node, None))["judgedAgainst"] == "node"
    assert st.pod_status(st.PodView("w1", "g", node, None))["nodeCeilingBytes"] == 40 << 30
    assert "judgedAgainst" not in st.pod_status(st.PodView("w1", "g", OK, None))


def test_a_watched_climbs_time_left_is_in_the_status_and_the_metrics() -> None:
    """Issue 58, 3: while a new climb is watched (not yet acted on) the pod's
    status and the group's projected-OOM series show its time left, so the
    chart's alert on that series can fire before the rotation; a projection
    acted on wins over a watched one."""
    from prometheus_client import generate_latest

    from memoryguard_kuberay.operator.metrics import OperatorMetrics

    watched = Evidence(working_set_bytes=2**30, limit_bytes=4 * 2**30, watched_oom_s=412.4)
    both = Evidence(working_set_bytes=2**30, limit_bytes=4 * 2**30, projected_oom_s=900.0, watched_oom_s=300.0)
    views = [st.PodView("w1", "g", Decision(Action.NONE, Reason.HEALTHY, "x", watched), None),
             st.PodView("w2", "h", Decision(Action.NONE, Reason.HEALTHY, "x", both), None)]
    assert [st.pod_status(v)["projectedOOMSeconds"] for v in views] == [412, 900]
    m = OperatorMetrics(per_pod=True)
    m.publish("ns", "guard", views, guarded=2)
    text = generate_latest(m.registry).decode()
    assert 'memoryguard_group_projected_oom_seconds{group="g",guard="guard",namespace="ns"} 412.4' in text, text
    assert 'memoryguard_group_projected_oom_seconds{group="h",guard="guard",namespace="ns"} 900.0' in text


def test_the_brief_keeps_a_whole_pod_name_with_the_longest_reason() -> None:
    # Issue 61, 7: the LAST ACTION column cut KubeRay's pod names before their suffix.
    from memoryguard_kuberay.operator.decided import Say, pod_ref
    from memoryguard_kuberay.operator.events import EventReason

    name = "raycluster-kuberay-serving-gpu-workergroup-worker-abcde-xyz12"[:63]
    longest = max(EventReason, key=lambda r: len(r.value))
    assert Say(longest, "m", (pod_ref(name, "u"),)).brief == f"{longest.value} {name}"
