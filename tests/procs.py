"""Starting and stopping real processes for tests: sidecars on their own
loopback addresses, Ray on loopback. Every process is ended by PID."""

from __future__ import annotations

import contextlib
import json
import os
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
