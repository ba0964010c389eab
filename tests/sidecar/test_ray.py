"""The sidecar against a real Ray head on loopback: 100 MB put into the
object store shows in ``plasma_used`` and goes away once freed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from ..procs import get_json, sidecar_process, wait_until
from ..rayfixture import RAY_ENV, ray_head

pytestmark = pytest.mark.ray

DRIVER = textwrap.dedent("""
    import sys, ray, numpy as np
    ray.init(address=sys.argv[1], logging_level="ERROR")
    ref = ray.put(np.ones(100 * 1024 * 1024, dtype=np.uint8))
    print("PUT", flush=True)
    sys.stdin.readline()
    del ref
    print("FREED", flush=True)
    sys.stdin.readline()
""")


def _plasma(url: str) -> int | None:
    samples = get_json(url + "/v1/samples")["samples"]
    return samples[-1]["plasma_used"] if samples else None


def test_object_store_put_and_free() -> None:
    with ray_head() as head:
        args = ["--interval", "1", "--ray-metrics-url", f"http://127.0.0.1:{head.metrics_port}/metrics",
                "--ray-metrics-interval", "2"]
        with sidecar_process("127.0.0.31", args) as url:
            driver = subprocess.Popen([sys.executable, "-c", DRIVER, head.gcs_address], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, **RAY_ENV})
            try:
                assert driver.stdout is not None and driver.stdin is not None
                assert driver.stdout.readline().strip() == "PUT"
                wait_until(lambda: (_plasma(url) or 0) >= 100 * 1024 * 1024, 30, what="100 MiB in plasma_used")
                doc = get_json(url + "/v1/samples")
                last = doc["samples"][-1]
                assert last["plasma_capacity"] == pytest.approx(300_000_000, rel=0.05)
                # This machine's raylet was found through /proc and its cgroup read.
                assert doc["source"].startswith("cgroup-"), doc["source"]
                assert last["memory_current"] and last["memory_current"] > 0
                driver.stdin.write("\n")
                driver.stdin.flush()
                assert driver.stdout.readline().strip() == "FREED"
                wait_until(lambda: (_plasma(url) or 0) < 10 * 1024 * 1024 and _plasma(url) is not None, 30,
                           what="plasma_used back down after the free")
            finally:
                driver.kill()
                driver.wait()


SPILLER = textwrap.dedent("""
    import sys, ray, numpy as np
    ray.init(address=sys.argv[1], logging_level="ERROR")
    # Three 120 MB objects held in a store of 300 MB: Ray spills to disk.
    refs = [ray.put(np.ones(120 * 1024 * 1024, dtype=np.uint8)) for _ in range(3)]
    print("HELD", flush=True)
    sys.stdin.readline()
""")


def _spilled(url: str) -> int | None:
    samples = get_json(url + "/v1/samples")["samples"]
    return samples[-1].get("plasma_spilled") if samples else None


def test_spilled_objects_show_in_the_samples() -> None:
    """A store held beyond its capacity spills, and the samples say so:
    the policy reads a full store that spills as a pipeline at work.

    Ray spills to a directory of this test's own on tmpfs: by default it
    spills under /tmp and refuses (OutOfDiskError) once that disk is 95%
    full, which a CI machine's disk once was (docs/facts.md)."""
    spill_dir = tempfile.mkdtemp(prefix="mg-spill-", dir="/dev/shm")
    try:
        _spill_and_read(spill_dir)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


def _spill_and_read(spill_dir: str) -> None:
    with ray_head(args=[f"--object-spilling-directory={spill_dir}"]) as head:
        args = ["--interval", "1", "--ray-metrics-url", f"http://127.0.0.1:{head.metrics_port}/metrics",
                "--ray-metrics-interval", "2"]
        with sidecar_process("127.0.0.32", args) as url:
            wait_until(lambda: _spilled(url) == 0, 30, what="plasma_spilled 0 before any spilling")
            driver = subprocess.Popen([sys.executable, "-c", SPILLER, head.gcs_address], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env={**os.environ, **RAY_ENV})
            try:
                assert driver.stdout is not None and driver.stdin is not None
                assert driver.stdout.readline().strip() == "HELD"
                wait_until(lambda: (_spilled(url) or 0) >= 100 * 1024 * 1024, 60, what="spilled bytes in the samples")
            finally:
                driver.kill()
                driver.wait()
