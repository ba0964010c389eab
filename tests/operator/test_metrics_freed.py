"""Issue 44, 5: a deleted guard's series, counters and histograms included,
leave /metrics; another guard's stay."""

from __future__ import annotations

from prometheus_client import generate_latest

from memoryguard_kuberay.operator.metrics import OperatorMetrics


def test_a_deleted_guards_series_all_go() -> None:
    m = OperatorMetrics(per_pod=True)
    for guard in ("gone", "kept"):
        m.rotations.labels("ns", guard, "ProjectedOOM", "rotated").inc()
        m.remediations.labels("ns", guard, "jemalloc", "auto").inc()
        m.poll_errors.labels("ns", guard, "SidecarUnreachable").inc()
        m.poll_seconds.labels("ns", guard).observe(0.01)
        m.cycle_seconds.labels("ns", guard).observe(0.2)
        m.degraded("ns", guard, "SidecarUnreachable")
        m.pods_guarded.labels("ns", guard).set(3)
    before = generate_latest(m.registry).decode()
    m.drop_guard("ns", "gone")
    after = generate_latest(m.registry).decode()
    assert 'guard="gone"' in before and 'guard="gone"' not in after
    assert after.count('guard="kept"') == before.count('guard="kept"')
