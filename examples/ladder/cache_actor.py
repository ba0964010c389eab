"""A Ray actor that answers MemoryGuard's ladder (docs/how-it-works.md, The
ladder): it drops its cache when its pod is asked to reclaim, and refuses
best-effort requests while its pod is asked to shed.

It reads the pod's pressure file (``/etc/memoryguard/pressure``, a downward
API volume MemoryGuard adds where it injects its sidecar) with
``memoryguard_kuberay.pressure.on_pressure`` (the core distribution,
``memoryguard-kuberay-core``, in the Ray image). Run it anywhere with ``python cache_actor.py`` (a local Ray); point
``MEMORYGUARD_PRESSURE_FILE`` at a file of your own to try the answers.
"""

from __future__ import annotations

import os
import threading

import ray

from memoryguard_kuberay.pressure import DEFAULT_PATH, Pressure, on_pressure, reclaim_ray


@ray.remote
class CachingModel:
    def __init__(self, path: str = DEFAULT_PATH) -> None:
        self.cache: dict[str, bytes] = {}
        self.shedding = False
        self.lock = threading.Lock()
        self.answers: list[str] = []  # what it did, for a person (and the tests) to read
        on_pressure(self._pressure, path=os.environ.get("MEMORYGUARD_PRESSURE_FILE", path), interval_s=1.0)

    def _pressure(self, p: Pressure) -> None:
        with self.lock:
            self.shedding = p.step == "Shed"
            if p.step in ("Reclaim", "Shed") and self.cache:
                freed = sum(len(v) for v in self.cache.values())
                self.cache.clear()
                reclaim_ray()
                self.answers.append(f"{p.step}: dropped the cache ({freed >> 20} MiB)")
            elif p.step == "Shed":
                self.answers.append("Shed: refusing best-effort requests")

    def predict(self, key: str, best_effort: bool = False) -> str:
        with self.lock:
            if best_effort and self.shedding:
                return "refused: the pod is shedding load"
            if key not in self.cache:
                self.cache[key] = os.urandom(4 << 20)  # 4 MiB of "features" per key, kept
        return f"ok {key}"

    def cached_mib(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.cache.values()) >> 20

    def rss_mib(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20

    def what_it_did(self) -> list[str]:
        with self.lock:
            return list(self.answers)


if __name__ == "__main__":
    ray.init()
    model = CachingModel.remote()  # type: ignore[attr-defined]
    print(ray.get([model.predict.remote(f"k{i}") for i in range(8)]))
    print("cached:", ray.get(model.cached_mib.remote()), "MiB")
