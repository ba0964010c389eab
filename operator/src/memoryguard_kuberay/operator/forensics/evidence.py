"""The evidence of one guard's rotations, taken before the drain destroys
it (forensics.py collects and keeps it). Collections run as tasks beside
the cycle, within their budget; what a finished one decided (its Event,
``status.forensics``, whether Ray must be told to record call sites) is
picked up by the next cycle's step ``take_evidence``: a task calls
nothing back up.

What this holds is work under way, not memory: a restarted operator has
lost the collections in flight, and the rotations they held up go on
(a rotation waits for its evidence only until the deadline).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.policy import Decision
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.decided import Say, pod_ref, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.forensics import collect as forensics

log = logging.getLogger("memoryguard_kuberay.operator")
DEADLINE_SLACK_S = 2.0  # a second or two past the budget: the artifact is being written by then


@dataclasses.dataclass(frozen=True)
class Kept:
    """What one collection came to."""

    pod: str
    pod_uid: str
    decision: Decision
    says: tuple[Say, ...]
    status: Mapping[str, Any] | None = None  # ``status.forensics`` when kept
    sites_unrecorded: bool = False  # Ray held objects but recorded no call site for any


@dataclasses.dataclass
class _Job:
    task: asyncio.Task[Kept]
    deadline: float  # monotonic


class Evidence:
    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}  # pod uid -> its collection

    def collecting_for(self, uid: str) -> bool:
        """Evidence for this pod is still coming in, within its deadline."""
        job = self._jobs.get(uid)
        return job is not None and not job.task.done() and time.monotonic() <= job.deadline

    def start(self, subject: forensics.Subject, *, kube: Kube, budget_s: float, keep_n: int, with_ray: bool,
              probe_slots: asyncio.Semaphore, now: float) -> None:
        task = asyncio.create_task(_collect_and_keep(subject, kube=kube, budget_s=budget_s, keep_n=keep_n,
                                                     with_ray=with_ray, probe_slots=probe_slots, now=now),
                                   name=f"forensics-{subject.pod}")
        self._jobs[subject.pod_uid] = _Job(task, time.monotonic() + budget_s + DEADLINE_SLACK_S)

    def finished(self) -> list[Kept]:
        """The collections that ended since the last call (each once); one
        that failed outright says so."""
        done: list[Kept] = []
        for uid, job in list(self._jobs.items()):
            if not job.task.done():
                continue
            del self._jobs[uid]
            if job.task.cancelled():
                continue
            exc = job.task.exception()
            if exc is not None:  # _collect_and_keep answers what it expects; this is a bug, logged
                log.error("evidence of pod %s: %s", uid, exc, exc_info=exc)
                continue
            done.append(job.task.result())
        return done

    def cancel(self) -> None:
        for job in self._jobs.values():
            job.task.cancel()
        self._jobs.clear()


async def _collect_and_keep(subject: forensics.Subject, *, kube: Kube, budget_s: float, keep_n: int,
                            with_ray: bool, probe_slots: asyncio.Semaphore, now: float) -> Kept:
    artifact = await forensics.collect(subject, budget_s=budget_s, with_ray=with_ray, probe_slots=probe_slots)
    about = pod_ref(subject.pod, subject.pod_uid)
    try:
        name = await forensics.keep(kube, artifact, subject, keep_n=keep_n, now=now)
    except ApiError as e:
        return Kept(subject.pod, subject.pod_uid, subject.decision,
                    (say(EventReason.FORENSICS_FAILED, f"{subject.pod}: the evidence could not be kept: {e}", about),))
    size = forensics.size_of(artifact)
    skipped = "; ".join(f"{k} skipped: {v}" for k, v in artifact["skipped"].items())
    message = (f"{subject.pod}: evidence kept in ConfigMap {name} ({size / 1024:.0f} KiB, collected in "
               f"{artifact['tookSeconds']:.1f} s)" + (f"; {skipped}" if skipped else ""))
    objects = artifact.get("rayObjects") or {}
    return Kept(subject.pod, subject.pod_uid, subject.decision, (say(EventReason.FORENSICS_KEPT, message, about),),
                status={"latest": name, "pod": subject.pod, "collectedAt": artifact["collectedAt"], "bytes": size},
                sites_unrecorded=bool(objects.get("objects")) and objects.get("recordedSites") == 0)
