"""The ladder's first rungs against a real Ray on loopback (issue 41):
(a) garbage that holds ObjectRefs in reference cycles, which only a garbage
collection frees, is freed by ``reclaim_ray`` (Ray's global GC) and the
object store comes back down; (b) an actor told through its pod's pressure
file (examples/ladder/cache_actor.py) drops its cache on Reclaim, its
memory comes back, and it refuses best-effort work on Shed. Each prints
what it measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..devworld import ROOT
from ..procs import http_get, wait_until
from ..rayfixture import RAY_ENV, ray_head

pytestmark = pytest.mark.ray
MIB = 1024**2
EXAMPLE = ROOT / "examples" / "ladder"

DRIVER = textwrap.dedent("""
    import gc, json, sys, time
    import numpy as np, ray
    from memoryguard_kuberay.pressure import Pressure, reclaim_ray
    address, pressure_file, example = sys.argv[1:4]
    ray.init(address=address, logging_level="ERROR", runtime_env={"env_vars": {"PYTHONPATH": example}})
    sys.path.insert(0, example)
    from cache_actor import CachingModel

    @ray.remote
    class Cyclic:
        def __init__(self):
            gc.disable()  # as a busy worker between collections: cycles wait for the next one
            self.kept = []
        def leak(self, n):
            for _ in range(n):
                d = {"ref": ray.put(np.ones(10 * 1024 * 1024, dtype=np.uint8))}
                d["self"] = d  # a cycle: refcounting alone never frees it, nor its ObjectRef
            return n

    def step(word):
        print(word, flush=True)
        sys.stdin.readline()

    c = Cyclic.remote()
    ray.get(c.leak.remote(10))
    step("LEAKED")
    t = time.monotonic()
    reclaim_ray()
    print(json.dumps({"gc_call_s": time.monotonic() - t}), flush=True)
    step("RECLAIMED")

    m = CachingModel.remote(path=pressure_file)
    ray.get([m.predict.remote(f"k{i}") for i in range(25)])
    before = {"cached_mib": ray.get(m.cached_mib.remote()), "rss_mib": ray.get(m.rss_mib.remote())}
    with open(pressure_file, "w") as f:
        f.write(Pressure("Elevated", "Reclaim", "2026-12-05T10:00:00.000000Z", 20000.0, 1, None, None, "g").to_json())
    t = time.monotonic()
    while ray.get(m.cached_mib.remote()) and time.monotonic() - t < 30:
        time.sleep(0.2)
    after = {"cached_mib": ray.get(m.cached_mib.remote()), "rss_mib": ray.get(m.rss_mib.remote()),
             "seconds": round(time.monotonic() - t, 1)}
    with open(pressure_file, "w") as f:
        f.write(Pressure("High", "Shed", "2026-12-05T10:10:00.000000Z", 9000.0, 1, None, None, "g").to_json())
    t = time.monotonic()
    answer = ""
    while not answer.startswith("refused") and time.monotonic() - t < 30:
        answer = ray.get(m.predict.remote("new", best_effort=True))
        time.sleep(0.2)
    print(json.dumps({"before": before, "after": after, "best_effort_on_shed": answer,
                      "normal_on_shed": ray.get(m.predict.remote("k0")), "did": ray.get(m.what_it_did.remote())}),
          flush=True)
""")


def _store_bytes(metrics_port: int) -> float:
    status, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics", 5)
    assert status == 200
    text = body.decode(errors="replace")
    # What the sidecar reads as the store's bytes in use (sidecar/objectstore.py).
    return sum(float(v) for v in re.findall(r"^ray_object_store_used_memory(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M))


def test_reclaim_frees_cyclic_garbage_and_a_told_actor_drops_its_cache(tmp_path: Path) -> None:
    pressure_file = tmp_path / "pressure"
    pressure_file.write_text("")
    with ray_head() as head:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, head.gcs_address, str(pressure_file), str(EXAMPLE)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **RAY_ENV})
        try:
            assert driver.stdin is not None and driver.stdout is not None
            assert driver.stdout.readline().strip() == "LEAKED"
            wait_until(lambda: _store_bytes(head.metrics_port) >= 95 * MIB, 60,
                       what="the cycles' 100 MiB in the object store")
            time.sleep(6)  # the raylet's metrics are refreshed every few seconds: still held, nothing freed it
            held = _store_bytes(head.metrics_port)
            assert held >= 95 * MIB
            driver.stdin.write("\n")
            driver.stdin.flush()
            gc_call = json.loads(driver.stdout.readline())
            left = wait_until(lambda: (b := _store_bytes(head.metrics_port)) < 20 * MIB and (b, ), 60,
                              what="the object store freed by Ray's global GC")[0]
            print(f"(a) cyclic garbage: {held / MIB:.0f} MiB in the store, {left / MIB:.0f} MiB after reclaim_ray "
                  f"(the call {gc_call['gc_call_s']:.2f} s)")
            assert driver.stdout.readline().strip() == "RECLAIMED"
            driver.stdin.write("\n")
            driver.stdin.flush()
            line = driver.stdout.readline()
            assert line, "the driver ended before case (b)"
            b = json.loads(line)
            print(f"(b) the cache actor: {b['before']['cached_mib']} MiB cached, RSS {b['before']['rss_mib']} MiB; "
                  f"told to reclaim: {b['after']['cached_mib']} MiB cached, RSS {b['after']['rss_mib']} MiB "
                  f"within {b['after']['seconds']} s; on shed, best effort: {b['best_effort_on_shed']!r}")
            assert b["before"]["cached_mib"] == 100 and b["after"]["cached_mib"] == 0
            assert b["before"]["rss_mib"] - b["after"]["rss_mib"] >= 80
            assert b["best_effort_on_shed"].startswith("refused") and b["normal_on_shed"] == "ok k0"
            assert b["did"][0].startswith("Reclaim: dropped the cache (100 MiB)")
        finally:
            driver.kill()
            driver.wait()
