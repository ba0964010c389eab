"""The operator's Prometheus metrics (served on ``--metrics-port``).

Per-pod series are removed when the pod leaves the guard, so cardinality
follows the cluster, not its history."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from memoryguard_kuberay.operator.status import AT_RISK, PodView, pod_status, templates

P = "memoryguard_"


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.registry = r
        # What runs, as kube-state-metrics' *_info series: join on it in a query.
        self.build_info = Gauge(P + "build_info", "1, labelled with the operator's versions",
                                ["version", "python", "kopf"], registry=r)
        self.build_info.labels(*_versions()).set(1)
        # Only the acting replica serves /metrics (a standby's readiness is down):
        # which replica leads, and since when it changed, is read off this series.
        self.leader = Gauge(P + "leader", "1 on the replica that acts (holds the Lease, or runs alone)",
                            ["identity"], registry=r)
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
        self.group_projected_oom = Gauge(P + "group_projected_oom_seconds", "the nearest projected OOM of a "
                                         "group's pods", [*g, "group"], registry=r)
        self.template_creep = Gauge(P + "template_creep_bytes_per_hour", "median creep of a group's pods of one "
                                    "template revision", [*g, "group", "template"], registry=r)
        self._groups: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        self.rotations = Counter(P + "rotations", "rotations by reason and outcome", [*g, "reason", "outcome"],
                                 registry=r)
        self.evictions_refused = Counter(P + "evictions_refused", "evictions refused (429/5xx)", g, registry=r)
        self.eviction_timeouts = Counter(P + "eviction_timeouts", "rotations given up because evictions were "
                                         "refused past evictionTimeoutSeconds", g, registry=r)
        self.remediations = Counter(P + "remediations", "remediations by kind and mode", [*g, "kind", "mode"],
                                    registry=r)
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

    def leading(self, identity: str) -> None:
        self.leader.labels(identity).set(1)

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
        for v in views:
            ev = v.decision.evidence
            self.pod(namespace, guard, v.name, v.group, ws=ev.working_set_bytes, limit=ev.limit_bytes,
                     eta=ev.projected_oom_s, store=ev.store_fraction, verdict=pod_status(v)["verdict"])
        self.forget_pods(namespace, guard, {(v.name, v.group) for v in views})
        self.publish_groups(namespace, guard, views)

    def publish_groups(self, namespace: str, guard: str, views: Sequence[PodView]) -> None:
        """The per-group series; those of groups and revisions gone are removed."""
        seen: set[tuple[str, ...]] = set()
        etas: dict[str, float] = {}
        for v in views:
            eta = v.decision.evidence.projected_oom_s
            if eta is not None:
                etas[v.group] = min(eta, etas.get(v.group, eta))
        for group, eta in etas.items():
            self.group_projected_oom.labels(namespace, guard, group).set(eta)
            seen.add(("oom", group))
        for group, revs in templates(views).items():
            for template, row in revs.items():
                self.template_creep.labels(namespace, guard, group, template).set(row["creepBytesPerHour"])
                seen.add(("creep", group, template))
        for key in self._groups.get((namespace, guard), set()) - seen:
            metric = self.group_projected_oom if key[0] == "oom" else self.template_creep
            try:
                metric.remove(namespace, guard, *key[1:])
            except KeyError:
                pass
        self._groups[(namespace, guard)] = seen


def _versions() -> tuple[str, str, str]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    return version("memoryguard-kuberay-operator"), platform.python_version(), version("kopf")
