"""Measures what the policy costs per sample, for ``memoryguard-kuberay bench``.

Lives outside the core because it reads the clock; the work it times is the
core's ``PodWindow.add`` + ``decide``, exactly as the operator calls them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from memoryguard_kuberay.core.policy import PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.traces import Trace


def measure(traces: Sequence[Trace], settings: PolicySettings) -> dict[str, float]:
    """Feed every sample of every trace (no stop at rotation) and time it."""
    n = 0
    history = RotationHistory()
    start = time.process_time()
    for tr in traces:
        window = PodWindow(settings)
        for sample in tr.samples:
            window.add(sample)
            decide(settings=settings, window=window, history=history, now_s=sample.time_s)
            n += 1
    cpu = time.process_time() - start
    return {"samples": n, "cpu_s": round(cpu, 3), "samples_per_s": round(n / cpu) if cpu else 0.0,
            "us_per_sample": round(cpu / n * 1e6, 1) if n else 0.0}
