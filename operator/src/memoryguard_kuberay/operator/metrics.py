"""The operator's Prometheus metrics (served on ``--metrics-port``).

By default a guard's pods are summed up per worker group (issue 25: 40,000
per-pod series at 10,000 pods made /metrics 4.7 MB and a second to render);
``MEMORYGUARD_POD_METRICS=true`` adds a series per pod. Per-pod series are
removed when the pod leaves the guard, and a guard's gauges when this
replica stops acting on it (deleted, or its shard now another replica's),
so cardinality follows what this replica guards, not its history."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from memoryguard_kuberay.operator.status import AT_RISK, PodView, pod_status, templates

P = "memoryguard_"


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, per_pod: bool = False) -> None:
        r = registry or CollectorRegistry()
        self.registry, self.per_pod = r, per_pod
        # What runs, as kube-state-metrics' *_info series: join on it in a query.
        self.build_info = Gauge(P + "build_info", "1, labelled with the operator's versions",
                                ["version", "python", "kopf"], registry=r)
        self.build_info.labels(*_versions()).set(1)
        # Every replica serves /metrics, each its own guards' series.
        self.leader = Gauge(P + "leader", "1 on a replica that acts on some guards (holds a shard, or runs alone)",
                            ["identity"], registry=r)
        self.shards_owned = Gauge(P + "shards_owned", "shards this replica holds (of memoryguard_shards)",
                                  ["identity"], registry=r)
        self.shards_total = Gauge(P + "shards", "shards the guards are split into", ["identity"], registry=r)
        g = ["namespace", "guard"]
        pod = [*g, "pod", "group"]
        self.pods_guarded = Gauge(P + "pods_guarded", "pods a guard watches", g, registry=r)
        self.pods_at_risk = Gauge(P + "pods_at_risk", "pods with a rotation wanted or under way", g, registry=r)
        self.pods_blind = Gauge(P + "pods_without_memory_source", "guarded pods whose sidecar reads no memory "
                                "(nothing protects them)", g, registry=r)
        self.guard_degraded = Gauge(P + "guard_degraded", "1 when the guard's Degraded condition is True",
                                    [*g, "reason"], registry=r)
        self.working_set = Gauge(P + "pod_working_set_bytes", "working set of the Ray container", pod, registry=r)
        self.limit = Gauge(P + "pod_memory_limit_bytes", "memory limit of the Ray container", pod, registry=r)
        self.projected_oom = Gauge(P + "pod_projected_oom_seconds", "time until the trend reaches the limit",
                                   pod, registry=r)
        self.store = Gauge(P + "pod_object_store_ratio", "object store occupancy (0-1)", pod, registry=r)
        self.verdict = Gauge(P + "pod_verdict", "1 for the pod's current verdict", [*pod, "verdict"], registry=r)
        # Per group, for the dashboard's heat map of risk (rows: groups, over time).
        grp = [*g, "group"]
        self.group_projected_oom = Gauge(P + "group_projected_oom_seconds", "the nearest projected OOM of a "
                                         "group's pods", grp, registry=r)
        self.group_working_set = Gauge(P + "group_working_set_max_bytes", "the largest working set among a "
                                       "group's pods", grp, registry=r)
        self.group_limit = Gauge(P + "group_memory_limit_bytes", "the memory limit of a group's pods (the "
                                 "largest)", grp, registry=r)
        self.group_store = Gauge(P + "group_object_store_ratio_max", "the fullest object store among a group's "
                                 "pods (0-1)", grp, registry=r)
        self.group_pods = Gauge(P + "group_pods", "a group's pods by verdict", [*grp, "verdict"], registry=r)
        self.template_creep = Gauge(P + "template_creep_bytes_per_hour", "median creep of a group's pods of one "
                                    "template revision", [*g, "group", "template"], registry=r)
        self._groups: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        # The per-group gauges by the key publish_groups records a series under.
        self._group_gauges: dict[str, Gauge] = {
            "oom": self.group_projected_oom, "ws": self.group_working_set, "limit": self.group_limit,
            "store": self.group_store, "pods": self.group_pods, "creep": self.template_creep}
        self.rotations = Counter(P + "rotations", "rotations by reason and outcome", [*g, "reason", "outcome"],
                                 registry=r)
        self.evictions_refused = Counter(P + "evictions_refused", "evictions refused (429/5xx)", g, registry=r)
        self.eviction_timeouts = Counter(P + "eviction_timeouts", "rotations given up because evictions were "
                                         "refused past evictionTimeoutSeconds", g, registry=r)
        # The pod admission webhook (webhook.py), per namespace: "Injected",
        # or why a Ray pod was created as it came (admission.AdmissionReason,
        # or "Failed": an answer not given in time or an error).
        self.admissions = Counter(P + "admissions", "Ray pod creations the webhook answered, by outcome",
                                  ["namespace", "outcome"], registry=r)
        self.admission_seconds = Histogram(P + "admission_seconds", "the webhook's time to answer a pod creation",
                                           buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0), registry=r)
        self.remediations = Counter(P + "remediations", "remediations by kind and mode", [*g, "kind", "mode"],
                                    registry=r)
        self.ladder_steps = Counter(P + "ladder_steps", "the ladder's steps before a rotation, by step (Reclaim, "
                                    "Shed, Replace) and outcome (asked, Effective, NoEffect)",
                                    [*g, "step", "outcome"], registry=r)
        self.reviews = Counter(P + "remediation_reviews", "remediations judged, by kind and verdict (Effective, "
                               "NoEffect, Worse)", [*g, "kind", "verdict"], registry=r)
        self.poll_errors = Counter(P + "sidecar_poll_errors", "failed sidecar polls, by why (SidecarUnreachable, "
                                   "BadAnswer, WrongPod, SamplesStale)", (*g, "reason"), registry=r)
        self.poll_seconds = Histogram(P + "sidecar_poll_seconds", "sidecar poll latency", g, registry=r,
                                      buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.decision_seconds = Histogram(P + "decision_seconds", "policy time per pod per cycle", g, registry=r,
                                          buckets=(1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2))
        self.sample_to_decision = Histogram(
            P + "sample_to_decision_seconds", "from a sample being served to the decision on it (operator clock)",
            # From 1 ms: at scale most decisions come within 50 ms, and a first
            # bucket of 50 ms made every p99 read "under 50 ms" (issue 25).
            g, registry=r, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.cycle_seconds = Histogram(P + "guard_cycle_seconds", "one guard cycle", g, registry=r,
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        # Per guard, its pods' series: (pod, group) -> the verdict series set.
        self._pods: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
        self._degraded: dict[tuple[str, str], str] = {}

    def count_connections(self, counts: Callable[[], tuple[int, int]]) -> None:
        """``memoryguard_sidecar_connections_total{how="opened"|"reused"}``,
        read from the pool at each scrape (``counts``: opened, reused): polls
        that open a connection each time cost about half the operator's CPU,
        so whether they are reused is worth a look (issue 25)."""
        self.registry.register(_Connections(counts))

    def owning(self, identity: str, owned: int, shards: int) -> None:
        self.leader.labels(identity).set(1 if owned else 0)
        self.shards_owned.labels(identity).set(owned)
        self.shards_total.labels(identity).set(shards)

    def forget_guard(self, namespace: str, guard: str) -> None:
        """Every gauge of a guard this replica no longer acts on: another
        replica (or none) says what it is now. Counters and histograms stay:
        what happened here did happen, and rate() sums over replicas."""
        self.forget_pods(namespace, guard, set())
        self._pods.pop((namespace, guard), None)
        self.publish_groups(namespace, guard, ())
        self._groups.pop((namespace, guard), None)
        for m in (self.pods_guarded, self.pods_at_risk, self.pods_blind):
            try:
                m.remove(namespace, guard)
            except KeyError:
                pass
        old = self._degraded.pop((namespace, guard), None)
        if old is not None:
            self.guard_degraded.remove(namespace, guard, old)

    def drop_guard(self, namespace: str, guard: str) -> None:
        """A deleted guard: every series of it, counters and histograms too
        (issue 44, 5: creating and deleting 1,000 guards grew /metrics from
        12 KB to 2.0 MB). Its gauges first (forget_guard), then each counter
        or histogram series labelled with it. By the series' labels alone:
        found by what each metric collects, one deletion among 1,000 guards
        took 0.3 s of the event loop (every guard's histogram buckets made
        into samples), and a batch of deletions held it 2.3 s."""
        self.forget_guard(namespace, guard)
        for m in (self.rotations, self.evictions_refused, self.eviction_timeouts, self.remediations, self.reviews,
                  self.poll_errors, self.poll_seconds, self.decision_seconds, self.sample_to_decision,
                  self.cycle_seconds):
            m.remove_by_labels({"namespace": namespace, "guard": guard})

    def degraded(self, namespace: str, guard: str, reason: str | None) -> None:
        """One series per guard: 1 with the Degraded reason, or 0 (reason "")."""
        old = self._degraded.get((namespace, guard))
        if old is not None and old != (reason or ""):
            self.guard_degraded.remove(namespace, guard, old)
        self._degraded[(namespace, guard)] = reason or ""
        self.guard_degraded.labels(namespace, guard, reason or "").set(1 if reason else 0)

    def forget_pods(self, namespace: str, guard: str, keep: set[tuple[str, str]]) -> None:
        """Drop the per-pod series of pods no longer guarded."""
        known = self._pods.get((namespace, guard), {})
        for pod_group in [k for k in known if k not in keep]:
            labels = (namespace, guard, *pod_group)
            for m in (self.working_set, self.limit, self.projected_oom, self.store):
                try:
                    m.remove(*labels)
                except KeyError:
                    pass
            self.verdict.remove(*labels, known.pop(pod_group))

    def pod(self, namespace: str, guard: str, pod: str, group: str, *, ws: int | None, limit: int | None,
            eta: float | None, store: float | None, verdict: str) -> None:
        labels = (namespace, guard, pod, group)
        known = self._pods.setdefault((namespace, guard), {})
        for m, v in ((self.working_set, ws), (self.limit, limit), (self.projected_oom, eta), (self.store, store)):
            if v is None:
                try:
                    m.remove(*labels)
                except KeyError:
                    pass
            else:
                m.labels(*labels).set(v)
        old = known.get((pod, group))
        if old is not None and old != verdict:
            self.verdict.remove(*labels, old)
        known[(pod, group)] = verdict
        self.verdict.labels(*labels, verdict).set(1)

    def publish(self, namespace: str, guard: str, views: Sequence[PodView], *, guarded: int) -> None:
        """One cycle's picture of a guard: its counts and every pod's series
        (those of pods that left are removed)."""
        self.pods_guarded.labels(namespace, guard).set(guarded)
        self.pods_at_risk.labels(namespace, guard).set(sum(1 for v in views if v.decision.reason in AT_RISK))
        self.pods_blind.labels(namespace, guard).set(sum(1 for v in views if v.blind))
        if self.per_pod:
            for v in views:
                ev = v.decision.evidence
                self.pod(namespace, guard, v.name, v.group, ws=ev.working_set_bytes, limit=ev.limit_bytes,
                         eta=ev.oom_outlook_s, store=ev.store_fraction, verdict=pod_status(v)["verdict"])
        self.forget_pods(namespace, guard, {(v.name, v.group) for v in views} if self.per_pod else set())
        self.publish_groups(namespace, guard, views)

    def publish_groups(self, namespace: str, guard: str, views: Sequence[PodView]) -> None:
        """The per-group series; those of groups, verdicts and revisions gone are removed."""
        seen: set[tuple[str, ...]] = set()
        worst: dict[str, dict[str, float]] = {}  # group -> gauge key -> the extreme among its pods
        verdicts: dict[tuple[str, str], int] = {}
        for v in views:
            ev, w = v.decision.evidence, worst.setdefault(v.group, {})
            for key, value, pick in (("oom", ev.oom_outlook_s, min), ("ws", ev.working_set_bytes, max),
                                     ("limit", ev.limit_bytes, max), ("store", ev.store_fraction, max)):
                if value is not None:
                    w[key] = pick(float(value), w.get(key, float(value)))
            verdict = pod_status(v)["verdict"]
            verdicts[(v.group, verdict)] = verdicts.get((v.group, verdict), 0) + 1
        for group, w in worst.items():
            for key, value in w.items():
                self._group_gauges[key].labels(namespace, guard, group).set(value)
                seen.add((key, group))
        for (group, verdict), n in verdicts.items():
            self.group_pods.labels(namespace, guard, group, verdict).set(n)
            seen.add(("pods", group, verdict))
        for group, revs in templates(views).items():
            for template, row in revs.items():
                self.template_creep.labels(namespace, guard, group, template).set(row["creepBytesPerHour"])
                seen.add(("creep", group, template))
        for gone in self._groups.get((namespace, guard), set()) - seen:
            try:
                self._group_gauges[gone[0]].remove(namespace, guard, *gone[1:])
            except KeyError:
                pass
        self._groups[(namespace, guard)] = seen



class _Connections(Collector):
    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        opened, reused = self.counts()
        family = CounterMetricFamily(P + "sidecar_connections", "connections to sidecars: opened for a poll, or "
                                     "reused (kept from the last poll of the pod)", labels=["how"])
        family.add_metric(["opened"], opened)
        family.add_metric(["reused"], reused)
        yield family


def _versions() -> tuple[str, str, str]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    return version("memoryguard-kuberay-operator"), platform.python_version(), version("kopf")
