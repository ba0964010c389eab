"""Shards on Leases (shardplan.py, shards.py, leader.py): the plan on
tables; the keeper against the emulated API on clocks the test moves
(its Lease contracts are rows of tests/test_contract_table.py, run on the
real kube-apiserver too; tests/faults' ``shard-killed`` SIGKILLs a real
replica mid-rotation)."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator

import pytest

from memoryguard_kuberay.devkit.emulator.api import ApiError, EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.operator.api.credentials import Credentials
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.sharding import shardplan
from memoryguard_kuberay.operator.sharding.leader import LeaderElector, LeaseConfig
from memoryguard_kuberay.operator.sharding.shards import ANN_PODS, PLACING_FOR_LEASES, ShardConfig, ShardKeeper

S = 8
# Ticks (3 s of its clock apart) a replica takes to have joined: it takes no
# free shard for the Lease's 15 s from its first tick (shards.py).
JOIN = 6


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# -- the plan ------------------------------------------------------------------------
def test_a_guard_s_shard_is_the_same_in_every_process_and_guards_spread_over_the_shards() -> None:
    # blake2b, not Python's salted hash(): this value is the same in every process and release.
    assert shardplan.shard_of("ray", "guard-0", 8) == shardplan.shard_of("ray", "guard-0", 8)
    counts = collections.Counter(shardplan.shard_of("ns", f"guard-{i}", 8) for i in range(8000))
    assert len(counts) == 8 and max(counts.values()) < 1.1 * 1000 and min(counts.values()) > 0.9 * 1000


def test_the_plan_gives_one_shard_a_tick_and_takes_only_what_no_live_replica_holds() -> None:
    # a alone held all 8; b has come: a gives one up (one move a tick across all replicas).
    p = shardplan.plan(8, "a", {"a", "b"}, set(range(8)), dict.fromkeys(range(8), "a"))
    assert (len(p.keep), len(p.give), p.take) == (7, 1, ())
    assert "2 live replica(s) share 8 shard(s)" in p.why
    # b sees shards 0-3 free, 4-7 held by a (live): it takes the free ones (a carries more).
    holders = {**dict.fromkeys(range(4), ""), **dict.fromkeys(range(4, 8), "a")}
    p = shardplan.plan(8, "b", {"a", "b"}, set(), holders)
    assert sorted(p.take) == [0, 1, 2, 3]
    # c is dead (not live): its shard is a candidate, a live replica's is not.
    p = shardplan.plan(2, "b", {"a", "b"}, set(), {0: "c", 1: "a"})
    assert p.take == (0,)


def test_a_joining_replica_takes_no_free_shard_and_leaves_them_to_the_others() -> None:
    # Alone: every free shard is its own; just started, none (a peer started with it may not be listed yet).
    p = shardplan.plan(8, "a", {"a"}, set(), {})
    assert len(p.take) == 8 and "joining" not in p.why
    p = shardplan.plan(8, "a", {"a"}, set(), {}, joining=True)
    assert (p.keep, p.give, p.take, p.load) == ((), (), (), 0) and "joining" in p.why
    # A joined peer sees the joining one live: it takes its own half, not the joining one's.
    p = shardplan.plan(8, "b", {"a", "b"}, set(), {})
    assert len(p.take) == 4
    # Once joined, the one that waited takes the other half: the two plans meet.
    q = shardplan.plan(8, "a", {"a", "b"}, set(), dict.fromkeys(p.take, "b"))
    assert sorted(q.take + p.take) == list(range(8))


def test_while_pods_are_being_counted_no_shard_moves_and_the_placement_is_not_settled() -> None:
    # a holds all 8 and b none: a would give one up, but not on counts still coming in.
    p = shardplan.plan(8, "a", {"a", "b"}, set(range(8)), dict.fromkeys(range(8), "a"), counting=True)
    assert (p.give, p.settled) == ((), False)
    p = shardplan.plan(8, "a", {"a", "b"}, set(range(8)), dict.fromkeys(range(8), "a"))
    assert (len(p.give), p.settled) == (1, False)
    held = {s: ("a" if s < 4 else "b") for s in range(8)}
    assert shardplan.plan(8, "a", {"a", "b"}, set(range(4)), held).settled


def test_shards_are_placed_by_their_pods_not_their_count() -> None:
    # Shard 0 has 9,000 pods, shards 1-7 1,000 each: a holds 0 and b 1-7 (7,000 + 7);
    # split by count (4 and 4) a would carry 12,000 and b 4,000.
    pods = {0: 9000, **dict.fromkeys(range(1, 8), 1000)}
    free = dict.fromkeys(range(8), "")
    placed = {r: set(shardplan.plan(8, r, {"a", "b"}, set(), free, pods).take) for r in ("a", "b")}
    assert placed["a"] | placed["b"] == set(range(8)) and not placed["a"] & placed["b"]
    heavy = "a" if 0 in placed["a"] else "b"
    assert placed[heavy] == {0}, placed
    # Held that way, nobody moves: the gap (2,000) cannot be narrowed by a 1,000-pod shard.
    holders = {s: ("a" if s in placed["a"] else "b") for s in range(8)}
    for r in ("a", "b"):
        p = shardplan.plan(8, r, {"a", "b"}, placed[r], holders, pods)
        assert p.give == () and p.take == (), p.why


def tick_all(shards: int, replicas: list[str], pods: dict[int, int], holder: dict[int, str]) -> int:
    """Every replica plans on the same table in turn and does what it planned; the moves."""
    moves = 0
    for r in replicas:
        held = {s for s, h in holder.items() if h == r}
        p = shardplan.plan(shards, r, replicas, held, {s: holder.get(s, "") for s in range(shards)}, pods)
        assert set(p.give) <= held and not set(p.take) & held
        for s in p.give:
            del holder[s]
            moves += 1
        for s in p.take:
            holder.setdefault(s, r)
    return moves


@pytest.mark.parametrize(("shards", "replicas", "want"), [(8, 1, [8]), (8, 2, [4, 4]), (8, 3, [2, 3, 3]),
                                                      (8, 9, [0, 1, 1, 1, 1, 1, 1, 1, 1]), (1, 2, [0, 1])])
def test_with_no_pods_known_every_shard_weighs_the_same_and_counts_even_out(shards: int, replicas: int,
                                                                          want: list[int]) -> None:
    names = [f"r{i}" for i in range(replicas)]
    holder = dict.fromkeys(range(shards), "r0")  # the first replica alone held them all
    for _ in range(3 * shards):
        tick_all(shards, names, {}, holder)
    assert sorted(collections.Counter({r: 0 for r in names} | collections.Counter(holder.values())).values()) == want


@pytest.mark.parametrize("seed", range(12))
def test_placement_settles_every_shard_held_and_loads_within_a_shard_of_the_share(seed: int) -> None:
    import random

    rng = random.Random(seed)
    shards, replicas = rng.choice([4, 8, 16, 32]), [f"r{i}" for i in range(rng.randint(1, 6))]
    pods = {s: rng.choice([0, 100, 500, 2500, 9000]) * rng.randint(0, 3) for s in range(shards)}
    # Start from shards held by a few of them (a replica added, or the others just died).
    holder = {s: rng.choice(replicas[:2]) for s in range(shards) if rng.random() < 0.7}
    for _ in range(3 * shards):
        tick_all(shards, replicas, pods, holder)
    assert set(holder) == set(range(shards))
    for _ in range(10):
        assert tick_all(shards, replicas, pods, holder) == 0, "placement keeps moving shards"
    load = collections.Counter({r: 0 for r in replicas})
    for s, r in holder.items():
        load[r] += 1 + pods[s]
    share = sum(load.values()) / len(replicas)
    heaviest = 1 + max(pods.values())
    assert max(load.values()) <= max(share * (1 + shardplan.SLACK), min(load.values()) + heaviest), (load, pods)


def test_replicas_that_split_the_work_differently_do_not_act() -> None:
    assert shardplan.agreed(8, [8, 8])
    assert not shardplan.agreed(8, [8, 16])


def test_a_presence_lease_name_is_a_dns_name_whatever_the_identity() -> None:
    assert shardplan.replica_lease("mg", "Host_1.example-42") == "mg-replica-host-1-example-42"
    assert len(shardplan.replica_lease("mg", "x" * 400)) <= 253


# -- the keeper, against the emulated API ----------------------------------------------
@pytest.fixture
async def kube() -> AsyncIterator[tuple[EmulatedApi, Kube]]:
    api = EmulatedApi()
    async with api, EmulatorServer(api) as server:
        k = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            yield api, k
        finally:
            await k.close()


def keeper(k: Kube, identity: str, clock: Clock, shards: int = S) -> ShardKeeper:
    return ShardKeeper(k, ShardConfig("default", "mg", identity, shards), clock=clock)


def a_guard_per_shard(kp: ShardKeeper) -> dict[int, str]:
    """A guard's name in each shard (in namespace "ns")."""
    guards = {kp.shard("ns", f"g{i}"): f"g{i}" for i in range(200)}
    assert set(guards) == set(range(kp.shards))
    return guards


