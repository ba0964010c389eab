"""An EMULATED KubeRay (and kubelet) for tests and the demo.

What it does, as KubeRay's reconcile and a kubelet would, on the emulated
API: for each RayCluster it keeps one head pod and ``replicas`` worker pods
per group, with KubeRay's labels (``ray.io/is-ray-node``, ``ray.io/cluster``,
``ray.io/node-type``, ``ray.io/group``, ``ray.io/identifier``); a pod's spec
is its group's template at creation (so an injected sidecar or remediation
env reaches only pods created after the patch, as with KubeRay); each pod
gets its own loopback IP, a node (``spec.nodeName``) and a real process
started by ``start_pod`` (a sidecar replaying a trace); it turns Running and
Ready when that process answers. As the released KubeRay's
``reconcilePods`` does (v1.5.1 and v1.7.0, seen on the real one: the
contract rows of tests/realk8s/test_kuberay.py run against both), every
listed pod of a group counts toward its ``replicas``, a Terminating one
included, so an evicted worker is replaced only once its pod object is
gone (then after ``replace_delay_s``; never, with None); a Failed pod is
deleted, then replaced. As a kubelet does, a pod marked for deletion
(``deletionTimestamp``) has its process ended by PID and is removed from
the API once the process has exited, or when its grace period is over.

Also as the released KubeRay: ``replicas`` held within [minReplicas,
maxReplicas] and times ``numOfHosts``; ``upgradeStrategy: Recreate``
deletes every pod of the cluster, head included, when the spec changes
other than in replicas, min/max or workersToDelete.

NOT modelled (the real KubeRay's rows only): Ray itself (no raylet, no
GCS: drains report "no GCS"), ``workersToDelete``, a multi-host replica's
other hosts deleted when one goes, RayService ownership, autoscaling and
its pod settings, the head service, init containers, restart policies,
and resource scheduling.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hashlib
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from memoryguard_kuberay.core import constants as C

from . import loopback
from .api import EmulatedApi
from .wire import now_iso


class PodProcess(Protocol):
    async def ready(self) -> bool: ...

    def stop(self) -> None: ...

    def exited(self) -> bool: ...


StartPod = Callable[[dict[str, Any]], Awaitable[PodProcess]]


def pod_from_template(rc: dict[str, Any], group: str, kind: str, template: dict[str, Any],
                      namespace: str) -> dict[str, Any]:
    """A pod as KubeRay makes it from a group's template: its name, KubeRay's
    labels, the template's annotations, a controller ownerReference to the
    RayCluster, the template's spec (a copy)."""
    cluster = rc["metadata"]["name"]
    suffix = uuid.uuid4().hex[:5]
    name = f"{cluster}-head-{suffix}" if kind == "head" else f"{cluster}-{group}-worker-{suffix}"
    tmeta = template.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace,
        "labels": {**(tmeta.get("labels") or {}), C.LABEL_IS_RAY_NODE: "yes", C.LABEL_CLUSTER: cluster,
                   C.LABEL_NODE_TYPE: kind, C.LABEL_GROUP: group, "ray.io/identifier": f"{cluster}-{kind}",
                   "app.kubernetes.io/created-by": "kuberay-operator"},
        "annotations": dict(tmeta.get("annotations") or {}),
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
                             "uid": rc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": copy.deepcopy(template.get("spec") or {})}


def desired_pods(group: dict[str, Any]) -> int:
    """A worker group's pods: ``replicas`` held within [minReplicas,
    maxReplicas], times ``numOfHosts``; 0 when suspended. Written here
    again on purpose, not imported from the operator's groups.py: the
    contract row replicas_clamped holds this emulation to the real KubeRay,
    which it could not do were both the operator's one reading."""
    lo = int(group.get("minReplicas") or 0)
    hi = int(group["maxReplicas"]) if group.get("maxReplicas") is not None else 2**31 - 1
    replicas = lo if group.get("replicas") is None else int(group["replicas"])
    replicas = hi if lo > hi else min(max(replicas, lo), hi)
    return 0 if group.get("suspend") is True else replicas * max(1, int(group.get("numOfHosts") or 1))


