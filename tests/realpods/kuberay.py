"""KubeRay's part for the real-pod tier (issue 28), through the real API:
for each RayCluster, one head and ``replicas`` workers per group, made from
the group's template as it is now (``pod_from_template``, the emulator's
and the control plane tier's same function), bound to the kit's one node.
The kubelet does the rest for real: it runs the pods, probes them, reports
their status, stops them gracefully on eviction, OOM-kills them.

As the released KubeRay's ``reconcilePods`` (tests/test_kuberay_contract.py
holds the real one to it): every listed pod counts toward ``replicas``, a
Terminating one too, so an evicted worker is replaced once it is gone; a
pod that ended (Failed) is deleted, then replaced.
And as the scheduler (the kit has none): a pod is bound to the node only
when no pod there that has not ended holds one of its host ports (with
``hostNetwork`` every containerPort is one), as its NodePorts filter does.
Bound at once instead, the kubelet rejects it ("Predicate NodePorts
failed": phase Failed), it no longer counts, and a KubeRay that makes
another at once made 50 in the 30 s of its predecessor's grace period
(seen: docs/facts.md).
Unlike KubeRay, the Ray container's command is the template's own (KubeRay
writes ``ray start`` from ``rayStartParams``): the templates of the tier say
``ray start`` themselves. Nothing else of KubeRay is played (no head
Service, no autoscaler, no suspend).

Every pod seen is recorded (``seen``: its spec as the kubelet ran it, every
status it went through), for the tests to read and the closing note.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from memoryguard_kuberay.devkit.emulator import kuberay

from ..realk8s.controlplane import ControlPlane

NODE = "127.0.0.1"  # the kit's one node


class KubeRay:
    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.api, self.ns = cp.admin(), namespace
        self.created: list[str] = []
        self.seen: dict[str, dict[str, Any]] = {}  # pod name -> the latest object
        self.history: dict[str, list[tuple[float, dict[str, Any]]]] = {}  # pod name -> (time, status) on change
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="kuberay-standin")

    def __enter__(self) -> KubeRay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as e:  # a test reads these; the loop goes on
                self.errors.append(repr(e))
            self._stop.wait(0.5)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.api.ok("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"])

    def reconcile(self) -> None:
        pods = self.pods()
        now = time.time()
        for p in pods:
            name = p["metadata"]["name"]
            self.seen[name] = p
            status = copy.deepcopy(p.get("status") or {})
            history = self.history.setdefault(name, [])
            if not history or _essence(history[-1][1]) != _essence(status):
                history.append((now, status))
        for p in pods:  # as KubeRay: a pod that ended is deleted, then replaced once gone
            if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded") \
                    and not p["metadata"].get("deletionTimestamp"):
                self.api.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{p['metadata']['name']}")
        # Every listed pod counts, a Terminating one too (the released KubeRay's
        # rule, seen on v1.5.1 and v1.7.0: tests/test_kuberay_contract.py).
        live = [p for p in pods if (p.get("status") or {}).get("phase", "Pending") not in ("Failed", "Succeeded")]
        for rc in self.api.ok("GET", f"/apis/ray.io/v1/namespaces/{self.ns}/rayclusters")["items"]:
            name, spec = rc["metadata"]["name"], rc.get("spec") or {}
            if rc["metadata"].get("deletionTimestamp"):
                continue
            wanted = [("headgroup", "head", 1, (spec.get("headGroupSpec") or {}).get("template") or {})]
            wanted += [(g["groupName"], "worker", int(g.get("replicas", 1)), g.get("template") or {})
                       for g in spec.get("workerGroupSpecs") or []]
            for group, kind, replicas, template in wanted:
                have = [p for p in live if p["metadata"].get("labels", {}).get("ray.io/cluster") == name
                        and p["metadata"]["labels"].get("ray.io/group") == group]
                for _ in range(replicas - len(have)):
                    pod = kuberay.pod_from_template(rc, group, kind, template, self.ns)
                    self.api.ok("POST", f"/api/v1/namespaces/{self.ns}/pods", pod)
                    self.created.append(pod["metadata"]["name"])
        self.schedule(self.pods())

    def schedule(self, pods: list[dict[str, Any]]) -> None:
        """Bind each unbound pod whose host ports are free on the node."""
        held = {port for p in pods if (p.get("spec") or {}).get("nodeName")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for port in _host_ports(p)}
        for p in pods:
            if (p.get("spec") or {}).get("nodeName") or p["metadata"].get("deletionTimestamp"):
                continue
            ports = _host_ports(p)
            if ports & held:
                continue  # Pending, unschedulable for now, as with a scheduler
            name = p["metadata"]["name"]
            self.api.ok("POST", f"/api/v1/namespaces/{self.ns}/pods/{name}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
            held |= ports


def _host_ports(pod: dict[str, Any]) -> set[int]:
    spec = pod.get("spec") or {}
    return {int(port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else 0) or 0)
            for c in spec.get("containers") or [] for port in c.get("ports") or []} - {0}


def _essence(status: dict[str, Any]) -> Any:
    """What of a status is worth a line in the history: phase, conditions, containers' states."""
    return (status.get("phase"), [(c.get("type"), c.get("status")) for c in status.get("conditions") or []],
            [(c.get("name"), c.get("ready"), c.get("restartCount"), sorted((c.get("state") or {}).keys()),
              ((c.get("state") or {}).get("terminated") or {}).get("reason"))
             for c in status.get("containerStatuses") or []])
