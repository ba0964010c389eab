"""One MemoryGuard's cycle, called by the kopf daemon every
``sampling.intervalSeconds`` (operator clock).

A cycle is the literal list of steps in ``cycle``, run in order, as
KubeRay's controller runs its reconcile functions. The observing steps
return what they found and the cycle hands it to the steps after them as
arguments (steps.py); every step returns what it decided (decided.py),
and the cycle adds the decisions up. Then, once, it writes the status (a
merge of every step's pieces, last one wins) and posts the Events after
it, so whoever sees an Event finds what it announced already recorded.

One checkpoint comes earlier, said where it is: after the rotations
advanced. An eviction there takes the pod, and with it the annotations
that were the rotation's record, so the status must hold the rotation
before anything else can fail.

What must survive a restart is on the objects (pod annotations, the
guard's status: rotations, what was said and remediated), read back on
the first cycle; the policy windows are the only state kept in memory
alone (``Guard.memory``), and the sidecars' ring buffers refill them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.clock import micro_time, parse_time
from memoryguard_kuberay.operator.cycle import cadence, steps
from memoryguard_kuberay.operator.cycle.guardstate import Guard, Memory, Run
from memoryguard_kuberay.operator.cycle.steps import INVALID_RETRY_S, PLACING_RETRY_S, REFUSED_RETRY_S
from memoryguard_kuberay.operator.decided import NOTHING, Decided

__all__ = ["INVALID_RETRY_S", "PLACING_RETRY_S", "REFUSED_RETRY_S", "Ended", "Guard", "close", "cycle"]

log = logging.getLogger("memoryguard_kuberay.operator")
MIN_PAUSE_S = 0.5  # operator clock: the least pause between two cycles of one guard


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a cycle ended: when the next one starts, and the pods it found
    to guard, which place its shard (shards.py). ``pods`` is None when the
    cycle did not get as far as counting them (the API failing, the
    namespace's pods still being listed), so that a shard is not weighed
    on a guard that only could not count; 0 when a decision ended it
    before (an invalid spec, a refused guard): it polls none."""

    delay_s: float
    pods: int | None = None


async def cycle(g: Guard, body: Mapping[str, Any], *, stopped: Callable[[], bool] = lambda: False) -> Ended:
    """One pass. ``stopped`` is asked between steps: a guard being deleted
    starts no new step (its finalizer then cleans up); what the steps
    before decided is written all the same."""
    t0 = time.monotonic()
    if stopped():
        return Ended(0.0)
    if g.memory is None:
        g.memory = Memory.from_status(body.get("status") or {})
    run = Run(body=body, now=g.ctx.clock.now())
    decided = NOTHING
    pods: int | None = None
    interval_s = INVALID_RETRY_S  # until the spec is read: how soon a failed cycle is tried again
    try:
        spec, d = steps.read_spec(g, run)
        decided += d
        if spec is None or stopped():
            return await _end(g, body, decided, pods=0 if spec is None else None)
        interval_s = spec.sampling.interval_s
        decided += await steps.admit(g, run)
        if decided.end_in_s is not None or stopped():
            return await _end(g, body, decided, pods=0 if decided.end_in_s is not None else None)
        selected = await steps.find_clusters(g, run, spec)
        if stopped():
            return await _end(g, body, decided)
        decided += await steps.say_missing_clusters(g, run, selected)
        decided += await steps.set_up_clusters(g, run, spec, selected)
        if stopped():
            return await _end(g, body, decided)
        found = await steps.read_pods(g, run, spec, selected)
        pods = len(found.guarded)
        decided += steps.hold_while_placing(g)
        if decided.end_in_s is not None or stopped():
            return await _end(g, body, decided, pods=pods)
        decided += await steps.advance_rotations(g, found)
        decided = await _write(g, body, decided)  # the checkpoint: an eviction took the pod's own record
        if stopped():
            return await _end(g, body, decided, pods=pods)
        decided += await steps.take_evidence(g, found)
        if stopped():
            return await _end(g, body, decided, pods=pods)
        views, d = await steps.poll_and_decide(g, found)
        decided += d
        if stopped():
            return await _end(g, body, decided, pods=pods)
        decided += await steps.review_remediations(g, found)
        if stopped():
            return await _end(g, body, decided, pods=pods)
        decided += steps.summarize(g, run, found, views)
    except ApiError as e:
        # Every step is idempotent: the next cycle repeats what this one could not do.
        log.warning("%s/%s: API error, the cycle ends here and the next repeats it: %s", g.namespace, g.name, e)
        await _write(g, body, decided)
        return Ended(interval_s, pods)
    except Exception:
        # Anything else ends the cycle too (the daemon logs it and tries
        # again): what the steps before decided, a rotation started among
        # it, is recorded and announced all the same, as each step's was
        # when every step wrote its own.
        await _write(g, body, decided)
        raise
    await _write(g, body, decided)
    g.ctx.metrics.cycle_seconds.labels(g.namespace, g.name).observe(time.monotonic() - t0)
    # Cycles start every interval, not an interval after the last one
    # ended: a long cycle (thousands of pods) must not stretch the time
    # between two polls of a pod; and at the guard's own place in the
    # interval, so a replica's guards do not all poll at once (cadence.py).
    return Ended(cadence.pause(started=run.now, now=g.ctx.clock.now(), interval_s=interval_s, phase=g.phase,
                               min_pause_s=MIN_PAUSE_S), pods)


