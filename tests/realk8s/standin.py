"""KubeRay and a kubelet, played through a real API server (issue 22: the
kit has no kubelet, no scheduler and no KubeRay).

As KubeRay: for each RayCluster, one head and ``replicas`` workers per
group, created from the group's template as it is now (so a patched
template reaches only new pods), with KubeRay's labels and a controller
ownerReference; only pods Running or Pending and not being deleted count,
so a Terminating pod is replaced at once.

As a kubelet: a Node of its own kept Ready; a new pod is bound
(``spec.nodeName``), given a loopback
address of this run's own block, its sidecar (a real ``memoryguard-kuberay
sidecar --replay``) started there, and reported Running and Ready through
``pods/status`` once that process answers. A pod with a
``deletionTimestamp`` has its process ended by PID, then is deleted with
grace 0 as the kubelet does when its containers have stopped. The chart's
pre-delete hook pod is run as the real command with its own
ServiceAccount's token, and its end reported as Succeeded or Failed.

NOT modelled: Ray itself (drains are off), probes, images, restarts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memoryguard_kuberay.devkit.emulator import kuberay, loopback

from ..procs import stop
from .controlplane import Client, ControlPlane

BIN = Path(sys.executable).parent
NODE = "realk8s-standin-node"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class StandIn:
    def __init__(self, cp: ControlPlane, namespace: str, workdir: Path, trace_for: Callable[[dict[str, Any]], Path],
                 *, speed: float, epoch: float, sidecar_port: int) -> None:
        self.cp, self.api, self.ns, self.workdir = cp, cp.admin(), namespace, workdir
        self.trace_for, self.speed, self.epoch, self.port = trace_for, speed, epoch, sidecar_port
        self.block = loopback.claim_block()
        self._ips = itertools.count(2)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> its sidecar (or hook) process
        self.traces: dict[str, Path] = {}  # pod name -> trace
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.hooks_run: list[tuple[str, int]] = []  # (pod, exit code)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.errors: list[str] = []

    # -- the loop ------------------------------------------------------------------
    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for p in self.procs.values():
            stop(p)

    def _loop(self) -> None:
        beat = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() - beat > 10:
                    self.heartbeat()
                    beat = time.monotonic()
                self.reconcile()
            except Exception as e:  # a test reads these; the loop goes on
                self.errors.append(repr(e))
            self._stop.wait(0.3)

    def heartbeat(self) -> None:
        """The Node the pods are bound to, Ready, renewed as a kubelet does:
        kube-controller-manager's pod GC deletes pods bound to a Node that
        does not exist (about 40 s after), and its node lifecycle controller
        taints a Node whose heartbeats stop (its pods evicted 300 s later)."""
        path = f"/api/v1/nodes/{NODE}"
        if self.api.get(path) is None:
            self.api.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
        self.api.merge(f"{path}/status", {"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in kubelet",
            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}})

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return list(self.api.ok("GET", f"/api/v1/namespaces/{namespace or self.ns}/pods")["items"])

    def reconcile(self) -> None:
        pods = self.pods()
        for p in pods:
            meta = p["metadata"]
            if meta.get("deletionTimestamp"):
                self._stop_pod(p)
            elif not (p.get("spec") or {}).get("nodeName") or (p.get("status") or {}).get("phase") == "Pending":
                self._start_pod(p)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") in ("Running", "Pending")]
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
                    self._create(rc, group, kind, template)

    # -- KubeRay's part --------------------------------------------------------------
    def _create(self, rc: dict[str, Any], group: str, kind: str, template: dict[str, Any]) -> None:
        pod = kuberay.pod_from_template(rc, group, kind, template, self.ns)
        pod["spec"]["nodeName"] = NODE
        self.api.ok("POST", f"/api/v1/namespaces/{self.ns}/pods", pod)
        self.created.append(pod["metadata"]["name"])

    # -- the kubelet's part ------------------------------------------------------------
    def _start_pod(self, pod: dict[str, Any]) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        if uid in self.procs:
            proc = self.procs[uid]
            if proc.poll() is None and self._ready(pod):
                self._status(pod, "Running", ready=True)
            return
        n = next(self._ips)
        ip = f"{self.block}.{n // 250}.{n % 250 + 2}"
        trace = self.trace_for(pod)
        self.traces[name] = trace
        log = open(self.workdir / f"sidecar-{name}.log", "wb")  # noqa: SIM115
        self.procs[uid] = subprocess.Popen(
            [str(BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{ip}:{self.port}", "--replay", str(trace),
             "--speed", str(self.speed), "--epoch", str(self.epoch), "--start", str(self._clock()),
             "--interval", "1", "--window", "21600", "--pod-uid", uid, "--pod-name", name],
            stdout=log, stderr=log)
        self._status(pod, "Pending", ready=False, ip=ip)

    def _ready(self, pod: dict[str, Any]) -> bool:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            return False
        if (pod.get("status") or {}).get("phase") == "Running":
            return False  # already reported
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://{ip}:{self.port}/healthz",
                                                                  timeout=1) as r:
            return bool(r.status == 200)
        return False

    def _status(self, pod: dict[str, Any], phase: str, *, ready: bool, ip: str | None = None) -> None:
        ip = ip or (pod.get("status") or {}).get("podIP")
        status: dict[str, Any] = {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
                                  "startTime": (pod.get("status") or {}).get("startTime") or _now(),
                                  "conditions": [{"type": t, "status": "True" if ready else "False",
                                                  "lastTransitionTime": _now()}
                                                 for t in ("Ready", "ContainersReady")]}
        self.api.merge(f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}/status", {"status": status})

    def _stop_pod(self, pod: dict[str, Any]) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        proc = self.procs.pop(uid, None)
        if proc is not None:
            stop(proc)
        # As the kubelet does once the containers have stopped.
        status, _, _ = self.api.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{name}",
                                     {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        if status in (200, 202):
            self.deleted.append(name)

    def _clock(self) -> float:
        return self.epoch + (time.time() - self.epoch) * self.speed

    # -- the chart's pre-delete hook -------------------------------------------------------
    def run_hook_pods(self, namespace: str, stop: threading.Event) -> None:
        """Run each pod of the hook Job as the real command, with a token of
        its ServiceAccount, until ``stop``."""
        seen: set[str] = set()
        while not stop.is_set():
            for p in self.pods(namespace):
                if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") != "uninstall-hook":
                    continue
                if p["metadata"]["uid"] in seen or p["metadata"].get("deletionTimestamp"):
                    continue
                seen.add(p["metadata"]["uid"])
                self._run_hook(p, namespace)
            stop.wait(0.3)

    def _run_hook(self, pod: dict[str, Any], namespace: str) -> None:
        name, sa = pod["metadata"]["name"], pod["spec"]["serviceAccountName"]
        api = Client(self.cp.server, self.api.token, self.cp.ca)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        # Scheduled, as a scheduler would: a Binding (a pod's nodeName cannot be patched).
        api.ok("POST", f"{path}/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                           "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
        kubeconfig = self.cp.service_account_kubeconfig(sa, namespace, self.workdir / f"hook-{name}.kubeconfig")
        args = pod["spec"]["containers"][0]["args"]
        api.merge(f"{path}/status", {"status": {"phase": "Running", "podIP": "127.0.0.1",
                                                "startTime": _now()}})
        out = subprocess.run([str(BIN / "memoryguard-kuberay"), *args], capture_output=True, text=True,
                             timeout=600, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
        (self.workdir / f"hook-{name}.log").write_text(out.stdout + out.stderr)
        self.hooks_run.append((name, out.returncode))
        phase = "Succeeded" if out.returncode == 0 else "Failed"
        api.merge(f"{path}/status", {"status": {"phase": phase, "containerStatuses": [{
            "name": "uninstall", "image": pod["spec"]["containers"][0]["image"], "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": {"exitCode": out.returncode, "reason": "Completed"
                                                        if phase == "Succeeded" else "Error",
                                                        "finishedAt": _now(), "startedAt": _now()}}}]}})

