"""A real Ray head on loopback for tests (``ray start --head --block`` in its
own process group, ended by that group's id at teardown), and a second node
for the drain tests. See FACTS.md for the flags that keep Ray on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .procs import VENV_BIN, free_port, http_get, wait_until

RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass
class RayNode:
    gcs_address: str
    metrics_port: int
    proc: subprocess.Popen  # type: ignore[type-arg]


def _start(args: list[str], metrics_port: int) -> subprocess.Popen:  # type: ignore[type-arg]
    cmd = [str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
           "--object-store-memory=300000000", f"--metrics-export-port={metrics_port}", "--disable-usage-stats",
           *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **RAY_ENV})


def _end(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def ray_head() -> Iterator[RayNode]:
    if not (VENV_BIN / "ray").exists():
        pytest.skip("ray is not installed")
    gcs_port = free_port()
    metrics_port = free_port()
    proc = _start(["--head", f"--port={gcs_port}", "--include-dashboard=false"], metrics_port)
    node = RayNode(f"127.0.0.1:{gcs_port}", metrics_port, proc)
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{metrics_port}/metrics", 2)[0] == 200, 60,
                   what="the Ray head's metrics endpoint")
        yield node
    finally:
        _end(proc)


@contextlib.contextmanager
def ray_worker_node(head: RayNode) -> Iterator[RayNode]:
    metrics_port = free_port()
    proc = _start([f"--address={head.gcs_address}"], metrics_port)
    try:
        yield RayNode(head.gcs_address, metrics_port, proc)
    finally:
        _end(proc)
