"""Pods with no memory limit (issue 39 item 4): every limit rule is off for
them, and they leaked until the node ran out. The sidecar serves the node's
MemAvailable for such a container, and the policy judges the pod against
what it could reach now (in use plus the node's available memory, less the
kubelet's eviction threshold), saying so in the decision."""

from __future__ import annotations

from memoryguard_kuberay.core.policy import PodWindow, Reason, RotationHistory, decide
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

GIB = 1 << 30
NODE = 64 * GIB
OTHERS = 20 * GIB  # the node's other pods


def pod(t: float, used: float, *, node: bool = True) -> Sample:
    u = int(used)
    return Sample(time_s=t, memory_current_bytes=u + GIB, memory_max_bytes=None, anon_bytes=u, file_bytes=GIB,
                  inactive_file_bytes=GIB // 2, shmem_bytes=0, oom_kill_count=0,
                  node_available_bytes=max(0, NODE - OTHERS - u - GIB) if node else None)


def leak(per_h: float, hours: float, *, node: bool = True) -> list[Sample]:
    return [pod(t, 8 * GIB + per_h * t / 3600, node=node) for t in range(0, int(hours * 3600), 30)]


def test_a_leak_with_no_limit_is_judged_against_the_node_and_rotated_before_it_runs_out() -> None:
    samples = leak(2 * GIB, 20)
    runs_out = next(s.time_s for s in samples if s.node_available_bytes is not None
                    and s.node_available_bytes < 100 * (1 << 20))
    result = replay("no-limit-leak", samples, PolicySettings())
    assert result.first_rotation_s is not None and result.first_rotation_s < runs_out - 1800
    rotation = next(td.decision for td in result.decisions if td.decision.action.value == "rotate")
    assert rotation.reason is Reason.NODE_MEMORY_RUNNING_OUT and "judged against the node" in rotation.message
    assert rotation.evidence.node_ceiling_bytes is not None and rotation.evidence.limit_bytes is None


def test_a_flat_pod_with_no_limit_is_left_alone_and_says_what_it_is_judged_against() -> None:
    samples = leak(0.0, 8)
    assert replay("no-limit-flat", samples, PolicySettings()).first_rotation_s is None
    w = PodWindow(PolicySettings())
    for s in samples:
        w.add(s)
    d = decide(settings=PolicySettings(), window=w, history=RotationHistory(), now_s=samples[-1].time_s)[0]
    assert d.reason is Reason.NO_LIMIT and "judged against the node" in d.message, d.message


def test_without_the_nodes_figure_a_pod_with_no_limit_is_as_before() -> None:
    samples = leak(2 * GIB, 20, node=False)
    assert replay("no-limit-unknown", samples, PolicySettings()).first_rotation_s is None
    w = PodWindow(PolicySettings())
    for s in samples:
        w.add(s)
    d = decide(settings=PolicySettings(), window=w, history=RotationHistory(), now_s=samples[-1].time_s)[0]
    assert d.reason is Reason.NO_LIMIT and d.message.endswith("no memory limit to project to")
    assert "node_ceiling_bytes" not in d.evidence.to_dict()
