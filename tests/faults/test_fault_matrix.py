"""The fault matrix (fast variant): each scenario injects one kind of fault
into the emulated world while the real operator guards a leaking worker,
then checks the referee's rules and the expected outcome. The matrix is
printed at the end of the pytest run (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenarios import SCENARIOS, Result, Scenario, play

pytestmark = pytest.mark.e2e
RESULTS: list[Result] = []


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.id for s in SCENARIOS])
async def test_fault(tmp_path: Path, sc: Scenario) -> None:
    result = await play(tmp_path, sc)
    RESULTS.append(result)
    assert not result.violations, "\n".join(result.violations)
    assert result.ok, f"{result.problem}\n{result.detail}"
