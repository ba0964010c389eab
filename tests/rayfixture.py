"""A real Ray head on loopback for tests (``ray start --head --block`` in its
own process group, ended by that group's id at teardown), and a second node
for the drain tests. See FACTS.md for the flags that keep Ray on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from memoryguard_kuberay.devkit.processes import end_group

from .procs import VENV_BIN, free_port, http_get, wait_until

# A single node stays on 127.0.0.1 with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0.
# A second node needs it at 1, and then Ray rewrites "127.0.0.1" (and only
# the names it knows for localhost) to the machine's own interface address, so
# a two-node cluster uses other loopback addresses: head 127.0.0.3, worker
# 127.0.0.2 (seen with ray 2.60).
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
MULTI_NODE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass
class RayNode:
    gcs_address: str
    metrics_port: int
    proc: subprocess.Popen  # type: ignore[type-arg]
    ip: str = "127.0.0.1"


def _start(args: list[str], metrics_port: int, ip: str = "127.0.0.1",
           extra_env: dict[str, str] | None = None) -> subprocess.Popen:  # type: ignore[type-arg]
    env = {**(RAY_ENV if ip == "127.0.0.1" else MULTI_NODE_ENV), **(extra_env or {})}
    cmd = [str(VENV_BIN / "ray"), "start", "--block", f"--node-ip-address={ip}", "--num-cpus=1",
           "--object-store-memory=300000000", f"--metrics-export-port={metrics_port}", "--disable-usage-stats",
           *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **env})


@contextlib.contextmanager
def ray_head(ip: str = "127.0.0.1", env: dict[str, str] | None = None,
             args: list[str] | None = None) -> Iterator[RayNode]:
    """``ip``: 127.0.0.1 for a single node, 127.0.0.3 when a second will join.
    ``env``: more environment for Ray (its workers inherit the raylet's).
    ``args``: more ``ray start`` flags."""
    if not (VENV_BIN / "ray").exists():
        pytest.skip("ray is not installed")
    gcs_port = free_port(ip)
    metrics_port = free_port(ip)
    proc = _start(["--head", f"--port={gcs_port}", "--include-dashboard=false", *(args or [])], metrics_port, ip, env)
    node = RayNode(f"{ip}:{gcs_port}", metrics_port, proc, ip)
    try:
        wait_until(lambda: http_get(f"http://{ip}:{metrics_port}/metrics", 2)[0] == 200, 60,
                   what="the Ray head's metrics endpoint")
        yield node
    finally:
        end_group(proc)


@contextlib.contextmanager
def ray_worker_node(head: RayNode, ip: str = "127.0.0.2") -> Iterator[RayNode]:
    metrics_port = free_port(ip)
    proc = _start([f"--address={head.gcs_address}"], metrics_port, ip)
    try:
        yield RayNode(head.gcs_address, metrics_port, proc, ip)
    finally:
        end_group(proc)
