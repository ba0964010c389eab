"""A real kube-apiserver, kube-controller-manager and etcd (v1.36.2, from
``../shared/realk8s`` beside the checkout, never copied in) for this test
run alone: its own state directory, its own free ports, an audit log; and
a small client that speaks to it as the operator would, with a token.

``up.sh``/``down.sh`` are the kit's; this module only chooses where and on
which ports, and stops exactly what it started (down.sh, by saved PIDs).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..devworld import ROOT
from ..procs import free_port

KIT = ROOT.parent / "shared" / "realk8s"
ABSENT = (f"{KIT} is absent: the real control plane tier (issue 22) runs only where the kit is beside the "
          "checkout (its binaries are never copied into the project)")
# Every request at Metadata level: who asked what, and the answer's code.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}


def k8s_tools() -> Path:
    """helm 4 and kubectl 1.35 (from the PyPI wheel, .ci/k8s-tools)."""
    out = subprocess.run([str(ROOT / ".ci" / "k8s-tools")], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "VENV": str(Path(os.sys.executable).parents[1])})  # type: ignore[attr-defined]
    if out.returncode != 0:
        raise RuntimeError(f".ci/k8s-tools failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip())


class ApiError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {json.dumps(body)[:600]}")
        self.status, self.body = status, body


@dataclasses.dataclass
class Client:
    """HTTPS with a bearer token: the admin's, or a ServiceAccount's."""

    server: str
    token: str
    ca: Path | None  # None: plain HTTP (the emulator)

    def __post_init__(self) -> None:
        self._ctx = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None

    def call(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
             ctype: str = "application/json", timeout: float = 30) -> tuple[int, Any, dict[str, str]]:
        url = self.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": ctype, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ctx) as r:
                raw, status, headers = r.read(), r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            raw, status, headers = e.read(), e.code, dict(e.headers)
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = raw.decode(errors="replace")
        return status, doc, headers

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, doc, _ = self.call(method, path, body, **kw)
        if status >= 300:
            raise ApiError(status, doc)
        return doc

    def get(self, path: str) -> Any:
        status, doc, _ = self.call("GET", path)
        if status == 404:
            return None
        if status >= 300:
            raise ApiError(status, doc)
        return doc

    def merge(self, path: str, patch: Any) -> Any:
        return self.ok("PATCH", path, patch, ctype="application/merge-patch+json")


@dataclasses.dataclass
class ControlPlane:
    home: Path
    env: dict[str, str]
    server: str
    kubeconfig: Path
    audit_log: Path
    tools: Path

    @property
    def ca(self) -> Path:
        return self.home / "run" / "pki" / "ca.crt"

    def admin(self) -> Client:
        return Client(self.server, (self.home / "run" / "pki" / "admin.token").read_text().strip(), self.ca)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([str(self.tools / "kubectl"), *args], capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig)})
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {out.stdout[-2000:]}{out.stderr[-3000:]}")
        return out

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([str(self.tools / "helm"), *args], capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "KUBECONFIG": str(self.kubeconfig),
                                  "HELM_CACHE_HOME": str(self.home / "helm-cache"),
                                  "HELM_CONFIG_HOME": str(self.home / "helm-config"),
                                  "HELM_DATA_HOME": str(self.home / "helm-data")})
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {out.stdout[-2000:]}{out.stderr[-3000:]}")
        return out

    def service_account_kubeconfig(self, name: str, namespace: str, out: Path) -> Path:
        """A kubeconfig holding a token of the ServiceAccount (``kubectl
        create token``), never the admin's."""
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration", "2h").stdout.strip()
        ca = base64.b64encode(self.ca.read_bytes()).decode()
        out.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "real", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "real", "user": name, "namespace": namespace}}]}))
        out.chmod(0o600)
        return out

    def wait_established(self, crd: str, timeout: float = 60) -> None:
        """(``kubectl wait`` fails when asked before the CRD has any status.)"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.admin().get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}") or {}
            if any(c["type"] == "Established" and c["status"] == "True"
                   for c in (doc.get("status") or {}).get("conditions") or []):
                return
            time.sleep(0.2)
        raise AssertionError(f"CRD {crd} not Established after {timeout} s")

    def token_client(self, kubeconfig: Path) -> Client:
        doc = yaml.safe_load(kubeconfig.read_text())
        return Client(self.server, doc["users"][0]["user"]["token"], self.ca)

    def audit(self) -> Iterator[dict[str, Any]]:
        """Every completed request the audit log holds."""
        if not self.audit_log.exists():
            return
        for line in self.audit_log.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("stage") == "ResponseComplete":
                yield e

    def down(self) -> None:
        subprocess.run(["bash", str(KIT / "down.sh")], env=self.env, capture_output=True, timeout=120)


def start(home: Path, tools: Path) -> ControlPlane:
    """Up in ~10 s on ports no other run holds (each chosen free just before)."""
    home.mkdir(parents=True, exist_ok=True)
    policy = home / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = home / "audit.log"
    ports = {k: str(free_port()) for k in ("ETCD_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "KCM_PORT")}
    env = {**os.environ, "K8S_HOME": str(home), **ports, "UP_TIMEOUT": "120",
           "APISERVER_EXTRA_ARGS": f"--audit-policy-file={policy} --audit-log-path={audit_log} "
                                   "--audit-log-maxsize=200"}
    t0 = time.monotonic()
    out = subprocess.run(["bash", str(KIT / "up.sh"), "--fresh"], env=env, capture_output=True, text=True,
                         timeout=300)
    cp = ControlPlane(home=home, env=env, server=f"https://127.0.0.1:{ports['APISERVER_PORT']}",
                      kubeconfig=home / "kubeconfig", audit_log=audit_log, tools=tools)
    if out.returncode != 0:
        cp.down()
        raise RuntimeError(f"up.sh failed ({out.returncode}): {out.stdout[-3000:]}{out.stderr[-3000:]}")
    cp.env["MG_UP_SECONDS"] = f"{time.monotonic() - t0:.1f}"
    return cp


def kit_present() -> bool:
    return (KIT / "up.sh").exists() and shutil.which("openssl") is not None and shutil.which("curl") is not None
