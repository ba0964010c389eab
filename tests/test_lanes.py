"""`make test`'s two lanes (tests/lanes.py) name only tiers that exist: a
misspelt tier in lane A would select nothing there and, lane B being its
complement, move that tier's tests into lane B unseen."""

from tests import lanes
from tests.conftest import TIERS


def test_lane_a_names_only_tiers_conftest_marks() -> None:
    assert set(lanes.LANE_A_TIERS) | set(lanes.LANE_B_TIERS) <= set(TIERS) - {"fast"}


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


def test_the_fault_matrix_runs_in_lane_b_and_the_rest_of_e2e_in_lane_a() -> None:
    import subprocess
    import sys

    def collected(args: list[str]) -> set[str]:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args, "tests/faults",
                              "tests/sidecar/test_e2e.py"], capture_output=True, text=True, timeout=300)
        return {line for line in out.stdout.splitlines() if "::" in line}

    (_, a), (_, b) = lanes.LANES
    in_a, in_b = collected(a), collected(b)
    assert in_a and in_b and not in_a & in_b
    assert all(t.startswith("tests/faults/") for t in in_b) and not any(t.startswith("tests/faults/") for t in in_a)
