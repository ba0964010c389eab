"""Which replica acts on which guard: pure, no I/O, no clock.

The work is split into ``shards`` shards; a guard belongs to the shard its
``namespace/name`` hashes to, whichever replica asks. The unit is the guard,
not the pod, because a guard's budgets (one rotation per group at a time,
rotations per hour), its ledger and its status are one; pods of one guard
split over two replicas would need a lock across them for every rotation.
Many guards (one per RayCluster, say) spread over the shards evenly.

Each shard is a Lease (shards.py); each replica holds about as many as the
live replicas share: ``ceil(shards / replicas)``. A replica over that gives
shards up; one under it takes free ones, by a preference that differs from
replica to replica (rendezvous hashing), so two replicas do not race for
the same free shard first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
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


def fair_share(shards: int, replicas: int) -> int:
    """How many shards one replica may hold while ``replicas`` are live."""
    return math.ceil(shards / max(1, replicas))


@dataclasses.dataclass(frozen=True)
class Plan:
    keep: tuple[int, ...]  # held, renewed
    give: tuple[int, ...]  # held, over the fair share: drained, then given up
    take: tuple[int, ...]  # not held, free or held by a replica that is gone: try these, in order
    want: int
    why: str  # a person's reading of the plan


def plan(shards: int, me: str, live: Collection[str], held: Collection[int],
         holders: Mapping[int, str]) -> Plan:
    """What a replica does with the shards this tick.

    ``live``: the replicas whose presence Lease was renewed lately (``me``
    among them); ``held``: the shards ``me`` holds; ``holders``: every
    shard's holder as listed ("" when free).
    """
    replicas = set(live) | {me}
    want = fair_share(shards, len(replicas))
    mine = sorted(held, key=lambda s: _h(f"{me}/{s}"))  # most preferred first
    keep, give = tuple(sorted(mine[:want])), tuple(sorted(mine[want:]))
    free = [s for s in range(shards) if s not in held and holders.get(s, "") not in replicas - {me}]
    take = tuple(sorted(free, key=lambda s: _h(f"{me}/{s}"))[:max(0, want - len(keep))])
    why = (f"{len(replicas)} live replica(s) share {shards} shard(s): at most {want} each; "
           f"holding {len(keep)}, giving up {len(give)}, trying {len(take)}")
    return Plan(keep, give, take, want, why)


def agreed(me_shards: int, counts: Iterable[int]) -> bool:
    """Every live replica splits the work the same way: while a rolling
    update changes the shard count, two replicas could own one guard
    under two splits, so nobody acts until they agree."""
    return all(c == me_shards for c in counts)
