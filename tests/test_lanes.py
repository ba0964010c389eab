"""`make test`'s two lanes (tests/lanes.py) name only tiers that exist: a
misspelt tier in lane A would select nothing there and, lane B being its
complement, move that tier's tests into lane B unseen."""

from tests import lanes
from tests.conftest import TIERS


def test_lane_a_names_only_tiers_conftest_marks() -> None:
    assert set(lanes.LANE_A_TIERS) <= set(TIERS) - {"fast"}


def test_lane_b_is_everything_lane_a_does_not_select() -> None:
    (_, a_marks), (_, b_marks) = lanes.LANES
    assert b_marks == f"not ({a_marks})"
