"""``/metrics`` of the sidecar: the latest sample as gauges (an unknown
reading is left out, never exported as 0), read errors per file, and
node_exporter-style ``*_scrape_success`` per source."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memoryguard_kuberay.core.samples import Sample

P = "memoryguard_sidecar_"

GAUGES: tuple[tuple[str, str, Callable[[Sample], float | int | None]], ...] = (
    ("memory_current_bytes", "memory.current of the Ray container", lambda s: s.memory_current_bytes),
    ("memory_max_bytes", "memory.max of the Ray container (absent: no limit)", lambda s: s.memory_max_bytes),
    ("memory_high_bytes", "memory.high of the Ray container (absent: not set, or cgroup v1)",
     lambda s: s.memory_high_bytes),
    ("working_set_bytes", "memory.current - inactive_file", lambda s: s.working_set_bytes),
    ("anon_bytes", "memory.stat anon", lambda s: s.anon_bytes),
    ("file_bytes", "memory.stat file", lambda s: s.file_bytes),
    ("inactive_file_bytes", "memory.stat inactive_file", lambda s: s.inactive_file_bytes),
    ("shmem_bytes", "memory.stat shmem", lambda s: s.shmem_bytes),
    ("plasma_used_bytes", "live bytes in the Ray object store", lambda s: s.plasma_used_bytes),
    ("plasma_capacity_bytes", "Ray object store capacity", lambda s: s.plasma_capacity_bytes),
    ("plasma_spilled_bytes", "Ray objects spilled to disk", lambda s: s.plasma_spilled_bytes),
    ("psi_some_avg10_percent", "memory.pressure some avg10", lambda s: s.psi_some_avg10_pct),
    ("psi_full_avg10_percent", "memory.pressure full avg10", lambda s: s.psi_full_avg10_pct),
    ("node_available_bytes", "the node's MemAvailable (served for a container with no memory limit)",
     lambda s: s.node_available_bytes),
    ("kernel_unreclaimable_bytes", "memory.stat slab_unreclaimable + sock + kernel_stack + pagetables + percpu "
     "(cgroup v2)", lambda s: s.kernel_bytes),
    ("sock_bytes", "memory.stat sock: socket buffers (cgroup v2)", lambda s: s.sock_bytes),
)


class SidecarCollector(Collector):
    def __init__(self, state: StateView) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        last = self.state.last_sample()
        if last is not None:
            for name, doc, get in GAUGES:
                value = get(last)
                if value is not None:
                    g = GaugeMetricFamily(P + name, doc)
                    g.add_metric([], float(value))
                    yield g
            # Counts that only grow while the container lives: counters
            # (..._total), so rate() and increase() read them.
            for name, doc, count in (
                    ("oom_kills", "memory.events oom_kill since the container started (a rise is an OOM kill; "
                                  "memory.oom.group counts a victim more than once)", last.oom_kill_count),
                    ("memory_high_events", "memory.events high: allocations throttled above memory.high",
                     last.high_events_count),
                    ("memory_max_events", "memory.events max: charges that hit memory.max (they precede an OOM "
                                          "kill)", last.max_events_count)):
                if count is not None:
                    c = CounterMetricFamily(P + name, doc)
                    c.add_metric([], float(count))
                    yield c
        shm = self.state.shm_charged_bytes()
        if shm is not None:
            g = GaugeMetricFamily(P + "shm_charged_bytes",
                                  "bytes used on /dev/shm: a high-water mark of Plasma, not live objects")
            g.add_metric([], float(shm))
            yield g
        ok = GaugeMetricFamily(P + "scrape_success", "1 if the last read of the source worked", labels=["source"])
        for source, success in self.state.scrape_success().items():
            ok.add_metric([source], 1.0 if success else 0.0)
        yield ok
        errors = CounterMetricFamily(P + "read_errors", "failed reads per file or endpoint", labels=["file"])
        for file, n in sorted(self.state.read_errors().items()):
            errors.add_metric([file], float(n))
        yield errors
        samples = CounterMetricFamily(P + "samples", "samples taken")
        samples.add_metric([], float(self.state.samples_taken()))
        yield samples
        info = GaugeMetricFamily(P + "source_info", "where memory is read from", labels=["source"])
        info.add_metric([self.state.source_name()], 1.0)
        yield info


class StateView:
    """What the collector reads; implemented by the running sidecar."""

    def last_sample(self) -> Sample | None:
        raise NotImplementedError

    def shm_charged_bytes(self) -> int | None:
        raise NotImplementedError

    def scrape_success(self) -> dict[str, bool]:
        raise NotImplementedError

    def read_errors(self) -> dict[str, int]:
        raise NotImplementedError

    def samples_taken(self) -> int:
        raise NotImplementedError

    def source_name(self) -> str:
        raise NotImplementedError


def render(state: StateView) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(state))
    return generate_latest(registry)
