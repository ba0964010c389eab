"""Events are posted by one background task, never inline: a guard's cycle
only enqueues them (as kopf's own posting engine does), so a slow or
refusing API server delays a report, never a rotation.

The queue is bounded: when it is full (the API server has been down for a
while), new Events are dropped and counted (``memoryguard_events_dropped``),
as client-go's recorder drops rather than blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.decided import Say

log = logging.getLogger("memoryguard_kuberay.operator")
QUEUE_SIZE = 2000


@dataclasses.dataclass(frozen=True)
class PendingEvent:
    namespace: str
    involved: Mapping[str, Any]
    reason: str
    message: str
    warning: bool


class EventPoster:
    def __init__(self, kube: Kube, *, size: int = QUEUE_SIZE) -> None:
        self.kube = kube
        self.queue: asyncio.Queue[PendingEvent] = asyncio.Queue(maxsize=size)
        self.dropped = 0
        self.posting = False
        self._task: asyncio.Task[None] | None = None

    def busy(self) -> bool:
        """Events queued or being posted (the demo's shared clock waits for them)."""
        return self.posting or not self.queue.empty()

    def post(self, event: PendingEvent) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("Event queue full: dropped %s (%d dropped so far)", event.reason, self.dropped)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="memoryguard-events")

    async def _run(self) -> None:
        while True:
            e = await self.queue.get()
            self.posting = True
            try:
                await self.kube.event(namespace=e.namespace, involved=e.involved, reason=e.reason,
                                      message=e.message, warning=e.warning)
            except Exception:  # reporting never ends the poster
                log.exception("posting Event %s failed", e.reason)
            finally:
                self.posting = False
                self.queue.task_done()

    async def close(self, *, flush_s: float = 5.0) -> None:
        """Post what is queued (for at most ``flush_s``), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.join(), flush_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    def announce(self, namespace: str, guard: Mapping[str, Any], said: Say) -> None:
        """Queue ``said`` on the guard and on each object it is about."""
        for involved in (guard, *said.about):
            self.post(PendingEvent(namespace=namespace, involved=involved, reason=said.reason.value,
                                   message=said.message, warning=said.reason.warning))
