"""What the real-pod tier saw of its pods: every pod's latest object,
every status it went through and every value of its pressure annotation
(what the ladder asked of it), recorded by a thread that lists them twice a
second (the real KubeRay makes, replaces and deletes them; the real
kubelet runs them). The tests read it, and it is written out beside the
operator's log for the closing note.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from memoryguard_kuberay.core.constants import ANN_PRESSURE

from ..realk8s.controlplane import ControlPlane


class PodRecorder:
    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.api, self.ns = cp.admin(), namespace
        self.seen: dict[str, dict[str, Any]] = {}  # pod name -> the latest object
        self.history: dict[str, list[tuple[float, dict[str, Any]]]] = {}  # pod name -> (time, status) on change
        self.pressure: dict[str, list[tuple[float, str]]] = {}  # pod name -> (time, annotation) on change
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pod-recorder")

    def __enter__(self) -> PodRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.record()
            except Exception as e:  # a test reads these; the loop goes on
                self.errors.append(repr(e))
            self._stop.wait(0.5)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.api.ok("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"])

    def record(self) -> None:
        now = time.time()
        for p in self.pods():
            name = p["metadata"]["name"]
            self.seen[name] = p
            status = copy.deepcopy(p.get("status") or {})
            history = self.history.setdefault(name, [])
            if not history or _essence(history[-1][1]) != _essence(status):
                history.append((now, status))
            asked = (p["metadata"].get("annotations") or {}).get(ANN_PRESSURE)
            said = self.pressure.setdefault(name, [])
            if asked is not None and (not said or said[-1][1] != asked):
                said.append((now, asked))


def _essence(status: dict[str, Any]) -> Any:
    """What of a status is worth a line in the history: phase, conditions, containers' states (the
    native sidecar's among the init containers')."""
    return (status.get("phase"), [(c.get("type"), c.get("status")) for c in status.get("conditions") or []],
            [(c.get("name"), c.get("ready"), c.get("restartCount"), sorted((c.get("state") or {}).keys()),
              ((c.get("state") or {}).get("terminated") or {}).get("reason"))
             for c in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]])