async def _end(g: Guard, guard: Mapping[str, Any], decided: Decided, *, pods: int | None = None) -> Ended:
    """The cycle ends before its last step: by a decision (an invalid spec,
    a refused guard, the first placement), or because the guard is
    stopping (no delay: the daemon is leaving)."""
    await _write(g, guard, decided)
    if decided.end_in_s is None:
        return Ended(0.0, pods)
    g.ctx.metrics.degraded(g.namespace, g.name, decided.degraded)
    return Ended(decided.end_in_s, pods)


async def _write(g: Guard, guard: Mapping[str, Any], decided: Decided) -> Decided:
    """What the cycle decided so far, applied: the status first, then the
    Events. Returns what is left to apply (nothing but whether the cycle
    ends)."""
    status = dict(decided.status)
    if decided.says:
        status.update(lastAction=decided.says[-1].last_action, lastActionBrief=decided.says[-1].brief,
                      lastActionTime=micro_time(g.ctx.clock.now()))
    if status:
        await write_status(g, status)
    for said in decided.says:
        # At the Event's own level: a Warning Event is a WARNING line (issue 61, 7).
        log.log(logging.WARNING if said.reason.warning else logging.INFO, "%s/%s %s: %s", g.namespace, g.name,
                said.reason.value, said.message)
        g.ctx.events.announce(g.namespace, guard, said)
    return Decided(end_in_s=decided.end_in_s, degraded=decided.degraded)


async def write_status(g: Guard, status: Mapping[str, Any]) -> None:
    """Merge-patch the status, only when it changed; every key that left
    (a pod, a verdict no pod has any more) is nulled out: a merge patch
    keeps keys it is not told to remove."""
    last = g.mem.status
    merged = {**last, **status}
    now = g.ctx.clock.now()
    beat = parse_time(last.get("lastCycleTime"))
    if merged == last and beat is not None and 0 <= now - beat < st.HEARTBEAT_S:
        return
    # Every write says the guard is guarded now (issue 61, 2).
    status = {**status, "lastCycleTime": micro_time(now)}
    merged = {**last, **status}
    patch = {k: st.merge_patch(last.get(k), v) for k, v in status.items() if last.get(k) != v}
    try:
        await g.ctx.kube.patch_guard_status(g.namespace, g.name, patch)
    except ApiError as e:
        log.warning("%s/%s: status not written: %s", g.namespace, g.name, e)
        return
    g.mem.status = json.loads(json.dumps(merged))


async def close(g: Guard) -> None:
    """The guard is gone or the operator stops: no evidence is awaited,
    and its namespace's pod cache is let go (closed with its last guard)."""
    g.evidence.cancel()
    await g.ctx.pods.release(g.namespace, g.name)