def owned(kp: ShardKeeper) -> set[int]:
    return {s for s in range(kp.shards) if kp.owns(s)}


async def settle(*keepers: tuple[ShardKeeper, Clock], ticks: int = 6) -> None:
    """Tick every keeper in turn, 3 s of each clock apart; after every tick
    no shard is owned by two of them."""
    for _ in range(ticks):
        for kp, clock in keepers:
            clock.t += 3
            await kp.tick()
            for _ in range(3):  # let a give-up task run
                await _yield()
            mine = [owned(k) for k, _ in keepers]
            assert sum(len(m) for m in mine) == len(set().union(*mine)), f"a shard owned twice: {mine}"


async def _yield() -> None:
    import asyncio

    await asyncio.sleep(0.01)


async def test_one_replica_holds_every_shard_and_a_second_takes_half_without_any_shard_owned_twice(kube) -> None:
    _api, k = kube
    ca, cb = Clock(), Clock()
    a = keeper(k, "a", ca)
    await settle((a, ca), ticks=JOIN)
    assert owned(a) == set(range(S))
    b = keeper(k, "b", cb)
    await settle((a, ca), (b, cb), ticks=JOIN + S // 2 + 1)
    assert len(owned(a)) == len(owned(b)) == S // 2 and owned(a) | owned(b) == set(range(S))
    # b taking a shard bumped its term: a guard's memory from before the take is not reused.
    assert all(b.terms[s] == 1 for s in owned(b))


async def test_replicas_started_together_never_hold_more_than_their_share_while_they_appear(kube) -> None:
    """Issue 25's bench: two replicas started at once; the first to list saw
    no peer and took every shard (and polled every pod) before giving half
    away. Joining, each waits a Lease's duration before taking."""
    _api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca), keeper(k, "b", cb)
    most = 0
    for _ in range(JOIN + 2):
        await settle((a, ca), (b, cb), ticks=1)
        most = max(most, len(a.held), len(b.held))
    assert most == S // 2, most
    assert len(owned(a)) == len(owned(b)) == S // 2 and owned(a) | owned(b) == set(range(S))


