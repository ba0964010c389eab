"""The guards this replica acts on: shards held on Leases.

With ``--shards N`` every replica runs the whole operator, but a guard's
cycle (and its finalizer) runs only in the replica holding the guard's
shard (shardplan.py says which shard and how many each may hold). Every
``renew_s`` the keeper lists the release's Leases (one LIST), renews its
presence Lease (``<base>-replica-<identity>``: who is alive, and how many
shards it splits the work into), renews the shard Leases it holds
(``<base>-shard-<i>``, each with its guards' pods), gives one up when it
carries more pods than its share and another replica less, and takes free
ones, or those of a replica gone past the Lease's duration.

Safety is the Lease's (leader.py): a replica stops acting on a shard when it
has not renewed it for ``renew_deadline_s`` (10 s), before another may take
it (15 s after it last saw a renewal); a shard given up on purpose is let go
only once no cycle of its guards is in flight. What a rotation has done is
on the pods and in the guard's status, so the new holder resumes it where
it was: a pod is never evicted twice.

Without ``--shards`` (tests, the demo, one replica) ``AllShards`` owns
everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.sharding import shardplan
from memoryguard_kuberay.operator.sharding.leader import LeaderElector, LeaseConfig

log = logging.getLogger("memoryguard_kuberay.operator.sharding.shards")
LABEL = C.LABEL_LEASE_SET  # on every Lease of a release: its base name
ANN_SHARDS = C.ANN_SHARDS  # on a presence Lease: the replica's shard count
ANN_PODS = C.ANN_PODS  # on a shard Lease: its guards' pods, as its holder last counted them
MAX_SHARDS = 256  # each a Lease renewed every renew_s by its holder
FORGET_AFTER = 4  # a presence Lease unchanged for this many durations is deleted (a replica long gone)
# A release's first placement: no shard Lease says its pods yet, so shards
# are split by count and moved once their pods are counted; a shard polled
# and then given away cost its first holder the memory of those polls (a
# peak CPython keeps). So its guards count their pods and poll nothing until
# the shards are placed by those counts, for at most this many Lease durations
# (a guard that cannot count, its namespace's pods unlisted, holds them so).
PLACING_FOR_LEASES = 6


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    namespace: str  # the Leases' namespace (the operator's own)
    base: str  # the release's name: two releases never share a Lease
    identity: str
    shards: int
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    renew_s: float = 3.0
    owner: tuple[str, str] | None = None  # the ServiceAccount owning the Leases (leader.LeaseConfig.owner)


class AllShards:
    """One replica alone: every guard is its own."""

    shards = 1

    def owns_guard(self, namespace: str, name: str) -> bool:
        return True

    def holds_guard(self, namespace: str, name: str) -> bool:
        return True

    def term(self, namespace: str, name: str) -> int:
        return 0

    @contextlib.contextmanager
    def acting(self, namespace: str, name: str) -> Iterator[None]:
        yield

    def weigh(self, namespace: str, name: str, pods: int | None) -> None:
        return None

    def enlist(self, namespace: str, name: str) -> None:
        return None

    def delist(self, namespace: str, name: str) -> None:
        return None

    def placing(self) -> bool:
        return False

    def owned(self) -> int:
        return 1

    async def run(self) -> None:
        return None

    async def close(self) -> None:
        return None


class ShardKeeper:
    """Long-lived: holds the Leases' observation (who renewed when, as seen
    by this replica's clock) and which shards it holds; nothing of a guard."""

    def __init__(self, kube: Kube, cfg: ShardConfig, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.kube, self.cfg, self.clock, self.wall = kube, cfg, clock, wall
        self.shards = cfg.shards
        labels = ((LABEL, cfg.base),)
        lease = functools.partial(LeaseConfig, namespace=cfg.namespace, identity=cfg.identity, lease_s=cfg.lease_s,
                                  renew_deadline_s=cfg.renew_deadline_s, renew_s=cfg.renew_s, labels=labels,
                                  owner=cfg.owner)
        self.presence = LeaderElector(kube, lease(name=shardplan.replica_lease(cfg.base, cfg.identity),
                                                  annotations=((ANN_SHARDS, str(cfg.shards)),)),
                                      clock=clock, wall=wall)
        self.electors = [LeaderElector(kube, lease(name=shardplan.shard_lease(cfg.base, i)), clock=clock, wall=wall)
                         for i in range(cfg.shards)]
        self.held: set[int] = set()
        self.giving: set[int] = set()  # held, being let go once no cycle of theirs is in flight
        self.terms: Counter[int] = Counter()  # bumped on every take: a guard's memory from before is stale
        self.active: Counter[int] = Counter()  # cycles in flight, per shard
        self.seen: dict[str, tuple[tuple[Any, ...], float]] = {}  # presence Lease -> (record, when it changed)
        self.alone = False  # no other replica alive at the last list (then close() deletes the free Leases)
        # The size of the work, for placing shards by pods: per held shard,
        # each of its guards as its last cycle counted its pods. A shard is
        # here once one of its guards has counted since this replica took it
        # (until then its Lease keeps what the previous holder wrote).
        self.guard_pods: dict[int, dict[tuple[str, str], int]] = {}
        # Every guard there is, by shard (kopf runs each guard's daemon in
        # every replica): a held shard's pods are known once each has counted.
        self.enlisted: dict[int, set[tuple[str, str]]] = {}
        self.placing_until: float | None = None  # a release's first placement under way (PLACING_FOR_LEASES)
        self.agreed = True
        self.last_plan: shardplan.Plan | None = None
        self.began: float | None = None  # this replica's first tick: it takes nothing for a Lease's duration after
        self._tasks: set[asyncio.Task[None]] = set()

    # -- what the guards ask --------------------------------------------------------------
    def shard(self, namespace: str, name: str) -> int:
        return shardplan.shard_of(namespace, name, self.shards)

    def owns(self, shard: int) -> bool:
        return (self.agreed and shard in self.held and shard not in self.giving
                and self.clock() - self.electors[shard].last_renewed < self.cfg.renew_deadline_s)

    def owns_guard(self, namespace: str, name: str) -> bool:
        return self.owns(self.shard(namespace, name))

    def holds_guard(self, namespace: str, name: str) -> bool:
        """The guard's shard is held, whether or not this replica may act on
        it this moment (a renewal late, a shard being given up, a rollout)."""
        return self.shard(namespace, name) in self.held

    def term(self, namespace: str, name: str) -> int:
        return self.terms[self.shard(namespace, name)]

    @contextlib.contextmanager
    def acting(self, namespace: str, name: str) -> Iterator[None]:
        """Around one cycle of a guard: its shard is not let go meanwhile."""
        s = self.shard(namespace, name)
        self.active[s] += 1
        try:
            yield
        finally:
            self.active[s] -= 1

    def weigh(self, namespace: str, name: str, pods: int | None) -> None:
        """A guard's pods as its cycle found them; None: the guard is no
        longer cycled here (deleted, or its shard gone)."""
        s = self.shard(namespace, name)
        if pods is None:
            self.guard_pods.get(s, {}).pop((namespace, name), None)
        elif s in self.held:
            self.enlist(namespace, name)
            self.guard_pods.setdefault(s, {})[(namespace, name)] = pods

    def enlist(self, namespace: str, name: str) -> None:
        """A guard exists (its daemon started here), whichever replica acts on it."""
        self.enlisted.setdefault(self.shard(namespace, name), set()).add((namespace, name))

    def delist(self, namespace: str, name: str) -> None:
        """A guard is gone (its daemon ended)."""
        s = self.shard(namespace, name)
        self.enlisted.get(s, set()).discard((namespace, name))
        self.guard_pods.get(s, {}).pop((namespace, name), None)

    def pods_of(self, s: int) -> int | None:
        """The shard's pods, once every guard of it has counted them here
        since this replica took it (0 for a shard without guards); None
        until then (its Lease keeps what the last holder wrote)."""
        counted = self.guard_pods.get(s, {})
        if s not in self.held or any(g not in counted for g in self.enlisted.get(s, ())):
            return None
        return sum(counted.values())

    def placing(self) -> bool:
        """A release's first placement under way: guards count, poll nothing."""
        return self.placing_until is not None and self.clock() < self.placing_until

    def owned(self) -> int:
        return sum(1 for s in range(self.shards) if self.owns(s))

    # -- the keeper's loop ----------------------------------------------------------------
    async def _present(self) -> None:
        try:
            await self.presence.try_acquire_or_renew()
        except (ApiError, OSError) as e:
            log.warning("presence Lease not renewed: %s", e)

    async def _renew(self, s: int) -> None:
        e = self.electors[s]
        before = e.takeovers
        pods = self.pods_of(s)
        try:
            if not await e.try_acquire_or_renew(None if pods is None else {ANN_PODS: str(pods)}):
                log.error("shard %d was taken by %r", s, (e.observed or ("?",))[0])
                self.held.discard(s)
            elif e.takeovers != before:
                # Held again after a lapse in which another replica may have
                # held it: what this replica knew of its guards is stale.
                self.terms[s] += 1
        except (ApiError, OSError) as e_:
            log.warning("shard %d not renewed: %s", s, e_)

    async def tick(self) -> shardplan.Plan:
        cfg = self.cfg
        # What is held is renewed first, all at once: a slow LIST (an API
        # server under load) must not make this replica lapse on its shards.
        await asyncio.gather(self._present(), *(self._renew(s) for s in sorted(self.held)))
        leases = await self.kube.list_leases(cfg.namespace, f"{LABEL}={cfg.base}")
        now = self.clock()
        live, counts = {cfg.identity}, []
        holders: dict[int, str] = {}
        pods: dict[int, int] = {}
        prefix = shardplan.REPLICA_PREFIX.format(base=cfg.base)
        shard_names = {e.cfg.name: i for i, e in enumerate(self.electors)}
        for lease in leases:
            meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            name, holder = str(meta.get("name", "")), str(spec.get("holderIdentity") or "")
            if name in shard_names:
                e = self.electors[shard_names[name]]
                e.observe(lease, now)  # expiry counts from what this list saw
                # A Lease that ran out is free whoever it names, a live
                # replica included (one whose give-up the API refused, say):
                # else it would stay named and never taken again.
                holders[shard_names[name]] = "" if e.expired(now) else holder
                notes = meta.get("annotations") or {}
                if ANN_PODS in notes:
                    with contextlib.suppress(ValueError):  # our own annotation; a bad one weighs nothing
                        pods[shard_names[name]] = int(str(notes[ANN_PODS])[:12])
                continue
            if not name.startswith(prefix) or name == self.presence.cfg.name:
                continue
            record = (holder, spec.get("renewTime"))
            old = self.seen.get(name)
            if old is None or old[0] != record:
                self.seen[name] = old = (record, now)
            duration = float(spec.get("leaseDurationSeconds") or cfg.lease_s)
            if holder and now - old[1] < duration:
                live.add(holder)
                try:
                    counts.append(int((meta.get("annotations") or {}).get(ANN_SHARDS, "0")))
                except ValueError:
                    counts.append(0)
            elif now - old[1] > FORGET_AFTER * duration:
                await self.kube.delete_lease(cfg.namespace, name)  # a replica long gone
                self.seen.pop(name, None)
        self.alone = live == {cfg.identity}
        agreed = shardplan.agreed(self.shards, counts)
        if agreed != self.agreed:
            log.warning("live replicas %s split the work into the same number of shards (%d) as this one",
                        "now" if agreed else "no longer", self.shards)
        self.agreed = agreed
        if self.began is None:
            self.began = now
            if not pods:  # no shard Lease says its pods: the release's first placement
                self.placing_until = now + PLACING_FOR_LEASES * cfg.lease_s
        # Joining (a Lease's duration from the first tick): replicas started
        # together (a release installed, a rollout) do not see each other
        # before each has written its presence; the first to list would take
        # every shard and poll all their pods before giving most away: its
        # memory would peak at the whole work's, and CPython keeps much of a
        # peak. Running peers are seen at once; those starting now have had
        # a Lease's duration to appear.
        joining = now - self.began < cfg.lease_s
        counting = self.placing_until is not None and len(pods) < self.shards
        p = shardplan.plan(self.shards, cfg.identity, live, self.held - self.giving, holders, pods, joining=joining,
                           counting=counting)
        for s in p.give:
            if s in self.held and s not in self.giving:
                self.giving.add(s)
                task = asyncio.create_task(self._give(s))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        for s in p.take:
            if s in self.giving:
                continue
            try:
                if await self.electors[s].try_acquire_or_renew():
                    self.held.add(s)
                    self.guard_pods.pop(s, None)  # its Lease says what the last holder counted, until we count
                    self.terms[s] += 1
                    log.info("took shard %d", s)
            except (ApiError, OSError) as e:
                log.warning("shard %d not taken: %s", s, e)
        if self.placing_until is not None and (p.settled or now >= self.placing_until):
            log.info("first placement %s after %.0f s: polling", "settled" if p.settled else "not settled",
                     now - self.began)
            self.placing_until = None
        if self.last_plan is None or (p.keep, p.give, p.take) != (self.last_plan.keep, self.last_plan.give,
                                                                  self.last_plan.take):
            log.info("%s", p.why)
        self.last_plan = p
        return p

    async def _give(self, s: int) -> None:
        """Let a shard go once its guards' cycles in flight have ended (they
        stop between steps, as ``owns`` is False now), within the renewal
        deadline: its Lease is renewed meanwhile."""
        until = self.clock() + self.cfg.renew_deadline_s
        while self.active[s] and self.clock() < until:
            await asyncio.sleep(0.1)
        self.held.discard(s)
        try:
            if await self.electors[s].release():
                log.info("gave shard %d up", s)
            else:
                log.warning("shard %d not given up: it is free for another replica once its Lease runs out", s)
        finally:
            self.giving.discard(s)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except (ApiError, OSError) as e:
                log.warning("shards: %s", e)
            await asyncio.sleep(self.cfg.renew_s)

    async def close(self) -> None:
        """A clean exit: every shard given up, so the others take them at once.
        The last replica (no other seen alive at its last list: a scale to
        0) also deletes the shard Leases nobody holds, so none is left
        behind; each delete is conditional on the Lease as read, so a replica
        that took one meanwhile keeps it (409: left alone). Under ``helm
        uninstall`` its RBAC is gone by then: there the garbage collector
        deletes the Leases with the ServiceAccount that owns them."""
        for task in list(self._tasks):
            task.cancel()
        for s in sorted(self.held):
            self.held.discard(s)
            await self.electors[s].release()
        with contextlib.suppress(ApiError, OSError):
            await self.kube.delete_lease(self.cfg.namespace, self.presence.cfg.name)
        if self.alone:
            for e in self.electors:
                with contextlib.suppress(ApiError, OSError):
                    lease = await self.kube.get_lease(self.cfg.namespace, e.cfg.name)
                    if lease and not (lease.get("spec") or {}).get("holderIdentity"):
                        await self.kube.delete_lease(self.cfg.namespace, e.cfg.name,
                                                     resource_version=lease["metadata"].get("resourceVersion"))

