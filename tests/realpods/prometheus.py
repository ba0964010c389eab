"""A real Prometheus (Debian's ``prometheus``, which CI installs for its
``promtool``) scraping the chart's operator as the chart tells it to, with
the chart's alert rules loaded (issue 58, 3).

The chart tells a Prometheus what to scrape with a ServiceMonitor, which the
Prometheus Operator turns into a scrape config of Kubernetes service
discovery. There is no Prometheus Operator here, and Debian's Prometheus
(2.42.0+ds) is built without Kubernetes service discovery (its config
parser answers "field kubernetes_sd_configs not found"), so ``Targets``
does that discovery for the one shape the chart renders (a label selector
on Services, an endpoint by port name, its interval and honorLabels) as the
Prometheus Operator's generated config would: the ready addresses of the
selected Services' EndpointSlices on the named port, labelled
``namespace``, ``service``, ``pod``, ``job`` (the Service's name) and
``endpoint``, written to a file Prometheus reads (file_sd) and rewritten
every few seconds. The rules are the PrometheusRule's ``spec.groups``, as
its operator loads them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from ..procs import free_port, http_get, stop
from ..realk8s.controlplane import Client


def absent() -> str | None:
    if shutil.which("prometheus") is None:
        return "no prometheus binary (Debian's prometheus package; .ci/run installs it): the alert is not checked"
    return None


def scrape_config(monitor: dict[str, Any], files: list[Path]) -> list[dict[str, Any]]:
    """The ServiceMonitor's endpoints as scrape configs, one a file of targets."""
    ns, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    return [{"job_name": f"serviceMonitor/{ns}/{name}/{i}", "honor_labels": bool(ep.get("honorLabels")),
             "scrape_interval": ep.get("interval", "30s"), "metrics_path": ep.get("path", "/metrics"),
             "file_sd_configs": [{"files": [str(files[i])], "refresh_interval": "5s"}]}
            for i, ep in enumerate(monitor["spec"]["endpoints"])]


class Targets:
    """The ServiceMonitor's targets, discovered from the API every 2 s into
    one file_sd file per endpoint, until stopped."""

    def __init__(self, api: Client, monitor: dict[str, Any], workdir: Path) -> None:
        self.api, self.monitor = api, monitor
        selector = monitor["spec"]["selector"]
        if set(selector) != {"matchLabels"}:
            raise ValueError(f"only matchLabels is turned here, not {sorted(selector)}")
        self.files = [workdir / f"targets-{i}.json" for i in range(len(monitor["spec"]["endpoints"]))]
        self.errors: list[str] = []
        self.refresh()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="prometheus-targets")
        self._thread.start()

    def refresh(self) -> None:
        ns = self.monitor["metadata"]["namespace"]
        sel = ",".join(f"{k}={v}" for k, v in sorted(self.monitor["spec"]["selector"]["matchLabels"].items()))
        services = self.api.ok("GET", f"/api/v1/namespaces/{ns}/services", params={"labelSelector": sel})["items"]
        for i, ep in enumerate(self.monitor["spec"]["endpoints"]):
            groups = []
            for svc in services:
                name = svc["metadata"]["name"]
                slices = self.api.ok("GET", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                                     params={"labelSelector": f"kubernetes.io/service-name={name}"})["items"]
                for sl in slices:
                    port = next((p["port"] for p in sl.get("ports") or [] if p.get("name") == ep["port"]), None)
                    for e in sl.get("endpoints") or [] if port else []:
                        if (e.get("conditions") or {}).get("ready") is False:
                            continue
                        groups += [{"targets": [f"{a}:{port}"], "labels": {
                            "namespace": ns, "service": name, "job": name, "endpoint": ep["port"],
                            "pod": (e.get("targetRef") or {}).get("name", "")}} for a in e.get("addresses") or []]
            tmp = self.files[i].with_suffix(".tmp")
            tmp.write_text(json.dumps(groups))
            os.replace(tmp, self.files[i])

    def _loop(self) -> None:
        while not self._stop.wait(2.0):
            try:
                self.refresh()
            except Exception as e:  # the test reads these; the loop goes on
                self.errors.append(repr(e))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Prometheus:
    """One Prometheus server on a loopback port of its own, stopped by PID."""

    def __init__(self, workdir: Path, scrape: list[dict[str, Any]], rules: dict[str, Any],
                 interval: str = "5s") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "rules.yaml").write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))
        (workdir / "prometheus.yaml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(workdir / "rules.yaml")], "scrape_configs": scrape}))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={workdir / 'prometheus.yaml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address={self.url[7:]}",
                 "--storage.tsdb.retention.time=1d"], stdout=out, stderr=subprocess.STDOUT)
        self.started = time.time()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http_get(f"{self.url}/-/ready")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"prometheus did not become ready:\n{self.log.read_text(errors='replace')[-3000:]}")

    def api(self, path: str, **params: str) -> Any:
        status, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=20)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {status} {body[:500]!r}")
        return doc["data"]

    def targets_up(self) -> list[dict[str, Any]]:
        return [t for t in self.api("targets")["activeTargets"] if t.get("health") == "up"]

    def firing(self, start: float, end: float, alertname: str | None = None) -> list[tuple[dict[str, str], float]]:
        """Each alert series seen firing between ``start`` and ``end``, with
        the first time it was (rule evaluation times, every 5 s)."""
        sel = 'alertstate="firing"' + (f',alertname="{alertname}"' if alertname else "")
        data = self.api("query_range", query=f"ALERTS{{{sel}}}", start=f"{start:.3f}", end=f"{end:.3f}", step="5")
        return [(r["metric"], float(r["values"][0][0])) for r in data["result"] if r["values"]]

    def stop(self) -> None:
        stop(self.proc, timeout=10)