async def test_a_dead_replica_s_shards_are_taken_only_after_its_leases_ran_out(kube) -> None:
    _api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca), keeper(k, "b", cb)
    await settle((a, ca), (b, cb))
    of_a = owned(a)
    # a dies: no more ticks. b goes on; within the 15 s duration (as b saw it) it takes nothing.
    for _ in range(4):
        cb.t += 3
        await b.tick()
        assert not owned(b) & of_a
    for _ in range(3):
        cb.t += 3
        await b.tick()
    assert owned(b) == set(range(S))
    # a, back from a pause, cannot renew what b took, and stops owning it.
    ca.t += 30
    await a.tick()
    assert not owned(a) & owned(b)


async def test_a_replica_that_cannot_renew_stops_acting_before_the_lease_runs_out(kube) -> None:
    api, k = kube
    clock = Clock()
    a = keeper(k, "a", clock)
    await settle((a, clock), ticks=JOIN)
    assert owned(a) == set(range(S))
    api.faults.append(lambda _r: ApiError(503, "ServiceUnavailable", "down"))
    clock.t += 9
    assert owned(a) == set(range(S))  # renewed 9 s ago: within the 10 s deadline
    clock.t += 2
    assert owned(a) == set()  # 11 s: stopped, 4 s before anyone else may take over


