"""What a guard remembers besides its rotations, across a restart (issue 23):
written to status, read back bounded whatever the status holds."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.operator.rotations.remembered import MAX_ITEMS, Remembered


def test_round_trip() -> None:
    r = Remembered(planned={"u1", "u2"}, remediated={("rc", "workers", "jemalloc")}, advised={("rc", "workers")})
    back = Remembered.from_status({"remembered": r.to_status()})
    assert back == r
    back.forget_pods_except(["u2", "u9"])
    assert back.planned == {"u2"}


@pytest.mark.parametrize("raw", [
    None, "x", {"plannedPods": "u1"}, {"remediated": [1, None, "a/b", "a//c", "a/b/c/d", "x" * 300]},
    {"advised": [["rc", "g"]], "plannedPods": ["u"] * 5000},
])
def test_any_status_reads_within_bounds(raw: Any) -> None:
    r = Remembered.from_status({"remembered": raw})
    assert len(r.planned) <= MAX_ITEMS and all(len(k) == 3 and all(k) for k in r.remediated)
    assert all(len(k) == 2 for k in r.advised)
