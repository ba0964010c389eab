"""Test-wide settings. Hypothesis' per-example deadline is off: on a loaded
2-core machine a slow example is not a failure of the code under test."""

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("memoryguard", deadline=None)
settings.load_profile("memoryguard")


# Each tier's marker, by where its tests live (a mark set in a folder's
# conftest.py is not seen by ``-m``: it must be on the items). The fast tier
# (``make check``) is every test none of these select.
TIERS_BY_PATH = {
    "tests/realk8s/": "realk8s",
    "tests/realpods/": "realpods",
    "tests/cgroupv2/test_cgroupv2.py": "cgroupv2",  # test_compare.py: its judge, fast
    "tests/faults/": "faults",
    "tests/sidecar/test_e2e.py": "e2e",
    "tests/operator/test_emulator": "emulator",  # the devkit's emulated API, not the product
    "tests/deploy/test_images.py": "slow",  # each image's install into a fresh venv
    "tests/operator/test_poll_any_answer.py": "e2e",  # 12,000 answers through a loopback socket
}


# The tiers in the order the README lists them; "fast" is none of the others.
TIERS = ("fast", "replays", "e2e", "faults", "emulator", "ray", "slow", "realk8s", "realpods", "cgroupv2")
_TIER_OF: dict[str, str] = {}  # test id -> its tier
_TIER_TIME: dict[str, list[float]] = {}  # tier -> [tests, seconds (setup, call and teardown)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, marker in TIERS_BY_PATH.items():
            if path.startswith(prefix):
                item.add_marker(getattr(pytest.mark, marker))
        _TIER_OF[item.nodeid] = next((t for t in TIERS[1:] if item.get_closest_marker(t)), "fast")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _TIER_TIME.setdefault(_TIER_OF.get(report.nodeid, "fast"), [0, 0.0])
    tier[0] += report.when == "call" or (report.when == "setup" and report.skipped)
    tier[1] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Each tier's count and time (what the README's table says), and the
    fault matrix when the fault tests ran."""
    import sys

    if _TIER_TIME:
        terminalreporter.write_sep("=", "tiers: tests run and their time (a session fixture's set-up counts "
                                        "toward the test that first used it)")
        for name in TIERS:
            if name in _TIER_TIME:
                n, secs = _TIER_TIME[name]
                terminalreporter.write_line(f"{name:10} {int(n):5} tests {secs:8.0f} s")
    mod = sys.modules.get("tests.faults.test_fault_matrix")
    if mod is None or not mod.RESULTS:
        return
    from tests.faults.matrix import render

    terminalreporter.write_sep("=", "fault matrix")
    terminalreporter.write_line(render(mod.RESULTS))


@pytest.fixture(scope="session")
def real() -> Iterator[object]:
    """The real control plane (tests/realk8s/controlplane.py), one per
    session, on this run's own ports and state dir; skipped where
    ../shared/realk8s is absent."""
    from tests.realk8s import controlplane

    if not controlplane.kit_present():
        pytest.skip(controlplane.ABSENT)
    home = Path(tempfile.mkdtemp(prefix="memoryguard-realk8s-"))
    cp = controlplane.start(home, controlplane.k8s_tools())
    try:
        yield cp
    finally:
        cp.down()
