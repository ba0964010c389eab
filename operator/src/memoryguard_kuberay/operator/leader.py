"""One active operator among replicas: leader election on a Lease
(``coordination.k8s.io/v1``), as client-go's leaderelection does it.

kopf's peering is not leader election (equal priorities all pause), so with
``--leader-elect`` each replica first takes the Lease, then runs kopf; the
others wait. The holder renews the Lease every ``renew_s``; when it has not
renewed for ``renew_deadline_s`` it stops acting (the process exits and the
pod restarts as a standby) before anyone may take over at ``lease_s``: two
operators never act at once. A standby judges the Lease expired by its own
clock, from when it last saw the record change (``renewTime``,
``holderIdentity``), never by comparing its clock with the holder's. On a
clean exit the holder gives the Lease up, so an upgrade hands over at once.

A takeover after the holder dies takes at most ``lease_s`` plus
``retry_s`` plus kopf's start: about 20 s with the defaults.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from memoryguard_kuberay.operator.kube import ApiError, Conflict, Kube

log = logging.getLogger("memoryguard_kuberay.operator.leader")


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    renew_s: float = 3.0
    retry_s: float = 2.0


def micro_time(t: float) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds."""
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: Kube, cfg: LeaseConfig, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.kube, self.cfg, self.clock, self.wall = kube, cfg, clock, wall
        self.observed: tuple[Any, ...] | None = None  # the holder's record as last seen
        self.observed_at = 0.0  # when (own clock) it last changed
        self.last_renewed = 0.0  # own clock: the last successful write as holder

    def _spec(self, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        now = micro_time(self.wall())
        return {"holderIdentity": self.cfg.identity, "leaseDurationSeconds": int(self.cfg.lease_s),
                "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this replica holds the Lease afterwards."""
        cfg = self.cfg
        lease = await self.kube.get_lease(cfg.namespace, cfg.name)
        now = self.clock()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace}, "spec": self._spec(0)}
            try:
                await self.kube.create_lease(cfg.namespace, body)
            except ApiError as e:
                if isinstance(e, Conflict):
                    return False  # another replica created it first
                raise
            self.last_renewed = now
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self.observed:
            self.observed, self.observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_s)
        if holder and holder != cfg.identity and now - self.observed_at < duration:
            return False  # held, and renewed within its duration as far as we have seen
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == cfg.identity else 1)
        acquired = spec.get("acquireTime") if holder == cfg.identity else None
        body = {**lease, "spec": self._spec(transitions, acquired)}
        try:
            await self.kube.replace_lease(cfg.namespace, cfg.name, body)
        except ApiError as e:
            if isinstance(e, Conflict):
                return False  # someone else wrote it since we read it
            raise
        if holder != cfg.identity:
            log.info("took the Lease %s/%s over from %r", cfg.namespace, cfg.name, holder or "nobody")
        self.last_renewed = now
        return True

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        waiting_logged = False
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except ApiError as e:
                log.warning("Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, e)
            if not waiting_logged:
                log.info("standing by: the Lease %s/%s is held by %r", self.cfg.namespace, self.cfg.name,
                         (self.observed or ("?",))[0])
                waiting_logged = True
            await asyncio.sleep(self.cfg.retry_s)

    async def hold(self) -> None:
        """Renew until a renewal fails for ``renew_deadline_s``; then return:
        the caller must stop acting at once."""
        while True:
            await asyncio.sleep(self.cfg.renew_s)
            try:
                if await self.try_acquire_or_renew():
                    continue
                log.error("the Lease %s/%s was taken by %r", self.cfg.namespace, self.cfg.name,
                          (self.observed or ("?",))[0])
                return
            except (TimeoutError, ApiError, OSError) as e:
                log.warning("Lease renewal failed: %s", e)
            if self.clock() - self.last_renewed > self.cfg.renew_deadline_s:
                log.error("no Lease renewal for %.0f s", self.clock() - self.last_renewed)
                return

    async def release(self) -> None:
        """Give the Lease up on a clean exit, so a standby takes over at once."""
        try:
            lease = await self.kube.get_lease(self.cfg.namespace, self.cfg.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.cfg.identity:
                spec = {**lease["spec"], "holderIdentity": "", "renewTime": micro_time(self.wall())}
                await self.kube.replace_lease(self.cfg.namespace, self.cfg.name, {**lease, "spec": spec})
        except (ApiError, OSError) as e:
            log.warning("could not give the Lease up: %s", e)
