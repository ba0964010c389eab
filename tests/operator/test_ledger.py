"""The rotation ledger on tables: the hourly cap counts every eviction of
the hour, however many and however they ended, across a restart (issue 23:
it saw only the last 20 recorded rotations, and not those that evicted and
then failed, so a maxPerHour above 20 was not enforced)."""

from __future__ import annotations

import dataclasses

import pytest

from memoryguard_kuberay.operator.clock import micro_time, parse_time
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


def test_times_in_the_status_are_rfc3339_and_read_back_as_written_or_as_older_statuses_wrote_them() -> None:
    """Issue 42, 4: rotation times were unix floats in a status a person
    reads beside Kubernetes objects that say RFC 3339."""
    book = Ledger()
    book.inflight["u1"] = _rotation(1, evicted=True)
    book.end("u1", Outcome(OutcomeKind.ROTATED), now=NOW + 0.25)
    book.inflight["u2"] = dataclasses.replace(_rotation(2, evicted=True), gone_at=NOW - 10.5)
    status = book.to_status()
    assert status["lastTime"] == "2027-01-15T08:00:00.250000Z" and status["recent"][0]["finishedAt"] == status[
        "lastTime"]
    assert status["inFlight"][0]["requestedAt"] == "2027-01-15T07:10:02.000000Z"
    assert status["inFlight"][0]["goneAt"] == "2027-01-15T07:59:49.500000Z"
    assert status["inFlight"][0]["lastAttempt"] is None
    assert status["evictedLastHour"] == ["2027-01-15T07:11:41.000000Z"]
    back = Ledger.from_status({"rotations": status})
    assert back.inflight["u2"] == book.inflight["u2"] and back.evicted_at == book.evicted_at
    assert back.starts(NOW, group=("rc", "g")) == book.starts(NOW, group=("rc", "g"))
    # A status written before 0.1.0 (unix seconds) reads the same.
    older = {**status, "inFlight": [{**status["inFlight"][0], "requestedAt": NOW - 2998, "goneAt": NOW - 10.5}],
             "evictedLastHour": [NOW - 2899]}
    again = Ledger.from_status({"rotations": older})
    assert again.inflight["u2"] == book.inflight["u2"] and again.evicted_at == book.evicted_at


@pytest.mark.parametrize("raw, expected", [
    ("2027-01-15T08:00:00Z", NOW), ("2027-01-15T08:00:00.250000Z", NOW + 0.25),
    ("2027-01-15T09:00:00+01:00", NOW), (NOW, NOW), (1800000000, NOW), ("1800000000.000", NOW),
    ("2027-01-15T08:00:00", None),  # no zone: not RFC 3339
    (1e300, None), (-1.0, None), (float("inf"), None), (float("nan"), None), (True, None), (None, None),
    ("tomorrow", None), ("9" * 41, None), ([NOW], None),
])
def test_a_time_read_back(raw: object, expected: float | None) -> None:
    """Whoever may write a status or a pod's annotations may write any of
    these: each reads as a time a datetime can hold, or as none (1e300 was
    taken, and writing it back as RFC 3339 would fail every cycle)."""
    assert parse_time(raw) == expected


def test_times_from_the_future_switch_no_guard_off() -> None:
    # Issue 63, 2: four evictions dated 9999 in status.rotations.evictedLastHour
    # counted against maxPerHour for ever (now - t < an hour holds for every
    # future t) and were written back each cycle; a recent rotation dated
    # ahead held its group's cooldown the same way. Another replica's clock a
    # little ahead is still believed.
    ahead = "9999-12-31T00:00:00.000000Z"
    book = Ledger.from_status({"rotations": {
        "evictedLastHour": [ahead] * 4 + [micro_time(NOW + 30)],
        "recent": [{"pod": "w", "cluster": "rc", "group": "g", "requestedAt": ahead}]}})
    assert book.rotations_last_hour(NOW) == 1
    assert book.to_status()["evictedLastHour"] == [micro_time(NOW + 30)]
    assert book.starts(NOW, group=("rc", "g")) == []
