"""``make detection-sets --against``: each trace whose first rotation moved
is named, and the moves are summed up as ``bench`` scores them (what a rule
change was measured by in docs/how-it-works.md)."""

from __future__ import annotations

from typing import Any

from .helpers import benchmark

sets = benchmark("detection_sets")
H = 3600.0
LEAK = {"kind": "leak", "oom_at_s": 20 * H, "leak_start_s": 0.0, "plasma_full_at_s": None}
HEALTHY = {"kind": "healthy", "oom_at_s": None, "leak_start_s": None, "plasma_full_at_s": None}


def row(at_h: float | None, labels: dict[str, Any]) -> dict[str, Any]:
    return {"first_rotation_s": None if at_h is None else at_h * H, "rule": "", "labels": labels}


def test_a_leak_caught_later_says_by_how_much() -> None:
    assert sets.moved(row(10, LEAK), row(12.5, LEAK)) == ("caught later", 2.5)
    assert sets.moved(row(12.5, LEAK), row(10, LEAK)) == ("caught earlier", -2.5)


def test_a_leak_now_rotated_after_its_safety_margin_is_missed() -> None:
    # bench's safety margin: a rotation 5 minutes before the OOM is too late to drain.
    assert sets.moved(row(10, LEAK), row(20 - 5 / 60, LEAK)) == ("caught -> missed", None)
    assert sets.moved(row(None, LEAK), row(19, LEAK)) == ("missed -> caught", None)


def test_a_healthy_pod_spared_or_newly_rotated() -> None:
    assert sets.moved(row(3, HEALTHY), row(None, HEALTHY)) == ("false_rotation -> ok", None)
    assert sets.moved(row(None, HEALTHY), row(3, HEALTHY)) == ("ok -> false_rotation", None)
    assert sets.moved(row(3, HEALTHY), row(5, HEALTHY)) == ("false_rotation, at another time", 2.0)


def test_the_summary_counts_each_kind_and_its_spread() -> None:
    text = sets.moves_summary({"caught later": [0.5, 2.0, 4.0], "caught -> missed": [None]})
    assert text.splitlines() == ["  1 caught -> missed", "  3 caught later: by 0.50-4.00 h, median 2.00 h"]
    assert sets.moves_summary({}) == "  no first rotation moved"
    # The median as bench takes it: of an even count, the mean of the middle two.
    assert sets.moves_summary({"caught later": [1.0, 2.0]}) == "  2 caught later: by 1.00-2.00 h, median 1.50 h"
