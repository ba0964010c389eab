"""The rotation ledger on tables: the hourly cap counts every eviction of
the hour, however many and however they ended, across a restart (issue 23:
it saw only the last 20 recorded rotations, and not those that evicted and
then failed, so a maxPerHour above 20 was not enforced)."""

from __future__ import annotations

import pytest

from memoryguard_kuberay.operator.rotations.ledger import InFlight, Ledger, Outcome, OutcomeKind, Phase

NOW = 1_800_000_000.0


def _rotation(i: int, *, evicted: bool) -> InFlight:
    return InFlight(pod=f"w{i}", uid=f"u{i}", cluster="rc", group="g", reason="ProjectedOOM: x",
                    requested_at=NOW - 3000 + i, phase=Phase.REPLACING if evicted else Phase.EVICTING,
                    evicted_at=NOW - 2900 + i if evicted else None)


@pytest.mark.parametrize("ended, outcomes, in_flight, expected", [
    # 30 ended rotations that evicted: all 30 count, not the last 20.
    (30, [OutcomeKind.ROTATED], 0, 30),
    # Evicted, then failed (no replacement in time): the eviction happened; it counts.
    (25, [OutcomeKind.FAILED], 0, 25),
    (10, [OutcomeKind.ROTATED, OutcomeKind.FAILED], 3, 13),  # in flight count too
    (0, [OutcomeKind.ROTATED], 4, 4),
])
def test_the_hourly_count(ended: int, outcomes: list[OutcomeKind], in_flight: int, expected: int) -> None:
    book = Ledger()
    for i in range(ended):
        book.inflight[f"u{i}"] = _rotation(i, evicted=True)
        book.end(f"u{i}", Outcome(outcomes[i % len(outcomes)]), now=NOW - 100)
    for i in range(100, 100 + in_flight):
        book.inflight[f"u{i}"] = _rotation(i, evicted=False)
    assert book.rotations_last_hour(NOW) == expected
    # ... and the same after a restart, from the status it wrote.
    assert Ledger.from_status({"rotations": book.to_status()}).rotations_last_hour(NOW) == expected


def test_a_rotation_given_up_before_evicting_does_not_count_and_old_ones_leave() -> None:
    book = Ledger()
    book.inflight["u1"] = _rotation(1, evicted=False)
    book.end("u1", Outcome(OutcomeKind.FAILED), now=NOW)  # refused to the deadline: nothing was disrupted
    book.inflight["u2"] = _rotation(2, evicted=True)
    book.end("u2", Outcome(OutcomeKind.ROTATED), now=NOW)
    assert book.rotations_last_hour(NOW) == 1
    assert book.rotations_last_hour(NOW + 3600) == 0 and book.to_status()["evictedLastHour"] == []


@pytest.mark.parametrize("stored", [["x", None, True, float("nan"), 1e308], "not a list", None, [NOW] * 5000])
def test_what_a_status_holds_is_read_within_bounds(stored: object) -> None:
    book = Ledger.from_status({"rotations": {"evictedLastHour": stored}})
    assert len(book.evicted_at) <= 1000 and all(isinstance(t, float) for t in book.evicted_at)