def recreate_hash(spec: dict[str, Any]) -> str:
    """KubeRay's Recreate hash: the whole spec but each group's replicas,
    minReplicas, maxReplicas and workersToDelete."""
    s = copy.deepcopy(spec)
    for g in s.get("workerGroupSpecs") or []:
        for k in ("replicas", "minReplicas", "maxReplicas"):
            g.pop(k, None)
        (g.get("scaleStrategy") or {}).pop("workersToDelete", None)
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass
class KubeRayStandIn:
    api: EmulatedApi
    start_pod: StartPod
    namespace: str = "default"
    replace_delay_s: float | None = 0.2
    # pods get <prefix>.x.y: a block no other run on this machine uses
    ip_prefix: str = dataclasses.field(default_factory=loopback.claim_block)
    next_ip: itertools.count = dataclasses.field(default_factory=lambda: itertools.count(2))  # type: ignore[type-arg]
    procs: dict[str, PodProcess] = dataclasses.field(default_factory=dict)  # pod uid -> process
    created: list[str] = dataclasses.field(default_factory=list)  # pod names, in creation order
    seen_groups: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    terminating: set[str] = dataclasses.field(default_factory=set)  # pod uids the kubelet is stopping
    node_name: str = "emulated-node-1"
    spec_hashes: dict[str, str] = dataclasses.field(default_factory=dict)  # RayCluster uid -> its Recreate hash
    recreated: list[str] = dataclasses.field(default_factory=list)  # RayClusters recreated whole, in order

    def ip(self) -> str:
        """A distinct loopback address per pod: 127.X.0.2, 127.X.0.3, ..."""
        n = next(self.next_ip)
        return f"{self.ip_prefix}.{n // 250}.{n % 250 + 2}"

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                self.api.changed.clear()
                self.reconcile()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.api.changed.wait(), 0.5)
        finally:
            for t in self.tasks:
                t.cancel()
            for p in self.procs.values():
                p.stop()
            self.procs.clear()

    def reconcile(self) -> None:
        pods = self.api.objects("pods", self.namespace)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in list(self.procs):
            if uid not in live:
                self.procs.pop(uid).stop()  # the pod is gone: its containers end
        for p in pods:
            if p["metadata"].get("deletionTimestamp") and p["metadata"]["uid"] not in self.terminating:
                self.terminating.add(p["metadata"]["uid"])
                self._spawn(self._terminate(p))
        for p in pods:
            if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded") \
                    and not p["metadata"].get("deletionTimestamp"):
                # KubeRay deletes a pod that ended; its containers are gone, so
                # the kubelet removes it at once. Replaced on a later pass.
                self.api.remove("pods", self.namespace, p["metadata"]["name"])
        pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")]
        for rc in self.api.objects("rayclusters", self.namespace):
            name = rc["metadata"]["name"]
            mine = [p for p in pods if p["metadata"].get("labels", {}).get(C.LABEL_CLUSTER) == name]
            spec = rc.get("spec") or {}
            if self._recreating(rc, mine):
                continue
            wanted = [("headgroup", "head", 1, (spec.get("headGroupSpec") or {}).get("template") or {})]
            for g in spec.get("workerGroupSpecs") or []:
                wanted.append((g.get("groupName"), "worker", desired_pods(g), g.get("template") or {}))
            for group, kind, replicas, template in wanted:
                have = [p for p in mine if p["metadata"]["labels"].get(C.LABEL_GROUP) == group]
                missing = replicas - len(have)
                first_time = (name, group) not in self.seen_groups
                if missing > 0 and (first_time or self.replace_delay_s is not None):
                    delay = 0.0 if first_time else (self.replace_delay_s or 0.0)
                    for _ in range(missing):
                        self._spawn(self._create(rc, group, kind, template, delay))
                        self.seen_groups.add((name, group))

    def _recreating(self, rc: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """``upgradeStrategy: Recreate``: a spec that changed other than in
        replicas, min/max or workersToDelete has every pod of the cluster,
        the head included, deleted (then made afresh from the new spec)."""
        spec = rc.get("spec") or {}
        if ((spec.get("upgradeStrategy") or {}).get("type")) != "Recreate":
            return False
        uid, now = rc["metadata"]["uid"], recreate_hash(spec)
        before = self.spec_hashes.setdefault(uid, now)
        if before == now:
            return False
        self.spec_hashes[uid] = now
        for p in pods:
            self.api.delete_gracefully("pods", self.namespace, p["metadata"]["name"])
        self.recreated.append(rc["metadata"]["name"])
        return True

    async def _terminate(self, pod: dict[str, Any]) -> None:
        """The kubelet's part: stop the containers, then remove the pod."""
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 30)
        proc = self.procs.pop(uid, None)
        if proc is not None:
            proc.stop()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace
            while not proc.exited() and loop.time() < deadline:
                await asyncio.sleep(0.05)
        current = self.api.get("pods", self.namespace, name)
        if current is not None and current["metadata"]["uid"] == uid:
            self.api.remove("pods", self.namespace, name)
        self.terminating.discard(uid)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _create(self, rc: dict[str, Any], group: str, kind: str, template: dict[str, Any],
                delay: float) -> Awaitable[None]:
        # Create the pod object now (so the count is right on the next reconcile),
        # start its process after the delay KubeRay and the kubelet would take.
        pod = {**pod_from_template(rc, group, kind, template, self.namespace),
               "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}
        pod_name = pod["metadata"]["name"]
        created = self.api.put("pods", pod)
        self.created.append(pod_name)
        return self._start(created, delay)

    async def _start(self, pod: dict[str, Any], delay: float) -> None:
        await asyncio.sleep(delay)
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        current = self.api.get("pods", self.namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            return
        ip = self.ip()
        current.setdefault("spec", {})["nodeName"] = self.node_name  # scheduled: now it is bound
        current["status"] = {"phase": "Pending", "podIP": ip, "conditions": [{"type": "Ready", "status": "False"}]}
        self.api.put("pods", current)
        proc = await self.start_pod(self.api.get("pods", self.namespace, name) or current)
        self.procs[uid] = proc
        ok = await proc.ready()
        current = self.api.get("pods", self.namespace, name)
        if current is None or current["metadata"]["uid"] != uid or current["metadata"].get("deletionTimestamp"):
            return  # deleted while starting: the kubelet part (_terminate) stops it
        current["status"] = {"phase": "Running" if ok else "Failed", "podIP": ip, "startTime": now_iso(),
                             "conditions": [{"type": "Ready", "status": "True" if ok else "False"}]}
        self.api.put("pods", current)
