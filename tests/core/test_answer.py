"""The sidecar's /v1/samples answer: what the sidecar writes (envelope) is
what every reader reads (read), and whatever else comes is refused or
counted, never raised."""

from __future__ import annotations

import json

import pytest

from memoryguard_kuberay.core import answer
from memoryguard_kuberay.core.constants import PAGE_SAMPLES
from memoryguard_kuberay.core.samples import Sample

SAMPLES = [Sample(time_s=1000.0 + i, memory_current_bytes=100 + i, memory_max_bytes=2**30, anon_bytes=50)
           for i in range(5)]


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_what_the_sidecar_writes_is_what_a_reader_reads() -> None:
    doc = answer.envelope([s.to_wire() for s in SAMPLES], source="cgroup-v2", more=True, pod_uid="u1",
                          pod_name="w-1")
    a = answer.read(body(doc), max_body=2**20, max_samples=PAGE_SAMPLES, now_s=2000.0, pod_uid="u1",
                    require_uid=True)
    assert a.refused is None and a.problem is None
    assert a.samples == tuple(SAMPLES) and a.more and a.source == "cgroup-v2" and not a.blind


def test_a_last_page_says_no_more_and_a_blind_sidecar_says_so() -> None:
    a = answer.read(body(answer.envelope([], source=answer.SOURCE_NONE, more=False)), max_body=2**20,
                    max_samples=None)
    assert a.samples == () and not a.more and a.blind and "more" not in answer.envelope([], source="x", more=False)


@pytest.mark.parametrize("raw, says, why", [
    (b"x" * 101, "too large", answer.Refusal.NOT_AN_ANSWER),
    (b"{not json", "not JSON", answer.Refusal.NOT_AN_ANSWER),
    (b"[" * 40 + b"]" * 40, "no samples list", answer.Refusal.NOT_AN_ANSWER),
    (body({"samples": [{}] * 4}), "4 samples (at most 3)", answer.Refusal.NOT_AN_ANSWER),
    (body({"samples": [], "pod": {"uid": "other", "name": "w-9"}}), "another pod (w-9)", answer.Refusal.WRONG_POD),
    (body({"samples": []}), "names no pod", answer.Refusal.WRONG_POD),
])
def test_an_answer_that_is_not_one_is_refused_whole(raw: bytes, says: str, why: answer.Refusal) -> None:
    a = answer.read(raw, max_body=100, max_samples=3, pod_uid="u1", require_uid=True)
    assert a.refused is why and says in (a.problem or "") and a.samples == ()


def test_samples_from_the_future_or_malformed_are_counted_and_old_ones_skipped() -> None:
    raws = [{"time": 10.0, "memory_current": 1}, {"time": 50.0, "memory_current": 1},
            {"time": 500.0, "memory_current": 1}, {"time": "soon"}, {"time": 10**400}, "x",
            {"time": 60.0, "memory_current": 1}]
    a = answer.read(body({"samples": raws}), max_body=2**20, max_samples=None, now_s=100.0, max_future_s=10.0,
                    oldest_s=20.0)
    assert [s.time_s for s in a.samples] == [50.0, 60.0]
    assert a.rejected == 4 and a.problem == "4 sample(s) rejected" and a.newest_too_old_s == 10.0


def test_a_recording_keeps_every_sample_whatever_its_time() -> None:
    a = answer.read(body({"samples": [{"time": 9e9, "memory_current": 1}]}), max_body=2**20, max_samples=None)
    assert [s.time_s for s in a.samples] == [9e9] and a.rejected == 0