async def test_a_shard_is_given_up_only_once_no_cycle_of_its_guards_is_in_flight(kube) -> None:
    _api, k = kube
    ca, cb = Clock(), Clock()
    a = keeper(k, "a", ca)
    await settle((a, ca), ticks=JOIN)
    guards = a_guard_per_shard(a)
    b = keeper(k, "b", cb)
    await settle((b, cb), ticks=1)  # b is seen alive; it takes nothing yet: every shard is a's
    busy = {s: guards[s] for s in range(S)}
    cms = [a.acting("ns", g) for g in busy.values()]
    for cm in cms:
        cm.__enter__()  # a cycle of a guard of every shard in flight
    ca.t += 3
    await a.tick()
    await _yield()
    giving = set(a.giving)
    assert len(giving) == 1 and not owned(a) & giving  # not acting on it any more...
    assert a.held >= giving  # ... but still holding them
    for cm in cms:
        cm.__exit__(None, None, None)
    for _ in range(20):
        await _yield()
        if not a.giving:
            break
    assert not a.held & giving
    await settle((a, ca), (b, cb), ticks=JOIN)
    assert giving <= owned(b)


async def test_while_replicas_disagree_on_the_shard_count_none_acts(kube) -> None:
    _api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca, shards=8), keeper(k, "b", cb, shards=16)
    await settle((a, ca), (b, cb), ticks=2)
    assert owned(a) == set() and owned(b) == set()


async def test_a_clean_exit_hands_every_shard_over_at_once(kube) -> None:
    api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca), keeper(k, "b", cb)
    await settle((a, ca), (b, cb))
    await a.close()
    assert api.get("leases", "default", shardplan.replica_lease("mg", "a")) is None
    await settle((b, cb), ticks=1)
    assert owned(b) == set(range(S))


async def test_the_last_replica_s_clean_exit_leaves_no_lease_of_the_release(kube) -> None:
    """helm uninstall (with or without its hooks) or a scale to 0: nothing of
    the release stays behind; a replica still alive keeps every Lease."""
    api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca), keeper(k, "b", cb)
    await settle((a, ca), (b, cb))
    shard_leases = {shardplan.shard_lease("mg", s) for s in range(S)}
    await a.close()  # b is alive: the shards a gave up stay, for b to take
    assert {n for n in shard_leases if api.get("leases", "default", n) is not None} == shard_leases
    await settle((b, cb), ticks=2)
    await b.close()
    left = [o["metadata"]["name"] for o in api.objects("leases", "default")]
    assert left == [], left


async def test_the_release_s_service_account_owns_every_lease(kube) -> None:
    """helm uninstall deletes the ServiceAccount after the operator's RBAC
    (so a replica's own clean-up is refused by then); the garbage collector
    deletes what the ServiceAccount owns."""
    api, k = kube
    ca = Clock()
    kp = ShardKeeper(k, ShardConfig("default", "mg", "a", S, owner=("mg-memoryguard", "uid-1")), clock=ca)
    await settle((kp, ca), ticks=JOIN)
    leases = api.objects("leases", "default")
    assert len(leases) == S + 1  # the shards and the replica's presence
    assert all(o["metadata"].get("ownerReferences") == [{"apiVersion": "v1", "kind": "ServiceAccount",
                                                           "name": "mg-memoryguard", "uid": "uid-1"}] for o in leases)


async def test_the_last_replica_deletes_a_free_lease_only_as_it_read_it(kube) -> None:
    """A Lease written between the last replica's read and its delete (a new
    replica taking it) is not deleted: the delete is conditional (409)."""
    api, k = kube
    ca = Clock()
    a = keeper(k, "a", ca)
    await settle((a, ca), ticks=JOIN)
    await a.close()  # alone: every free shard Lease deleted
    assert all(api.get("leases", "default", shardplan.shard_lease("mg", s)) is None for s in range(S))
    await settle((a, ca), ticks=JOIN)
    name = shardplan.shard_lease("mg", 0)
    read = api.get("leases", "default", name)
    assert read is not None
    taken = {**read, "spec": {**read["spec"], "holderIdentity": "c"}}
    api.put("leases", taken)  # another replica's take, after our read
    with pytest.raises(Exception, match="409"):
        await k.delete_lease("default", name, resource_version=read["metadata"]["resourceVersion"])
    assert (api.get("leases", "default", name) or {}).get("spec", {}).get("holderIdentity") == "c"


async def test_one_lease_one_holder_and_a_takeover_only_after_it_ran_out(kube) -> None:
    api, k = kube
    clock_a, clock_b = Clock(), Clock()
    a = LeaderElector(k, LeaseConfig("default", "l", "a"), clock=clock_a)
    b = LeaderElector(k, LeaseConfig("default", "l", "b"), clock=clock_b)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock_a.t += 10
    clock_b.t += 10
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b saw the record change: it waits on
    clock_b.t += 14
    assert not await b.try_acquire_or_renew()
    clock_b.t += 2
    assert await b.try_acquire_or_renew()
    lease = api.get("leases", "default", "l")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert not await a.try_acquire_or_renew()
    await b.release()
    assert await a.try_acquire_or_renew()


