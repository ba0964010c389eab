"""One Lease (``coordination.k8s.io/v1``) held, as client-go's
leaderelection holds one: taken, renewed, given up. shards.py holds one
per shard it owns and one that says the replica is alive.

The holder renews every ``renew_s``; when it has not renewed for
``renew_deadline_s`` it stops acting on what the Lease guards before anyone
may take over at ``lease_s``: two replicas never act on one shard at once.
Another replica judges the Lease expired by its own clock, from when it last
saw the record change (``renewTime``, ``holderIdentity``), never by comparing
its clock with the holder's. On a clean exit the holder gives the Lease up,
so an upgrade hands over at once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from memoryguard_kuberay.operator.api.errors import ApiError, Conflict
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.clock import micro_time

log = logging.getLogger("memoryguard_kuberay.operator.sharding.leader")


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    renew_s: float = 3.0
    labels: tuple[tuple[str, str], ...] = ()  # set when the Lease is created (shards.py lists by them)
    annotations: tuple[tuple[str, str], ...] = ()
    # (name, uid) of the ServiceAccount in the Lease's namespace that owns it:
    # the garbage collector deletes the Lease with it (helm uninstall).
    owner: tuple[str, str] | None = None


class LeaderElector:
    """One Lease, as one replica sees and writes it (long-lived: what it
    observed of the holder is what expiry is judged by)."""

    def __init__(self, kube: Kube, cfg: LeaseConfig, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.kube, self.cfg, self.clock, self.wall = kube, cfg, clock, wall
        self.observed: tuple[Any, ...] | None = None  # the holder's record as last seen
        self.observed_at = 0.0  # when (own clock) it last changed
        self.last_renewed = 0.0  # own clock: the last successful write as holder
        self.takeovers = 0  # writes that took the Lease from another holder (or from nobody)

    def _spec(self, transitions: int, acquired: str | None = None) -> dict[str, Any]:
        now = micro_time(self.wall())
        return {"holderIdentity": self.cfg.identity, "leaseDurationSeconds": int(self.cfg.lease_s),
                "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}

    def observe(self, lease: dict[str, Any], now: float) -> None:
        """Note the holder's record as read now (by a GET, or a LIST of many
        Leases): expiry is counted from when it last changed."""
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity") or "", spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self.observed:
            self.observed, self.observed_at = record, now

    def expired(self, now: float) -> bool:
        """Free for anyone to take, as this replica has seen the Lease: no
        holder, or the holder's record unchanged for its duration. Whoever
        the holder is, alive or not: a holder that stopped renewing has
        stopped acting (``renew_deadline_s``)."""
        if self.observed is None:
            return False
        holder, _renewed, duration = self.observed
        return not holder or now - self.observed_at >= float(duration or self.cfg.lease_s)

    async def try_acquire_or_renew(self, notes: Mapping[str, str] | None = None) -> bool:
        """One attempt: True when this replica holds the Lease afterwards.
        ``notes``: annotations the holder writes with it (what it carries)."""
        cfg = self.cfg
        lease = await self.kube.get_lease(cfg.namespace, cfg.name)
        now = self.clock()
        if lease is None:
            meta: dict[str, Any] = {"name": cfg.name, "namespace": cfg.namespace, "labels": dict(cfg.labels),
                                    "annotations": {**dict(cfg.annotations), **(notes or {})}}
            if cfg.owner:
                meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ServiceAccount", "name": cfg.owner[0],
                                            "uid": cfg.owner[1]}]
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                    "spec": self._spec(0)}
            try:
                await self.kube.create_lease(cfg.namespace, body)
            except ApiError as e:
                if isinstance(e, Conflict):
                    return False  # another replica created it first
                raise
            if self.last_renewed is not None:
                # Held before and gone since: another replica may have held it
                # and deleted it (the last one's clean exit): a take, not a renewal.
                self.takeovers += 1
            self.last_renewed = now
            return True
        self.observe(lease, now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder != cfg.identity and not self.expired(now):
            return False  # held, and renewed within its duration as far as we have seen
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == cfg.identity else 1)
        acquired = spec.get("acquireTime") if holder == cfg.identity else None
        body = {**lease, "spec": self._spec(transitions, acquired)}
        if notes:
            meta = lease.get("metadata") or {}
            body["metadata"] = {**meta, "annotations": {**(meta.get("annotations") or {}), **notes}}
        try:
            await self.kube.replace_lease(cfg.namespace, cfg.name, body)
        except ApiError as e:
            if isinstance(e, Conflict):
                return False  # someone else wrote it since we read it
            raise
        if holder != cfg.identity:
            log.info("took the Lease %s/%s over from %r", cfg.namespace, cfg.name, holder or "nobody")
            self.takeovers += 1  # not a renewal: someone else may have held it since this replica last did
        self.last_renewed = now
        return True

    async def release(self, attempts: int = 3) -> bool:
        """Give the Lease up (a clean exit, a shard over this replica's
        share), so another takes over at once. A write in between (this
        replica's own renewal racing the release) answers 409: read again
        and retry. True when the Lease no longer names this replica; when
        it still does, it runs out after its duration like a dead holder's."""
        for _ in range(attempts):
            try:
                lease = await self.kube.get_lease(self.cfg.namespace, self.cfg.name)
                if not lease or (lease.get("spec") or {}).get("holderIdentity") != self.cfg.identity:
                    return True
                spec = {**lease["spec"], "holderIdentity": "", "renewTime": micro_time(self.wall())}
                await self.kube.replace_lease(self.cfg.namespace, self.cfg.name, {**lease, "spec": spec})
                return True
            except Conflict:
                continue
            except (ApiError, OSError) as e:
                log.warning("could not give the Lease %s up: %s", self.cfg.name, e)
                return False
        log.warning("could not give the Lease %s up: %d conflicting writes", self.cfg.name, attempts)
        return False
