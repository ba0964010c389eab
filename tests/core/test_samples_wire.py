"""A sample's wire value, read: the integer fast path gives what the general
path gives (a float round trip), for any value a pod may send."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryguard_kuberay.core import samples
from memoryguard_kuberay.core.samples import FLOAT_FIELDS, WIRE_FIELDS, Sample


def general(attr: str, value: object) -> int | float | None:
    """The reading as it was before the fast path (samples._coerce's rest)."""
    f = samples._number(value)
    if f is None or f < 0:
        return None
    if attr in FLOAT_FIELDS:
        return f if f <= 100.0 else None
    if f > samples._MAX_BYTES:
        return None
    return int(f)


wire_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=2**53 - 4, max_value=2**53 + 4),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), st.text(max_size=8),
    st.lists(st.integers(), max_size=2))


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([attr for _, attr in WIRE_FIELDS]), wire_values)
def test_any_value_reads_as_the_general_path_reads_it(attr: str, value: object) -> None:
    got, want = samples._coerce(attr, value), general(attr, value)
    assert got == want and type(got) is type(want)


def test_bytes_as_integers_read_exactly_and_garbage_is_none() -> None:
    doc = {"time": 1.5e9, "memory_current": 2**40, "memory_max": 2**63, "anon": -1, "psi_full_avg10": 3,
           "oom_kill": True}
    s = Sample.from_wire(doc)
    assert s.memory_current_bytes == 2**40 and s.memory_max_bytes is None and s.anon_bytes is None
    assert s.psi_full_avg10_pct == 3.0 and isinstance(s.psi_full_avg10_pct, float)
    assert s.oom_kill_count is None and math.isclose(s.time_s, 1.5e9)
