"""`make test`'s two lanes (tests/lanes.py) name only tiers that exist: a
misspelt tier in lane A would select nothing there and, lane B being its
complement, move that tier's tests into lane B unseen."""

from tests import lanes
from tests.conftest import TIERS


def test_lane_a_names_only_tiers_conftest_marks() -> None:
    assert set(lanes.LANE_A_TIERS) <= set(TIERS) - {"fast"}


def test_lane_b_is_everything_lane_a_does_not_select() -> None:
    (_, a_args), (_, b_args) = lanes.LANES
    assert a_args[0] == b_args[0] == "-m" and b_args[1] == f"not ({a_args[1]})"


def test_the_fast_tiers_lanes_split_its_files_between_them() -> None:
    from pathlib import Path

    (_, one), (_, rest) = lanes.fast_lanes("M")
    assert one == ["-m", "M", *lanes.FAST_SPLIT]
    assert rest == ["-m", "M", *(f"--ignore={p}" for p in lanes.FAST_SPLIT)]
    root = Path(__file__).resolve().parents[1]
    assert all((root / p).exists() for p in lanes.FAST_SPLIT)  # a moved one: its lane would find nothing
