"""Which replica acts on which guard: pure, no I/O, no clock.

The work is split into ``shards`` shards; a guard belongs to the shard its
``namespace/name`` hashes to, whichever replica asks. The unit is the guard,
not the pod, because a guard's budgets (one rotation per group at a time,
rotations per hour), its ledger and its status are one; pods of one guard
split over two replicas would need a lock across them for every rotation.
Many guards (one per RayCluster, say) spread over the shards evenly.

Each shard is a Lease (shards.py); its holder writes on it how many pods
its guards have, and replicas place shards so that each carries about as
many pods (``plan``): by pods, not by shard counts, since guards differ in
size. Every replica computes the same placement from the same list of
Leases; where two views differ for a moment, a Lease can still be held by
one replica only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping


def _h(text: str) -> int:
    # A hash that is the same in every process (Python's hash() is salted).
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard a guard belongs to: stable across processes and restarts."""
    return _h(f"{namespace}/{name}") % shards


def shard_lease(base: str, shard: int) -> str:
    return f"{base}-shard-{shard}"


REPLICA_PREFIX = "{base}-replica-"


def replica_lease(base: str, identity: str) -> str:
    """A replica's presence Lease: a DNS subdomain whatever the identity."""
    safe = re.sub(r"[^a-z0-9-]+", "-", identity.lower()).strip("-") or "unnamed"
    return (REPLICA_PREFIX.format(base=base) + safe)[:253].rstrip("-")


# A replica gives a shard up to balance only when it carries this much more
# than its share, and only for a move that narrows the gap by as much: a move
# costs the taker the shard's pods' first polls (their history, about 3 ms of
# CPU a pod), so a per cent or two of imbalance is not worth one.
SLACK = 0.02
MAX_PODS = 10_000_000  # a Lease's pod count past this is read as this (never a reason to move everything)


@dataclasses.dataclass(frozen=True)
class Plan:
    keep: tuple[int, ...]  # held, renewed
    give: tuple[int, ...]  # held, to go to a replica carrying less: drained, then given up
    take: tuple[int, ...]  # not held, free or held by a replica that is gone: try these, in order
    load: int  # what this replica carries after the plan: its shards' pods, and one a shard
    share: float  # what each live replica would carry, all being even
    why: str  # a person's reading of the plan
    settled: bool = False  # every shard held and no move left to make, as this replica sees them


def plan(shards: int, me: str, live: Collection[str], held: Collection[int],
         holders: Mapping[int, str], pods: Mapping[int, int] | None = None, *, joining: bool = False,
         counting: bool = False) -> Plan:
    """What a replica does with the shards this tick.

    ``live``: the replicas whose presence Lease was renewed lately (``me``
    among them); ``held``: the shards ``me`` holds; ``holders``: every
    shard's holder as listed ("" when free); ``pods``: each shard's pods as
    its holder last wrote them on its Lease (absent: not known yet);
    ``joining``: ``me`` has just started, and takes no free shard yet (its
    peers starting with it may not be listed); ``counting``: shards' pods
    are still being counted (a release's first placement), so no shard
    moves yet on counts that are about to change.

    A shard weighs its pods plus one (so shards without pods still spread
    evenly). Every replica computes the same placement from the same LIST:
    free shards go, heaviest first, each to the replica then carrying
    least; when none is free, the most loaded replica that can lower the
    imbalance gives one shard up (the one that leaves the two closest): one
    move a tick across all replicas, so moves never cross or overshoot, and
    each makes the loads' spread strictly smaller, so they stop. Placement
    is by pods, not shard counts: guards differ in size, and placing shards
    by count put 23,000 of 40,000 pods on one of two replicas (issue 25).
    """
    replicas = sorted(set(live) | {me})
    weight = {s: 1 + min(MAX_PODS, max(0, (pods or {}).get(s, 0))) for s in range(shards)}
    load = dict.fromkeys(replicas, 0)
    owner: dict[int, str] = {}
    for s in range(shards):
        h = me if s in held else holders.get(s, "")
        if h in load and (h != me or s in held):  # one naming me that I do not hold (a give-up refused): free
            owner[s] = h
            load[h] += weight[s]
    total = sum(weight.values())
    share = total / len(replicas)
    free = sorted((s for s in range(shards) if s not in owner), key=lambda s: (-weight[s], s))
    take = []
    takers = [r for r in replicas if not (joining and r == me)]
    for s in free if takers else ():
        to = min(takers, key=lambda r: (load[r], _h(f"{r}/{s}")))
        load[to] += weight[s]
        if to == me:
            take.append(s)
    give: tuple[int, ...] = ()
    move = None if free or counting else _one_move(replicas, owner, weight, load, share)
    if move is not None and owner[move] == me:
        give = (move,)
        load[me] -= weight[move]
    keep = tuple(sorted(s for s in held if s not in give))
    why = (f"{len(replicas)} live replica(s) share {shards} shard(s) of {total - shards} pod(s), about "
           f"{share:.0f} each (pods, and one a shard): carrying {load[me]} in {len(keep) + len(take)}, "
           f"giving up {len(give)}, trying {len(take)}" + ("; joining: taking none until replicas started with "
                                                           "this one have had a Lease's duration to appear"
                                                           if joining else ""))
    return Plan(keep, give, tuple(take), load[me], share, why, settled=not free and not counting and move is None)


def _one_move(replicas: list[str], owner: Mapping[int, str], weight: Mapping[int, int],
              load: Mapping[str, int], share: float) -> int | None:
    """The one shard to move this tick, or None: from the most loaded
    replica over its share (by SLACK) whose move to the least loaded one
    narrows their gap (by SLACK of a share at least); of its shards, the
    one leaving the two closest."""
    least = min(load.values())
    for r in sorted(replicas, key=lambda r: (-load[r], r)):
        if load[r] <= share * (1 + SLACK):
            return None
        gap = load[r] - least
        fits = [s for s, h in owner.items() if h == r and gap - abs(gap - 2 * weight[s]) >= SLACK * share]
        if fits:
            return min(fits, key=lambda s: (abs(gap - 2 * weight[s]), s))
    return None


def agreed(me_shards: int, counts: Iterable[int]) -> bool:
    """Every live replica splits the work the same way: while a rolling
    update changes the shard count, two replicas could own one guard
    under two splits, so nobody acts until they agree."""
    return all(c == me_shards for c in counts)