async def test_a_shard_held_again_after_another_replica_held_it_has_a_new_term(kube) -> None:
    """a lapses past the Lease's duration; b takes the shard and gives it up;
    a's next renewal takes it back: that is a take, not a renewal, so its
    guards' memory from before is dropped (the term moves on)."""
    _api, k = kube
    ca, cb = Clock(), Clock()
    a = keeper(k, "a", ca, shards=1)
    await settle((a, ca), ticks=JOIN)
    term = a.terms[0]
    b = keeper(k, "b", cb, shards=1)
    cb.t += 1
    await b.tick()  # sees a alive and the shard a's
    cb.t += 20  # a silent for 20 s as b saw it: b takes the shard
    await b.tick()
    assert b.held == {0}
    await b.close()  # and gives it up
    ca.t += 3
    await a.tick()
    assert a.held == {0} and a.terms[0] == term + 1


async def test_a_shard_whose_give_up_the_api_refused_is_taken_once_its_lease_runs_out(kube) -> None:
    """Seen in the 10,000-pod bench: the give-up's PUT answered 409 (the
    giver's own renewal had written the Lease in between); the Lease kept
    naming a live replica, so no other ever took it and its guards went
    unguarded. Now the give-up reads again and retries; and a Lease that
    ran out is free whoever it names."""
    api, k = kube
    ca, cb = Clock(), Clock()
    a = keeper(k, "a", ca)
    await settle((a, ca), ticks=JOIN)
    b = keeper(k, "b", cb)
    await settle((b, cb), ticks=1)  # b is seen alive; every shard is still a's
    refused: list[str] = []

    def refuse_give_ups(request: object) -> ApiError | None:
        method = str(getattr(request, "method", "")).upper()
        data = getattr(request, "data", None) or {}
        if "PUT" in method and isinstance(data, dict) and (data.get("spec") or {}).get("holderIdentity") == "":
            refused.append(str(getattr(request, "name", "")))
            return ApiError(409, "Conflict", "the object has been modified")
        return None

    api.faults.append(refuse_give_ups)
    ca.t += 3
    await a.tick()
    for _ in range(20):
        await _yield()
        if not a.giving:
            break
    api.faults.remove(refuse_give_ups)
    given = set(range(S)) - a.held
    assert len(given) == 1 and len(refused) == 3  # three tries, all refused
    for s in given:  # the Leases still name a, a live replica
        lease = api.get("leases", "default", shardplan.shard_lease("mg", s))
        assert lease["spec"]["holderIdentity"] == "a"
    await settle((a, ca), (b, cb), ticks=8)  # 24 s of each clock: past the 15 s duration
    assert given <= owned(b) and owned(a) | owned(b) == set(range(S))


async def test_a_give_up_that_races_a_renewal_reads_again_and_succeeds(kube) -> None:
    api, k = kube
    clock = Clock()
    a = keeper(k, "a", clock, shards=1)
    await settle((a, clock), ticks=JOIN)
    conflicts = [1]

    def once(request: object) -> ApiError | None:
        if "PUT" in str(getattr(request, "method", "")).upper() and conflicts:
            conflicts.pop()
            return ApiError(409, "Conflict", "the object has been modified")
        return None

    api.faults.append(once)
    assert await a.electors[0].release()
    assert not conflicts  # the first PUT was refused, the second went through
    assert api.get("leases", "default", shardplan.shard_lease("mg", 0))["spec"]["holderIdentity"] == ""


