"""Parsers: exact values on known input; any bytes in, no exception out."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.sidecar import parsers
from memoryguard_kuberay.sidecar.objectstore import AVAILABLE, BY_LOCATION, SPILLED_ONLY, USED, WANTED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_limit_values() -> None:
    assert parsers.parse_limit(b"max\n") == (True, None)
    assert parsers.parse_limit(b"9223372036854771712\n") == (True, None)
    assert parsers.parse_limit(b"1073741824\n") == (True, 1073741824)
    assert parsers.parse_limit(b"-1") == (False, None)
    assert parsers.parse_limit(b"") == (False, None)


def test_psi() -> None:
    got = parsers.parse_psi(b"some avg10=0.50 avg60=0.10 avg300=0.00 total=1\nfull avg10=200 avg60=x\n")
    assert got == {"some_avg10": 0.5, "some_avg60": 0.1, "some_avg300": 0.0}  # 200% and x rejected


def test_ray_metrics_page() -> None:
    """The real page of a Ray 2.60 raylet (1,045 lines, 287 KiB)."""
    lines = (FIXTURES / "ray-2.60-metrics.txt").read_bytes().split(b"\n")
    got = parsers.prom_values(lines, WANTED, SPILLED_ONLY)
    assert got[USED] == 104857854.0 and got[AVAILABLE] == 195142146.0
    # By location, only SPILLED counts: the 100 MB in MMAP_SHM is not spilled.
    assert got[BY_LOCATION] == 0.0


def test_spilled_bytes_only_from_the_spilled_location() -> None:
    page = (b'ray_object_store_memory{Component="raylet",Location="MMAP_SHM",ObjectState="SEALED"} 5e8\n'
            b'ray_object_store_memory{Component="raylet",Location="SPILLED",ObjectState=""} 3.0e8\n'
            b'ray_object_store_memory{Component="core_worker",Location="WORKER_HEAP"} 7\n')
    assert parsers.prom_values(page.split(b"\n"), WANTED, SPILLED_ONLY) == {BY_LOCATION: 3.0e8}
    # Without the filter every location is summed, which is not spilled bytes.
    assert parsers.prom_values(page.split(b"\n"), WANTED)[BY_LOCATION] == 5e8 + 3e8 + 7


@settings(max_examples=300)
@given(st.binary(max_size=2048))
def test_any_bytes_no_exception(data: bytes) -> None:
    parsers.parse_int(data)
    parsers.parse_limit(data)
    parsers.parse_keyed(data)
    parsers.parse_psi(data)
    parsers.prom_values(data.split(b"\n"), WANTED)


@given(st.text(max_size=400))
def test_prometheus_like_text(text: str) -> None:
    page = f"# HELP x\nray_object_store_used_memory{{a=\"{text}\"}} {text}\n".encode("utf-8", "replace")
    out = parsers.prom_values(page.split(b"\n"), WANTED)
    assert all(v >= 0 for v in out.values())


@given(st.dictionaries(st.sampled_from(["time", "memory_current", "memory_max", "psi_full_avg10", "oom_kill"]),
                       st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=8), st.booleans())))
def test_sample_json_never_crashes(doc: dict) -> None:  # type: ignore[type-arg]
    try:
        s = Sample.from_wire(doc)
    except ValueError:
        return
    assert s.memory_current_bytes is None or s.memory_current_bytes >= 0


def test_labels_are_read_as_prometheus_reads_them() -> None:
    """Issue 26, 9: the samples are parsed by prometheus_client's parser, so
    a label is a label: 'Location="SPILLED"' as the tail of another label
    is not the SPILLED location (the hand-written parser matched the text)."""
    page = (b'ray_object_store_memory{PreviousLocation="SPILLED",Location="MMAP_SHM"} 9e8\n'
            b'ray_object_store_memory{note="was Location=\\"SPILLED\\"",Location="MMAP_SHM"} 9e8\n'
            b'ray_object_store_memory{Location="SPILLED"} 2e8\n'
            b'ray_object_store_used_memory{a="}"} 1.5e3\n'
            b'ray_object_store_available_memory NaN\n')
    got = parsers.prom_values(page.split(b"\n"), WANTED, SPILLED_ONLY)
    assert got == {BY_LOCATION: 2e8, USED: 1500.0}
