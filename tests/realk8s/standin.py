"""The kubelet, played through a real API server for the pods a real
KubeRay makes (tests/realk8s/kuberaykit.py: KubeRay creates, replaces and
deletes the pods; the real scheduler binds them to this Node).

As a kubelet: a Node of its own kept Ready; a pod bound there is given a
loopback address of this run's own block, its sidecar (a real
``memoryguard-kuberay sidecar --replay``) started there, and reported
Running and Ready through ``pods/status`` once that process answers. A pod
with a ``deletionTimestamp`` is deleted once its grace period is over (Ray's
``ray start --block`` waits it out; KubeRay's pods have 30 s), its process
ended by PID. The chart's pre-delete hook pod is run as the real command
with its own ServiceAccount's token, and its end reported as Succeeded or
Failed.

NOT modelled: Ray itself (drains are off), probes, images, restarts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..procs import stop
from .controlplane import Client, ControlPlane
from .kuberaykit import Kubelet

BIN = Path(sys.executable).parent
NODE = "realk8s-standin-node"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class StandIn:
    def __init__(self, cp: ControlPlane, namespace: str, workdir: Path, trace_for: Callable[[dict[str, Any]], Path],
                 *, speed: float, epoch: float, sidecar_port: int, sweep: tuple[str, ...] = ()) -> None:
        self.cp, self.api, self.ns, self.workdir = cp, cp.admin(), namespace, workdir
        self.trace_for, self.speed, self.epoch, self.port = trace_for, speed, epoch, sidecar_port
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> its sidecar process
        self.traces: dict[str, Path] = {}  # pod name -> trace
        self.hooks_run: list[tuple[str, int]] = []  # (pod, exit code)
        self.kubelet = Kubelet(self.api, namespace, NODE, start=self._start_pod, stopped=self._stop_pod, sweep=sweep)

    def __enter__(self) -> StandIn:
        self.kubelet.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kubelet.__exit__(*exc)
        for p in self.procs.values():
            stop(p)

    @property
    def errors(self) -> list[str]:
        return self.kubelet.errors

    @property
    def deleted(self) -> list[str]:
        return self.kubelet.deleted

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return list(self.api.ok("GET", f"/api/v1/namespaces/{namespace or self.ns}/pods")["items"])

    def _start_pod(self, pod: dict[str, Any], ip: str) -> bool:
        """Its sidecar started (once); True once it answers."""
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        if uid not in self.procs:
            trace = self.trace_for(pod)
            self.traces[name] = trace
            log = open(self.workdir / f"sidecar-{name}.log", "wb")  # noqa: SIM115
            self.procs[uid] = subprocess.Popen(
                [str(BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{ip}:{self.port}", "--replay",
                 str(trace), "--speed", str(self.speed), "--epoch", str(self.epoch), "--start", str(self._clock()),
                 "--interval", "1", "--window", "21600", "--pod-uid", uid, "--pod-name", name],
                stdout=log, stderr=log)
        if self.procs[uid].poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{ip}:{self.port}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _stop_pod(self, pod: dict[str, Any]) -> None:
        proc = self.procs.pop(pod["metadata"]["uid"], None)
        if proc is not None:
            stop(proc)

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
        # Scheduled (a Binding), unless the real scheduler has bound it already (409).
        api.call("POST", f"{path}/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
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

