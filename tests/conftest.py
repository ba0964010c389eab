"""Test-wide settings. Hypothesis' per-example deadline is off: on a loaded
2-core machine a slow example is not a failure of the code under test."""

from hypothesis import settings

settings.register_profile("memoryguard", deadline=None)
settings.load_profile("memoryguard")


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """The fault matrix, when the fault tests ran."""
    import sys

    mod = sys.modules.get("tests.faults.test_fault_matrix")
    if mod is None or not mod.RESULTS:
        return
    from tests.faults.matrix import render

    terminalreporter.write_sep("=", "fault matrix")
    terminalreporter.write_line(render(mod.RESULTS))
