"""Starting and stopping real processes for tests: sidecars on their own
loopback addresses, Ray on loopback. Every process is ended by PID."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def quiet_ports(n: int) -> list[int]:
    """``n`` consecutive ports free now and below the kernel's ephemeral
    range, for servers that bind long after their ports are chosen (a Ray
    node in a pod the kubelet starts a minute later). A port from
    :func:`free_port` is in the ephemeral range, which every outgoing
    connection draws its source port from: by the time the server binds it,
    it may be some connection's (seen: a Ray agent's port taken, its raylet
    exiting at every restart of the container). Ports below that range are
    only ever taken by a bind that names them; the start is random, so two
    runs on one machine do not pick the same block."""
    top = _ephemeral_range()[0] - n
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        start = rng.randrange(10000, top)
        if all(_bindable(p) for p in range(start, start + n)):
            return list(range(start, start + n))
    raise RuntimeError(f"no {n} free consecutive ports between 10000 and {top}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # conflicts with a socket on any address
        except OSError:
            return False
    return True


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str) -> Any:
    status, body = http_get(url)
    assert status == 200, (url, status, body[:200])
    return json.loads(body)


def wait_until(pred, timeout: float, interval: float = 0.2, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # retried until the deadline
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}" + (f": {last_exc!r}" if last_exc else ""))


@contextlib.contextmanager
def sidecar_process(host: str, args: Sequence[str], *, env: dict[str, str] | None = None) -> Iterator[str]:
    """A real `memoryguard-kuberay sidecar` listening on host:free port; yields its base URL."""
    port = free_port(host)
    cmd = [str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{host}:{port}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    url = f"http://{host}:{port}"
    try:
        wait_until(lambda: http_get(url + "/healthz", 1)[0] in (200, 503), 15, what=f"sidecar at {url}")
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, timeout: float = 10) -> int:  # type: ignore[type-arg]
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
