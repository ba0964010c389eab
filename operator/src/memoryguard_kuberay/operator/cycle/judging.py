"""Poll every guarded pod's sidecar and ask the policy about each, as soon
as its samples are in (a fresh sample waits for no other pod). Nothing
here acts: the cycle's deciding step (steps.py) rotates and remediates from what
this returns, most urgent first.

A pod's failure is that pod's verdict (issue 23): a poll never raises
(sidecar_client.py), and whatever else one pod's samples make go wrong is
caught here, named, and kept to that pod.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from memoryguard_kuberay.core.policy import Decision, PodWindow, RotationHistory, decide
from memoryguard_kuberay.core.policy.ladder import Step
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.clock import Clock
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.sidecars import podhttp, sidecar_client

log = logging.getLogger("memoryguard_kuberay.operator")


@dataclasses.dataclass(slots=True)
class PodState:
    """One pod's policy window and what its last poll said: the only state
    a guard keeps in memory alone (the sidecars' ring buffers refill it)."""

    window: PodWindow
    group: str
    error: str | None = None
    failure: sidecar_client.PollFailure | None = None  # why the last poll brought no samples
    blind: bool = False  # the sidecar answers but reads no memory
    fed_at: float | None = None  # operator clock: the last poll that brought samples (sets the next one's budget)
    # The ladder's step in effect (cycle/laddering.py), as its annotation on
    # the pod has it: read from there on the first cycle (a restart).
    ladder: Step | None = None
    ladder_read: bool = False
    # What the annotation last said (laddering.said_key: level, step, since,
    # verdict, only said in a dry run), None while the pod has none: the
    # JSON is made only to be written, never parsed again each cycle.
    pressure_said: tuple[object, ...] | None = None
    ladder_judged: str | None = None  # the last step's measured effect, as said (kept with a rotation's evidence)


@dataclasses.dataclass(frozen=True)
class Judged:
    pod: pi.PodInfo
    track: PodState
    decisions: list[Decision]


@dataclasses.dataclass(frozen=True)
class Polling:
    """How to reach the pods and on whose clock: the same for every pod of
    one cycle."""

    port: int
    timeout_s: float
    clock: Clock
    metrics: OperatorMetrics
    namespace: str
    guard: str
    slots: Sequence[asyncio.Semaphore]  # taken in order for each poll: the namespace's, then everyone's
    # A guard's polls under way at once: no more than its namespace's slots
    # let run, so more would only wait, each a task and two frames (about
    # 1 KiB a pod at the start of every cycle, 20 MiB at 20,000 pods).
    at_once: int
    pool: podhttp.Pool | None = None  # connections kept between polls (the operator's, shared by every guard)
    # The guard injects the sidecar: a pod without it was made before (said so, not polled).
    expect_sidecar: bool = False
    admission: bool = False  # ... given at admission (webhook.py), else through its template


NO_SIDECAR_TEMPLATE = ("no sidecar: the pod was made before the sidecar was injected into its template; it gets the "
                       "sidecar when it is replaced (a rotation, or KubeRay's replacement)")
NO_SIDECAR_ADMISSION = ("no sidecar: the pod was created while MemoryGuard's admission webhook did not answer (the "
                        "operator down or not yet serving; failurePolicy Ignore lets the pod through), or before a "
                        "guard selected it; it gets the sidecar when it is replaced (a rotation, or KubeRay's "
                        "replacement)")


def judge(settings: PolicySettings, track: PodState, history: RotationHistory, now: float) -> list[Decision]:
    return decide(settings=settings, window=track.window, history=history, now_s=now)


async def poll_into(p: pi.PodInfo, track: PodState, how: Polling, settings: PolicySettings) -> None:
    """One poll of one pod, its samples into its window. A pod that is not
    running (Pending: waiting for a node or a quota; going) is not asked, and
    one made before the guard's sidecar was injected that does not answer
    reads NoSidecar: each its own verdict, and no fault of the guard's."""
    if not p.ip or p.phase != "Running" or p.terminating:
        track.error = ("pod is being deleted: no longer polled" if p.terminating else
                       f"pod is {p.phase or 'Pending'}{'' if p.ip else ' without an IP'}: polled once it runs")
        track.failure = sidecar_client.PollFailure.NOT_RUNNING
        return

    since = track.window.last.time_s if track.window.last else None
    started = how.clock.now()
    budget = sidecar_client.poll_budget(None if track.fed_at is None else started - track.fed_at)
    async with how.slots[0], how.slots[1]:
        # Nothing older than the policy's window is asked for or kept.
        res = await sidecar_client.poll(p.ip, how.port, since, timeout_s=how.timeout_s, now=how.clock.now,
                                        pod_uid=p.uid, require_uid=p.injected_sidecar,
                                        oldest_s=started - settings.trend_window_s, budget=budget, pool=how.pool)
    if res.samples:
        track.fed_at = started
    how.metrics.poll_seconds.labels(how.namespace, how.guard).observe(res.latency_s)
    if res.error and not res.samples:
        why = (res.failure or sidecar_client.PollFailure.BAD_ANSWER).value
        how.metrics.poll_errors.labels(how.namespace, how.guard, why).inc()
    track.error = res.error if not res.samples else None
    track.failure = res.failure if not res.samples else None
    if track.failure is sidecar_client.PollFailure.UNREACHABLE and how.expect_sidecar and not p.injected_sidecar:
        # Nothing answers where no sidecar runs: say why (issue 42, 1).
        track.error = (NO_SIDECAR_ADMISSION if how.admission else NO_SIDECAR_TEMPLATE)
        track.failure = sidecar_client.PollFailure.NO_SIDECAR
    if res.samples or res.blind:
        track.blind = res.blind or all(s.memory_current_bytes is None for s in res.samples)
    for sample in res.samples:
        track.window.add(sample)


async def poll_and_judge(pods: Sequence[pi.PodInfo], tracks: dict[str, PodState], how: Polling,
                         settings: PolicySettings, history: Callable[[pi.PodInfo], RotationHistory]) -> list[Judged]:
    """Every pod polled (``how.at_once`` at a time) and judged as its answer comes in; ``tracks``
    keeps the windows of exactly these pods afterwards."""
    live = {p.uid for p in pods}
    for uid in [u for u in tracks if u not in live]:
        del tracks[uid]
    judged: list[Judged] = []

    async def one(p: pi.PodInfo) -> None:
        track = tracks.get(p.uid)
        if track is None:
            track = tracks[p.uid] = PodState(PodWindow(settings), p.group)
        try:
            await poll_into(p, track, how, settings)
            now = how.clock.now()
            t0 = time.perf_counter()
            decisions = judge(settings, track, history(p), now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s/%s: pod %s: unexpected %s; its verdict is BadAnswer this cycle", how.namespace,
                      how.guard, p.name, type(exc).__name__, exc_info=True)
            track.error = f"this pod's samples could not be judged ({type(exc).__name__})"
            track.failure = sidecar_client.PollFailure.BAD_ANSWER
            track.window = PodWindow(settings)  # what it sent is not kept; its ring buffer refills it
            judged.append(Judged(p, track, judge(settings, track, history(p), how.clock.now())))
            return
        how.metrics.decision_seconds.labels(how.namespace, how.guard).observe(time.perf_counter() - t0)
        if track.window.last is not None:
            how.metrics.sample_to_decision.labels(how.namespace, how.guard).observe(
                max(0.0, how.clock.real_seconds(now - track.window.last.time_s)))
        judged.append(Judged(p, track, decisions))

    # The pods in turn, by ``at_once`` workers: what a cycle holds in flight
    # is bounded by that, not by how many pods a guard's selector matches.
    todo = iter(pods)

    async def worker() -> None:
        for p in todo:
            await one(p)

    await asyncio.gather(*(worker() for _ in range(min(how.at_once, len(pods)))))
    return judged
