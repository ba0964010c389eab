"""The sample: one reading of a Ray container's memory, as the sidecar serves
it and as traces record it.

Every reading is optional: ``None`` means "not known", never zero (a missing
``memory.pressure`` is not "no pressure"). Bytes are integers, times are
seconds. The wire form (``to_wire``/``from_wire``) is the JSON of the
sidecar's ``GET /v1/samples``; the trace form is a CSV row of
``shared/traces`` (``t_s`` seconds since the pod started).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

# Wire names (sidecar JSON) and the matching Sample attribute.
WIRE_FIELDS: tuple[tuple[str, str], ...] = (
    ("memory_current", "memory_current_bytes"),
    ("memory_max", "memory_max_bytes"),
    ("anon", "anon_bytes"),
    ("file", "file_bytes"),
    ("inactive_file", "inactive_file_bytes"),
    ("shmem", "shmem_bytes"),
    ("plasma_used", "plasma_used_bytes"),
    ("plasma_capacity", "plasma_capacity_bytes"),
    ("plasma_spilled", "plasma_spilled_bytes"),
    ("psi_some_avg10", "psi_some_avg10_pct"),
    ("psi_full_avg10", "psi_full_avg10_pct"),
    ("oom_kill", "oom_kill_count"),
    ("memory_high", "memory_high_bytes"),
    ("events_high", "high_events_count"),
    ("events_max", "max_events_count"),
    ("node_available", "node_available_bytes"),
    ("slab_unreclaimable", "slab_unreclaimable_bytes"),
    ("sock", "sock_bytes"),
    ("kernel_stack", "kernel_stack_bytes"),
    ("pagetables", "pagetables_bytes"),
    ("percpu", "percpu_bytes"),
)
FLOAT_FIELDS = frozenset({"psi_some_avg10_pct", "psi_full_avg10_pct"})
# Traces use the wire names, with t_s in place of time.
TRACE_COLUMNS: tuple[str, ...] = ("t_s",) + tuple(w for w, _ in WIRE_FIELDS)
# What only cgroup v2 gives: a trace has these columns when its source gave
# them (a v1 node's, or a generated, trace keeps the columns it always had).
V2_ONLY_COLUMNS: tuple[str, ...] = ("memory_high", "events_high", "events_max")
# Served only for a container with no memory limit (the node is its ceiling).
NODE_COLUMNS: tuple[str, ...] = ("node_available",)
# The kernel's own memory charged to the cgroup that reclaim cannot give
# back (cgroup v2's memory.stat): a trace has these columns when its source
# gave them.
KERNEL_COLUMNS: tuple[str, ...] = ("slab_unreclaimable", "sock", "kernel_stack", "pagetables", "percpu")

# Values beyond this are garbage, not memory (16 EiB is the cgroup "no limit").
_MAX_BYTES = 2**62


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One reading. ``time_s``: unix seconds (live) or seconds since the pod
    started (traces); the policy only needs it to be monotonic per pod."""

    time_s: float
    memory_current_bytes: int | None = None
    memory_max_bytes: int | None = None  # None: no limit set ("max")
    anon_bytes: int | None = None
    file_bytes: int | None = None
    inactive_file_bytes: int | None = None
    shmem_bytes: int | None = None
    plasma_used_bytes: int | None = None
    plasma_capacity_bytes: int | None = None  # 0 or None: no object store
    # Bytes of objects Ray has spilled to disk and still holds there (the
    # raylet's ray_object_store_memory{Location="SPILLED"}): a full store that
    # spills is Ray working as designed, a leak pins objects and spills nothing.
    plasma_spilled_bytes: int | None = None
    psi_some_avg10_pct: float | None = None
    psi_full_avg10_pct: float | None = None
    # memory.events oom_kill: a counter whose rise means an OOM kill (its
    # step is not the number of kills: oom.group counts a victim twice).
    oom_kill_count: int | None = None
    # cgroup v2 only. memory.high: where the kernel starts throttling and
    # reclaiming (None: not set, or v1). memory.events "high" and "max":
    # counters of allocations throttled above memory.high and of charges
    # that hit memory.max (they count for seconds before an OOM kill).
    memory_high_bytes: int | None = None
    high_events_count: int | None = None
    max_events_count: int | None = None
    # The node's MemAvailable, served where the container has no memory
    # limit: what the pod can still take before the node runs out.
    node_available_bytes: int | None = None
    # cgroup v2's memory.stat: the kernel's memory charged to the cgroup that
    # reclaim cannot take back (issue 59, 1). Socket buffers of connections
    # nobody reads, unreclaimable slab (dentries of open files, network
    # structures), kernel stacks, page tables, per-CPU memory: memory.current
    # counts them and the kernel kills at memory.max with them, yet none is
    # anon or shmem. (Reclaimable slab, like page cache, is given back first.)
    slab_unreclaimable_bytes: int | None = None
    sock_bytes: int | None = None
    kernel_stack_bytes: int | None = None
    pagetables_bytes: int | None = None
    percpu_bytes: int | None = None

    @property
    def kernel_bytes(self) -> int | None:
        """The kernel's unreclaimable memory in the cgroup: the sum of those
        of its parts the source gave, None where it gave none (cgroup v1, a
        trace without them: there "in use" is anon + shmem alone)."""
        parts = [v for v in (self.slab_unreclaimable_bytes, self.sock_bytes, self.kernel_stack_bytes,
                             self.pagetables_bytes, self.percpu_bytes) if v is not None]
        return sum(parts) if parts else None

    @property
    def working_set_bytes(self) -> int | None:
        """``memory.current - inactive_file``: what kubelet and Ray's memory
        monitor compare with the limit. Unknown if either part is."""
        if self.memory_current_bytes is None or self.inactive_file_bytes is None:
            return None
        return max(0, self.memory_current_bytes - self.inactive_file_bytes)

    @property
    def unreclaimable_bytes(self) -> int | None:
        """What the kernel cannot reclaim to stay under the limit: ``anon``
        plus ``shmem`` (Plasma's pages) plus the kernel's own unreclaimable
        part (``kernel_bytes``, where given) when ``memory.stat`` gives them,
        else the working set. Page cache, active or not, is given back
        before the OOM killer runs, so a cgroup can sit at 99% of its limit
        in cache while healthy, and a leak can grow under that cache; a
        leak of socket buffers or slab grows in none of anon, shmem or
        cache (issue 59, 1)."""
        if self.anon_bytes is not None and self.shmem_bytes is not None:
            return self.anon_bytes + self.shmem_bytes + (self.kernel_bytes or 0)
        return self.working_set_bytes

    @property
    def used_fraction(self) -> float | None:
        used, limit = self.unreclaimable_bytes, self.memory_max_bytes
        if used is None or not limit:
            return None
        return used / limit

    @property
    def working_set_fraction(self) -> float | None:
        ws, limit = self.working_set_bytes, self.memory_max_bytes
        if ws is None or not limit:
            return None
        return ws / limit

    @property
    def store_fraction(self) -> float | None:
        """Live object-store bytes over capacity; None without a store."""
        used, cap = self.plasma_used_bytes, self.plasma_capacity_bytes
        if used is None or not cap:
            return None
        return used / cap

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": self.time_s}
        for wire, attr in WIRE_FIELDS:
            out[wire] = getattr(self, attr)
        out["working_set"] = self.working_set_bytes
        return out

    @classmethod
    def from_wire(cls, doc: Mapping[str, Any]) -> Sample:
        """Parse one sample of the sidecar's JSON. Raises ``ValueError`` on a
        missing or non-finite time; any other bad value becomes ``None``."""
        t = _number(doc.get("time"))
        if t is None:
            raise ValueError("sample without a valid 'time'")
        # Positional, in the fields' order (WIRE_FIELDS is), and bytes as a
        # JSON integer taken as they are: a first poll or a takeover parses
        # hundreds of samples a pod (issue 25), and keywords and a call per
        # field were most of a sample's cost.
        get = doc.get
        values: list[Any] = [v if type(v := get(wire)) is int and 0 <= v <= _EXACT and not is_float
                             else _coerce(attr, v) for wire, attr, is_float in _WIRE_PLAN]
        return cls(t, *values)

    def to_trace_row(self) -> dict[str, str]:
        row = {"t_s": _fmt(self.time_s if self.time_s % 1 else int(self.time_s))}
        for wire, attr in WIRE_FIELDS:
            row[wire] = _fmt(getattr(self, attr))
        return row

    @classmethod
    def from_trace_row(cls, row: Mapping[str, str | None]) -> Sample:
        t = _number(row.get("t_s"))
        if t is None:
            raise ValueError(f"row without a valid t_s: {dict(row)!r}")
        kwargs: dict[str, Any] = {}
        for wire, attr in WIRE_FIELDS:
            raw = row.get(wire)
            kwargs[attr] = _coerce(attr, _number(raw) if raw not in (None, "") else None)
        # In traces a capacity of 0 means "no store": keep it as given.
        return cls(time_s=t, **kwargs)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if not isinstance(value, (int, float, str)):
        return None
    try:
        # An int of a few hundred digits (JSON allows it) overflows a float.
        f = float(value)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


_EXACT = 2**53  # an int up to this is exact as a double: int(float(v)) == v
# from_wire's plan: each wire field, its attribute, whether it is a float field.
_WIRE_PLAN = tuple((wire, attr, attr in FLOAT_FIELDS) for wire, attr in WIRE_FIELDS)
assert tuple(f.name for f in dataclasses.fields(Sample))[1:] == tuple(a for _, a in WIRE_FIELDS), \
    "from_wire passes the fields by position: WIRE_FIELDS must be in the dataclass's order"


def _coerce(attr: str, value: object) -> int | float | None:
    # The common case, bytes as a JSON integer, without the round trip
    # through float (the same value); a first poll parses hundreds of
    # samples of a dozen fields each (issue 25: a takeover's cost).
    if type(value) is int and 0 <= value <= _EXACT and attr not in FLOAT_FIELDS:
        return value
    f = _number(value)
    if f is None or f < 0:
        return None
    if attr in FLOAT_FIELDS:
        return f if f <= 100.0 else None
    if f > _MAX_BYTES:
        return None
    return int(f)


def _fmt(value: object) -> str:
    return "" if value is None else str(value)