async def test_the_holder_writes_its_shards_pods_on_their_leases_and_replicas_split_the_pods(kube) -> None:
    api, k = kube
    ca, cb = Clock(), Clock()
    a = keeper(k, "a", ca)
    await settle((a, ca), ticks=JOIN)
    guards = a_guard_per_shard(a)
    sizes = {s: (7000 if s == 0 else 1000) for s in range(S)}  # one guard of 7,000 pods, seven of 1,000
    for s, g in guards.items():
        a.weigh("ns", g, sizes[s])
    await settle((a, ca), ticks=JOIN)
    lease = api.get("leases", "default", shardplan.shard_lease("mg", 0))
    assert lease is not None and lease["metadata"]["annotations"]["memoryguard.io/pods"] == "7000"
    b = keeper(k, "b", cb)

    def cycle() -> None:  # each replica's guards count their pods, as their cycles do
        for kp in (a, b):
            for s, g in guards.items():
                kp.weigh("ns", g, sizes[s] if s in kp.held else None)

    for _ in range(JOIN + 12):
        await settle((a, ca), (b, cb), ticks=1)
        cycle()
    carried = {name: sum(sizes[s] for s in owned(kp)) for name, kp in (("a", a), ("b", b))}
    assert owned(a) | owned(b) == set(range(S)) and not owned(a) & owned(b)
    assert sorted(carried.values()) == [7000, 7000], carried  # by count (4 and 4) it would be 4,000 and 10,000


async def test_a_release_s_first_placement_counts_before_anything_is_polled_and_ends_once_placed(kube) -> None:
    """No shard Lease says its pods: the guards count (weigh) and poll
    nothing (``placing``) until every shard carries a count and no move is
    left; a shard without guards counts 0; a replica started later, when
    the Leases carry counts, never waits so."""
    api, k = kube
    ca, cb = Clock(), Clock()
    a, b = keeper(k, "a", ca), keeper(k, "b", cb)
    guards = a_guard_per_shard(a)
    sizes = {s: (3000 if s < 2 else 100) for s in guards}  # two big shards, six small
    empty = 7  # a shard whose guard is gone: held, counted 0
    for kp in (a, b):
        for s, g in guards.items():
            if s != empty:
                kp.enlist("ns", g)
    await settle((a, ca), (b, cb), ticks=1)
    assert a.placing() and b.placing()

    def count() -> None:  # each replica's guards of the shards it holds count their pods, as cycles do
        for kp in (a, b):
            for s, g in guards.items():
                if s != empty:
                    kp.weigh("ns", g, sizes[s] if s in kp.held else None)

    ticks = 0
    while a.placing() or b.placing():
        ticks += 1
        assert ticks < 12, "the first placement never settled"
        count()
        await settle((a, ca), (b, cb), ticks=1)
    counts = {int(lease["metadata"]["name"].rsplit("-", 1)[1]): lease["metadata"]["annotations"][ANN_PODS]
              for lease in api.objects("leases", "default") if "-shard-" in lease["metadata"]["name"]}
    assert counts[empty] == "0" and len(counts) == S
    carried = sorted(sum(sizes[s] for s in kp.held if s != empty) for kp in (a, b))
    assert carried[1] - carried[0] <= 200, carried  # by pods (by count alone both big shards could sit together)
    # A third replica, started now, finds the counts: nothing to wait for.
    cc = Clock()
    c = keeper(k, "c", cc)
    await settle((c, cc), ticks=1)
    assert not c.placing()


async def test_the_first_placement_waits_at_most_its_bound(kube) -> None:
    _api, k = kube
    clock = Clock()
    a = keeper(k, "a", clock)
    a.enlist("ns", "never-counts")  # a guard whose cycle never counts (say, stuck waiting for its pods)
    await settle((a, clock), ticks=1)
    assert a.placing()
    bound = PLACING_FOR_LEASES * a.cfg.lease_s
    clock.t += bound - 0.5  # the bound counts from the first tick (settle moved the clock to it)
    assert a.placing()
    clock.t += 1
    assert not a.placing()  # polls go on even though a tick is late
    await settle((a, clock), ticks=1)
    assert a.placing_until is None


def test_a_held_shard_s_pods_are_known_once_every_guard_of_it_counted() -> None:
    kp = ShardKeeper(None, ShardConfig("default", "mg", "a", 1))  # type: ignore[arg-type]
    kp.held = {0}
    assert kp.pods_of(0) == 0  # no guard: nothing to count
    kp.enlist("ns", "g1")
    kp.enlist("ns", "g2")
    kp.weigh("ns", "g1", 40)
    assert kp.pods_of(0) is None  # g2 not yet
    kp.weigh("ns", "g2", 2)
    assert kp.pods_of(0) == 42
    kp.delist("ns", "g2")
    assert kp.pods_of(0) == 40
    kp.held = set()
    assert kp.pods_of(0) is None
