"""Issue 44, 5: a deleted guard's series, counters and histograms included,
leave /metrics; another guard's stay."""

from __future__ import annotations

import pytest
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


def test_a_deletion_does_not_render_every_other_guards_series(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by make bench-tenants-real (1,000 guards made and deleted): each
    # deletion collected every guard's histogram buckets into samples, 0.3 s
    # of the event loop at 1,000 guards, and a batch held it 2.3 s. The
    # series are found by their labels; nothing is rendered.
    m = OperatorMetrics(per_pod=False)
    for i in range(50):
        m.cycle_seconds.labels("ns", f"g{i}").observe(0.2)
        m.rotations.labels("ns", f"g{i}", "ProjectedOOM", "rotated").inc()
    for metric in (m.rotations, m.cycle_seconds, m.poll_seconds, m.poll_errors, m.remediations, m.reviews):
        monkeypatch.setattr(metric, "collect", lambda: (_ for _ in ()).throw(AssertionError("rendered on a deletion")))
    m.drop_guard("ns", "g7")
    monkeypatch.undo()
    text = generate_latest(m.registry).decode()
    assert 'guard="g7"' not in text and text.count('guard="g8"') == text.count('guard="g9"') > 0
