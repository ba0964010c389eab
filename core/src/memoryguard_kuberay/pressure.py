"""For Ray code in a guarded pod: what MemoryGuard's ladder asks of it
(docs/how-it-works.md, The ladder), read from the pod's pressure file.

``on_pressure(callback)`` calls ``callback(Pressure)`` from a thread of its
own each time the file changes (a serving replica refusing best-effort
requests while ``step`` is Shed, a trainer lowering its batch, an actor
dropping its cache on Reclaim); ``reclaim_ray()`` is what Reclaim asks of a
Ray process short of its own caches. It needs the core distribution
(``memoryguard-kuberay-core``: this module and ``core/pressure.py``, the
format, on the standard library and PyYAML) in the Ray image.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from memoryguard_kuberay.core.pressure import DEFAULT_PATH, MAX_BYTES, NORMAL, Pressure, parse


def read(path: str = DEFAULT_PATH) -> Pressure | None:
    """The file now: None where there is none (no sidecar injected, or an
    operator older than the ladder) or it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read(MAX_BYTES + 1))
    except (OSError, UnicodeDecodeError):
        return None


def on_pressure(callback: Callable[[Pressure], None], *, path: str = DEFAULT_PATH, interval_s: float = 5.0,
                stop: threading.Event | None = None) -> threading.Thread:
    """Call ``callback(pressure)`` on a daemon thread each time the pod's
    pressure file says something new (the first reading included). Returns
    the thread; set ``stop`` to end it. A callback that raises is not
    retried for that reading; the next change calls it again."""
    stop = stop or threading.Event()

    def watch() -> None:
        last: Pressure | None = None
        while not stop.is_set():
            now = read(path)
            if now is not None and now != last:
                last = now
                try:
                    callback(now)
                except Exception:  # the workload's code: never the watcher's end
                    pass
            stop.wait(interval_s)

    t = threading.Thread(target=watch, name="memoryguard-on-pressure", daemon=True)
    t.start()
    return t


def reclaim_ray() -> None:
    """What Reclaim asks of a Ray process, short of the workload's own
    caches: Python's garbage collection here and, when this process is
    connected to Ray, Ray's global GC in every worker of the cluster (the
    reference cycles that hold ObjectRefs are freed by it and by nothing
    else short of a restart)."""
    import gc

    gc.collect()
    try:
        import ray
        from ray._private.internal_api import global_gc
    except ImportError:
        return
    if ray.is_initialized():
        global_gc()  # type: ignore[no-untyped-call]


__all__ = ["DEFAULT_PATH", "NORMAL", "Pressure", "on_pressure", "read", "reclaim_ray"]
