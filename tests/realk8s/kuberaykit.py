"""A real KubeRay operator and kube-scheduler (``../shared/realk8s/kuberay-up.sh``,
never copied in) on the tier's control plane, and a kubelet played through
the real API for the pods the scheduler binds to a stand-in Node.

KubeRay watches only the namespaces it is given (``--watch-namespace``), so
a test's KubeRay never meets another test's RayClusters. Each start has its
own run directory (PID files, logs) and free ports; ``stop`` runs
``kuberay-down.sh``, which ends exactly the two processes it started.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from memoryguard_kuberay.devkit.emulator import loopback

from ..procs import free_port
from .controlplane import KIT, Client, ControlPlane

VERSIONS = ("v1.7.0", "v1.5.1")
CRDS = KIT.parent / "kuberay" / "crds"


def present(version: str) -> str | None:
    """Why this version cannot run here, or None."""
    if not (KIT / "kuberay-up.sh").exists():
        return f"{KIT}/kuberay-up.sh is absent: the real KubeRay rows run only where the kit is beside the checkout"
    if not (KIT / "bin" / f"ray-operator-{version}.xz").exists():
        return f"{KIT}/bin/ray-operator-{version}.xz is absent"
    if not (CRDS / version).is_dir():
        return f"{CRDS / version} is absent: KubeRay's CRDs are read from beside the checkout"
    return None


class KubeRay:
    """One real KubeRay (and scheduler) watching ``namespaces``."""

    def __init__(self, cp: ControlPlane, version: str, namespaces: Sequence[str], run: Path,
                 env: dict[str, str] | None = None) -> None:
        """``env``: KubeRay's own operator settings (its environment, as its
        chart's ``env`` sets them), e.g. ``ENABLE_INIT_CONTAINER_INJECTION``."""
        self.cp, self.version, self.run = cp, version, run
        run.mkdir(parents=True, exist_ok=True)
        self.env = {**cp.env, "K8S_RUN": str(run), "KUBECTL": str(cp.tools / "kubectl"),
                    "KUBECONFIG_OUT": str(cp.kubeconfig), "K8S_BIN": str(cp.home / "bin"),
                    "KUBERAY_VERSION": version, "SCHED_PORT": str(free_port()),
                    "KUBERAY_METRICS_PORT": str(free_port()), "KUBERAY_PROBE_PORT": str(free_port()),
                    "KUBERAY_EXTRA_ARGS": f"--watch-namespace={','.join(namespaces)}", "UP_TIMEOUT": "120",
                    **(env or {})}
        t0 = time.monotonic()
        out = subprocess.run(["bash", str(KIT / "kuberay-up.sh")], env=self.env, capture_output=True, text=True,
                             timeout=300)
        self.up_s = time.monotonic() - t0
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"kuberay-up.sh {version} failed ({out.returncode}): {out.stdout[-2000:]}"
                               f"{out.stderr[-2000:]}")

    def stop(self) -> None:
        subprocess.run(["bash", str(KIT / "kuberay-down.sh")], env=self.env, capture_output=True, timeout=120)

    def log(self) -> str:
        path = self.run / "logs" / "ray-operator.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Kubelet:
    """The kubelet's part for pods bound to one stand-in Node: a Node kept
    Ready with room for every test pod; a pod bound there reported Running
    and Ready on a loopback address of this run's own block (``start`` may
    start a process for it first); a Terminating pod deleted once its
    containers would have stopped: after its grace period (Ray's ``ray start
    --block`` waits it out), or ``hold_s`` when given (a test of what
    happens meanwhile need not wait 30 s)."""

    def __init__(self, api: Client, namespace: str, node: str, *, hold_s: float | None = None,
                 start: Callable[[dict[str, Any], str], bool] | None = None,
                 stopped: Callable[[dict[str, Any]], None] | None = None,
                 sweep: Sequence[str] = ()) -> None:
        self.api, self.ns, self.node, self.hold_s = api, namespace, node, hold_s
        # Namespaces whose pods bound here are not run (a test runs them its
        # own way), only removed once deleted, as a kubelet would.
        self.sweep = tuple(sweep)
        self.start, self.stopped = start, stopped
        self.block = loopback.claim_block()
        self._ips = itertools.count(2)
        self.ips: dict[str, str] = {}  # pod uid -> its address
        self.terminating_since: dict[str, float] = {}
        self.deleted: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"kubelet-{node}")

    def __enter__(self) -> Kubelet:
        self.heartbeat()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        with contextlib.suppress(Exception):
            self.api.call("DELETE", f"/api/v1/nodes/{self.node}")

    def _loop(self) -> None:
        beat = time.monotonic()
        while not self._stop.is_set():
            try:
                if time.monotonic() - beat > 10:
                    self.heartbeat()
                    beat = time.monotonic()
                self.tick()
            except Exception as e:  # a test reads these; the loop goes on
                self.errors.append(repr(e))
            self._stop.wait(0.2)

    def heartbeat(self) -> None:
        """A Ready Node with room (the scheduler binds nothing to a Node of no
        capacity), renewed as a kubelet does (pod GC deletes pods of a Node
        that is gone; the node lifecycle controller taints a silent one)."""
        path = f"/api/v1/nodes/{self.node}"
        if self.api.get(path) is None:
            self.api.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.node, "labels": {"kubernetes.io/hostname": self.node}}})
        room = {"cpu": "256", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "1Ti"}
        self.api.merge(f"{path}/status", {"status": {"capacity": room, "allocatable": room, "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in kubelet",
            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}})

    def pods(self) -> list[dict[str, Any]]:
        return list(self.api.ok("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"])

    def tick(self) -> None:
        for ns in self.sweep:
            for p in self.api.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
                meta = p["metadata"]
                if meta.get("deletionTimestamp") and (p.get("spec") or {}).get("nodeName") == self.node:
                    self.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{meta['name']}",
                                  {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        for p in self.pods():
            meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
            if spec.get("nodeName") != self.node:
                continue
            uid = meta["uid"]
            if meta.get("deletionTimestamp"):
                since = self.terminating_since.setdefault(uid, time.monotonic())
                wait = self.hold_s if self.hold_s is not None else float(meta.get("deletionGracePeriodSeconds") or 0)
                if time.monotonic() - since >= wait:
                    if self.stopped is not None:
                        self.stopped(p)
                    code, _, _ = self.api.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{meta['name']}",
                                               {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
                    if code in (200, 202):
                        self.deleted.append(meta["name"])
                continue
            if status.get("phase") in ("Running", "Failed", "Succeeded") and self._ready(status):
                continue
            if uid not in self.ips:
                n = next(self._ips)
                self.ips[uid] = f"{self.block}.{n // 250}.{n % 250 + 2}"
            ready = self.start(p, self.ips[uid]) if self.start is not None else True
            if ready or status.get("podIP") != self.ips[uid]:
                self.report(p, "Running" if ready else "Pending", ready=ready)

    @staticmethod
    def _ready(status: dict[str, Any]) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])

    def report(self, pod: dict[str, Any], phase: str, *, ready: bool) -> None:
        ip = self.ips.get(pod["metadata"]["uid"]) or (pod.get("status") or {}).get("podIP")
        status: dict[str, Any] = {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
                                  "startTime": (pod.get("status") or {}).get("startTime") or _now(),
                                  "conditions": [{"type": t, "status": "True" if ready else "False",
                                                  "lastTransitionTime": _now()}
                                                 for t in ("Ready", "ContainersReady")]}
        self.api.merge(f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}/status", {"status": status})

    def fail(self, name: str) -> None:
        """The pod's containers ended in error (phase Failed), as a kubelet reports it."""
        self.api.merge(f"/api/v1/namespaces/{self.ns}/pods/{name}/status", {"status": {
            "phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _now()}]}})


@contextlib.contextmanager
def running(cp: ControlPlane, version: str, namespaces: Sequence[str], run: Path) -> Iterator[KubeRay]:
    kr = KubeRay(cp, version, namespaces, run)
    try:
        yield kr
    finally:
        kr.stop()


def install_crds(cp: ControlPlane, version: str) -> None:
    """KubeRay's CRDs of ``version`` (kuberay-up.sh applies them too; done
    here for tests that need the kinds before KubeRay runs)."""
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS / version))
    for crd in os.listdir(CRDS / version):
        if crd.endswith(".yaml"):
            cp.wait_established(crd.removesuffix(".yaml").split("_", 1)[1] + "." + crd.split("_", 1)[0])
