"""The operator as the chart runs it (its Deployment's args and
environment, fieldRefs resolved), made a local process with a token of the
chart's own ServiceAccount: used by the control plane tier and by the
real-pod tier (whose pods the operator polls on the host's loopback)."""

from __future__ import annotations

import os
from pathlib import Path

from ..procs import free_port
from .controlplane import ControlPlane
from .standin import BIN


def operator_command(cp: ControlPlane, kubeconfig: Path, *, namespace: str, deployment: str,
                     extra_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The Deployment's container, as the chart rendered it: its args and
    env, listening on loopback ports of this run's own."""
    dep = cp.admin().ok("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in c.get("env") or [] if "value" in e}
    env["POD_NAMESPACE"] = namespace
    # Out of the cluster no API server reaches the chart's webhook Service:
    # the operator patches templates, as one run outside does (tests that
    # serve the webhook give its port, address and certificate in extra_env).
    env.update({"MEMORYGUARD_METRICS_HOST": "127.0.0.1", "MEMORYGUARD_METRICS_PORT": str(free_port()),
                "MEMORYGUARD_ADMISSION_PORT": "0",
                "MEMORYGUARD_LIVENESS_ENDPOINT": f"http://127.0.0.1:{free_port()}/healthz", **extra_env})
    return [str(BIN / "memoryguard-kuberay"), *c["args"]], {**os.environ, **env, "KUBECONFIG": str(kubeconfig)}
