"""The fault matrix: one leaking worker (sometimes two) among healthy ones,
the real operator and real sidecar processes on the emulated API, and one
kind of fault per scenario. A Referee (tests/emulator/referee.py) counts
breaches of the guard's rules from the API's side; each scenario also says
what outcome it expects once the fault is over.

Fast variant for ``make test``: 600x clock, pods start with 20,000 s of a
leak already lived (so the policy is a few real seconds from acting), and
every fault lasts seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kmock

from memoryguard_kuberay.devkit.emulator.api import ApiError
from memoryguard_kuberay.devkit.emulator.referee import PHASE, Referee
from memoryguard_kuberay.devkit.emulator.sidecar_faults import Mode
from memoryguard_kuberay.devkit.emulator.world import World
from memoryguard_kuberay.operator.sharding import shardplan
from memoryguard_kuberay.operator.status import pods_listed

from ..devworld import world
from ..operator.conftest import HEALTHY, by_worker_index, guard, leaking_pods, no_disruption, start_cluster

LIVED_S = 20000.0  # leak_steady OOMs at 28,905 s; the policy acts about 2 h before
STALE_AFTER_S = 1800.0
Act = Callable[[World, random.Random], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Scenario:
    id: str
    fault: str  # the matrix row: what goes wrong
    act: Act  # injects the fault while the operator runs, then clears it
    rotated: int = 1  # WorkerRotated expected once the fault is over
    failed: int = 0  # WorkerRotationFailed expected
    leaking: frozenset[int] = frozenset({0})
    workers: int = 3
    guard_spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    replace_delay_s: float | None = 0.3
    operator_env: dict[str, str] = dataclasses.field(default_factory=dict)
    expect: str = "the leaking worker rotated once the fault cleared"
    shards: int = 0  # the operator runs as one of several replicas sharing this many shards (Leases)
    # The world's clock (trace seconds a real second) and how far into their
    # trace the first workers start: replicas on shards poll only once they
    # have joined and placed the shards (20-30 real s, shards.py), hours of
    # trace at the default speed, by when the leak would have OOMed unseen.
    speed: float = 600.0
    lived_s: float = LIVED_S


@dataclasses.dataclass
class Result:
    scenario: Scenario
    figures: dict[str, Any]
    violations: list[str]
    seconds: float
    ok: bool
    problem: str = ""
    detail: str = ""  # on a failure: what the guard's status said and the operator's log, for CI's output


async def play(workdir: Path, sc: Scenario, *, seed: int = 7) -> Result:
    t0 = time.monotonic()
    rng = random.Random(seed)
    trace_for = by_worker_index(sc.leaking, lived_s=sc.lived_s, workers=sc.workers)
    async with world(workdir, trace_for, proxied=True, replace_delay_s=sc.replace_delay_s, speed=sc.speed) as w:
        spec = {"policy": {"staleAfterSeconds": int(STALE_AFTER_S)}, **sc.guard_spec}
        max_unavailable = int(spec.get("rotation", {}).get("maxUnavailable", 1))
        ref = Referee(w.api, clock=w.clock, max_unavailable=max_unavailable, stale_after_s=STALE_AFTER_S,
                      last_good=lambda n: w.proxies[n].last_good if n in w.proxies else None).attach()
        await start_cluster(w, sc.workers)
        ref.leaking = set(leaking_pods(w))
        w.api.put("memoryguards", guard(**spec))
        await w.start_operator(extra_env=sc.operator_env, shards=sc.shards)
        problem = ""
        try:
            await sc.act(w, rng)
            w.api.faults.clear()
            for proxy in w.proxies.values():
                await proxy.set_mode(Mode.OK)
            await w.wait_for(lambda: settled(w, sc), 60, f"{sc.rotated} rotated and {sc.failed} failed")
        except AssertionError as e:
            problem = str(e).splitlines()[0]
        figures = ref.finish()
        figures.update(w.notes)
        figures["rss_peak_mib"] = max((peak_rss_mib(op.pid) for op in w.operators if op.returncode is None),
                                      default=0.0)
        ok = not problem and not ref.violations and figures["false"] == 0 and (
            figures["rotated"], figures["failed"]) == (sc.rotated, sc.failed)
        if not ok and not problem:
            problem = (f"expected rotated {sc.rotated} failed {sc.failed}, got rotated {figures['rotated']} "
                       f"failed {figures['failed']} false {figures['false']}")
        detail = "" if ok else (f"--- the guard's status.pods ---\n{json.dumps(w.guard_status().get('pods'))[:4000]}\n"
                                f"--- operator log ---\n{w.operator_log()[-8000:]}")
        return Result(sc, figures, list(ref.violations), time.monotonic() - t0, ok, problem, detail)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MiB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def settled(w: World, sc: Scenario) -> bool:
    rotated, failed = len(w.events("WorkerRotated")), len(w.events("WorkerRotationFailed"))
    inflight = (w.guard_status().get("rotations") or {}).get("inFlight") or []
    return rotated >= sc.rotated and failed >= sc.failed and not inflight


# -- fault helpers ------------------------------------------------------------------
def _method(r: kmock.Request) -> str:
    return str(r.method.value).upper()


def _is_watch(r: kmock.Request) -> bool:
    return r.params.get("watch") in ("true", "1")


def api_fault(rng: random.Random, p: float, make: Callable[[], ApiError],
              when: Callable[[kmock.Request], bool] = lambda r: True) -> Callable[[kmock.Request], ApiError | None]:
    return lambda r: make() if when(r) and rng.random() < p else None


async def for_a_while(w: World, seconds: float) -> None:
    """Let the faulty world run (the operator meanwhile does what it does)."""
    await asyncio.sleep(seconds)


def phase_of(w: World, pod: str) -> str | None:
    return ((w.api.get("pods", "default", pod) or {}).get("metadata", {}).get("annotations") or {}).get(PHASE)


def leaking_pod(w: World) -> str:
    return leaking_pods(w)[0]


def a_healthy_worker(w: World) -> str:
    return next(n for n in w.kuberay.created if n in w.sidecars and w.sidecars[n].trace in HEALTHY
                and "-head-" not in n)


# -- the scenarios ---------------------------------------------------------------------
async def no_fault(w: World, rng: random.Random) -> None:
    return None


async def api_409(w: World, rng: random.Random) -> None:
    w.api.faults.append(api_fault(rng, 0.3, lambda: ApiError(
        409, "Conflict", "the object has been modified; please apply your changes to the latest version"),
        lambda r: _method(r) == "PATCH"))
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction despite conflicts")


async def api_429(w: World, rng: random.Random) -> None:
    w.api.faults.append(api_fault(rng, 0.25, lambda: ApiError(429, "TooManyRequests", "Too many requests")))
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction despite 429s")


async def api_5xx(w: World, rng: random.Random) -> None:
    w.api.faults.append(api_fault(rng, 0.25, lambda: rng.choice([
        ApiError(500, "InternalError", "etcdserver: request timed out"),
        ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")])))
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction despite 5xx")


async def api_slow(w: World, rng: random.Random) -> None:
    w.api.faults.append(lambda r: rng.uniform(0.1, 0.8))
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction despite slow answers")


async def watch_drops_and_410(w: World, rng: random.Random) -> None:
    def expire_soon(r: kmock.Request) -> None:
        # The resourceVersion a list returns is compacted away right after:
        # the watch that follows from it gets 410 Gone and must re-list.
        if _method(r) == "GET" and r.name is None and not _is_watch(r):
            asyncio.get_running_loop().call_later(0.05, w.api.expire_history)

    w.api.faults.append(expire_soon)
    deadline = time.monotonic() + 60
    while not w.api.evictions and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        w.api.drop_watches()
        w.api.expire_history()
    assert w.api.evictions, "no eviction while watches dropped"
    # After all that the guard still sees its spec change (kopf re-listed and
    # re-watched): the new generation reaches status.observedGeneration.
    w.api.faults.clear()
    g = w.api.get("memoryguards", "default", "leak-guard")
    assert g is not None
    g["spec"]["rotation"]["cooldownSeconds"] = 900
    generation = w.api.put("memoryguards", g)["metadata"]["generation"]
    await w.wait_for(lambda: w.guard_status().get("observedGeneration") == generation, 30,
                     "the changed spec seen after the watch faults")


def sidecar_act(mode: Mode, seconds: float, *, only_leaking: bool = False) -> Act:
    async def act(w: World, rng: random.Random) -> None:
        targets = [leaking_pod(w)] if only_leaking else list(w.proxies)
        for name in targets:
            await w.proxies[name].set_mode(mode)
        await for_a_while(w, seconds)
        assert not w.api.evictions, f"a pod was evicted while its sidecar was {mode.value}"
    return act


async def hostile_sidecars(w: World, rng: random.Random) -> None:
    """Every hostile answer at once, one kind per pod, leaking pod included;
    the operator stays up, small and on time for the others."""
    modes = [Mode.FLOOD, Mode.BACKDATED, Mode.DEEP, Mode.DRIP]
    for i, name in enumerate(sorted(w.proxies)):
        await w.proxies[name].set_mode(modes[i % len(modes)])
    await for_a_while(w, 8)
    assert not w.api.evictions, "a pod was evicted on hostile answers"
    assert all(op.returncode is None for op in w.operators), "the operator died"
    status = w.guard_status()
    errors = " ".join(str(p.get("sidecarError", "")) for p in pods_listed(status).values())
    assert "too large" in errors or "not JSON" in errors or "at most" in errors, errors


async def odd_answers_beside_a_leak(w: World, rng: random.Random) -> None:
    """Every pod but the leaking one answers shapes a parser may not expect
    (issue 23: they raised, and the guard's whole cycle failed every cycle):
    the leaking worker is rotated on time all the same, and an odd pod's
    verdict says its answer was bad."""
    leak = leaking_pod(w)
    odd = [n for n in w.proxies if n != leak]
    for name in odd:
        await w.proxies[name].set_mode(Mode.ODD)
    await w.wait_for(lambda: w.api.evictions, 60, "the leaking pod's eviction beside odd answers")
    assert [e[1] for e in w.api.evictions] == [leak], w.api.evictions
    # One shape in four (a huge value in a field) still carries a usable
    # sample, so the failure is seen, not held; the verdict stays the one the
    # pod's last samples gave until they are stale.
    await w.wait_for(lambda: any((pods_listed(w.guard_status()).get(n) or {}).get("pollFailure") ==
                                 "BadAnswer" for n in odd), 30, "pollFailure BadAnswer on an odd pod")
    for name in odd:
        await w.proxies[name].set_mode(Mode.OK)


async def sidecar_skewed(w: World, rng: random.Random) -> None:
    for proxy in w.proxies.values():
        await proxy.set_mode(Mode.SKEWED)
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction on the good samples among skewed ones")


async def sidecar_behind(w: World, rng: random.Random) -> None:
    leak = leaking_pod(w)
    await w.proxies[leak].set_mode(Mode.BEHIND)
    # Past the trace's OOM: a guard acting on the stale stamps would have rotated it.
    await for_a_while(w, 16)
    assert not w.api.evictions, "rotated on samples a day old"
    pods = pods_listed(w.guard_status())
    said = json.dumps(pods.get(leak) or {})
    assert "old" in said or "stale" in said.lower(), f"the status does not say the samples are stale: {said}"


async def ip_taken_over(w: World, rng: random.Random) -> None:
    """A healthy pod's IP now leads to the leaking pod's sidecar (an IP
    reused): the leak must not be pinned on the healthy pod."""
    leak = leaking_pod(w)
    healthy = a_healthy_worker(w)
    pod = w.api.get("pods", "default", healthy)
    leak_ip = (w.api.get("pods", "default", leak) or {})["status"]["podIP"]
    assert pod is not None
    pod["status"]["podIP"] = leak_ip
    w.api.put("pods", pod)
    await w.wait_for(lambda: w.api.evictions, 60, "the leaking pod's eviction")
    await for_a_while(w, 2)
    assert [e[1] for e in w.api.evictions] == [leak], w.api.evictions


def killed_at(phase: str) -> Act:
    """SIGKILL the operator while the leaking pod's rotation is at ``phase``
    (held there by a fault), then start a new one."""
    async def act(w: World, rng: random.Random) -> None:
        leak = leaking_pod(w)
        if phase == "draining":  # after annotating: the next annotation and the status write fail
            w.api.faults.append(lambda r: ApiError(503, "ServiceUnavailable", "held") if _method(r) == "PATCH" and (
                r.subresource == "status" or "evicting" in json.dumps(r.data or {})) else None)
        elif phase == "evicting":  # after draining: evictions fail
            w.api.faults.append(lambda r: ApiError(503, "ServiceUnavailable", "held")
                                if r.subresource == "eviction" else None)
        else:  # after evicting: KubeRay takes its time
            w.kuberay.replace_delay_s = 4.0
        if phase == "replacing":
            await w.wait_for(lambda: w.api.evictions, 60, "the eviction")
        else:
            await w.wait_for(lambda: phase_of(w, leak) == phase, 60, f"the {phase} phase")
            await asyncio.sleep(1.0)  # a few cycles held at this step
        await w.stop_operator(w.operators[-1], kill=True)
        w.api.faults.clear()
        await w.start_operator()
        await w.wait_for(lambda: w.events("WorkerRotated"), 60, "the resumed rotation")
        started = w.events("WorkerRotationStarted")
        assert len(started) == 1, f"{len(started)} WorkerRotationStarted: started again instead of resumed"
    return act


TAKEOVER_S = 30.0
SHARDS = 4


def _holder(w: World, guard: str = "leak-guard") -> str:
    """Who holds the shard of ``guard`` (in default), as its Lease says."""
    lease_name = shardplan.shard_lease("memoryguard-operator", shardplan.shard_of("default", guard, SHARDS))
    lease = w.api.get("leases", "default", lease_name) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def shard_killed(w: World, rng: random.Random) -> None:
    """Two replicas sharing the shards; the one holding the leaking guard's
    shard is SIGKILLed while the leaking pod's rotation is held at the
    eviction; the other must take the shard over within TAKEOVER_S and
    finish that rotation, never evicting twice."""
    await w.start_operator(shards=SHARDS)  # the second replica: the two reshard between them
    await w.wait_for(lambda: _holder(w), 30, "a replica holding the guard's shard")
    leak = leaking_pod(w)
    w.api.faults.append(lambda r: ApiError(503, "ServiceUnavailable", "held") if r.subresource == "eviction" else None)
    await w.wait_for(lambda: phase_of(w, leak) == "evicting", 60, "the evicting phase")
    await asyncio.sleep(1.0)  # a few cycles held at this step
    # Held by one of the two (not between a give and a take, while they reshard).
    active = await w.wait_for(lambda: next((op for op in w.operators if _holder(w).endswith(f"-{op.pid}")), None),
                              30, "the guard's shard held by one replica")
    other = next(op for op in w.operators if op is not active)
    killed = time.monotonic()
    await w.stop_operator(active, kill=True)
    w.api.faults.clear()
    await w.wait_for(lambda: _holder(w).endswith(f"-{other.pid}"), TAKEOVER_S + 10, "the other replica holding it")
    took = time.monotonic() - killed
    w.notes["takeover_s"] = round(took, 1)
    assert took <= TAKEOVER_S, f"the other replica took the shard over after {took:.1f} s"
    await w.wait_for(lambda: w.events("WorkerRotated"), 60, "the rotation finished by the other replica")
    started = w.events("WorkerRotationStarted")
    assert len(started) == 1, f"{len(started)} WorkerRotationStarted: started again instead of resumed"
    evicted = [e[1] for e in w.api.evictions]
    w.notes["evictions"] = len(evicted)
    assert evicted == [leak], f"evicted {evicted}: the leaking pod once, nothing else"


async def gcs_unreachable(w: World, rng: random.Random) -> None:
    # Draining is on, and nothing listens at the head pod's GCS port: the
    # real Ray client is asked, and the rotation must go on without it.
    failed = await w.wait_for(lambda: w.events("WorkerDrainFailed"), 60, "the drain reported failed")
    assert "timed out" in failed[0]["message"], failed[0]["message"]
    assert failed[0]["type"] == "Warning"
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction after the failed drain")


async def pdb_forever(w: World, rng: random.Random) -> None:
    """A user's PodDisruptionBudget never allows a disruption of the group:
    the rotation gives up at its deadline, naming the budget, and leaves no
    marks on the pod."""
    leak = leaking_pod(w)
    w.api.put("poddisruptionbudgets", no_disruption(3))
    failed = await w.wait_for(lambda: w.events("WorkerRotationFailed"), 60, "the rotation given up")
    assert "no-disruption" in failed[0]["message"], failed[0]["message"]
    assert not w.api.evictions
    await w.wait_for(lambda: phase_of(w, leak) is None, 10, "the marks taken off the pod")
    g = w.api.get("memoryguards", "default", "leak-guard")
    assert g is not None
    g["spec"]["rotation"]["cooldownSeconds"] = 86400  # no second try within the test
    w.api.put("memoryguards", g)


async def kuberay_slow(w: World, rng: random.Random) -> None:
    w.kuberay.replace_delay_s = 4.0  # 2,400 s on the 600x clock, within replacementTimeoutSeconds
    await w.wait_for(lambda: w.api.evictions, 60, "the eviction")


async def kuberay_never(w: World, rng: random.Random) -> None:
    await w.wait_for(lambda: w.events("WorkerRotationFailed"), 60, "the rotation reported failed")
    # The second leaking worker waits: its group is already a pod short.
    await for_a_while(w, 4)
    assert len(w.api.evictions) == 1, w.api.evictions
    second = next(n for n in leaking_pods(w) if n != w.api.evictions[0][1])
    pods = pods_listed(w.guard_status())
    said = json.dumps(pods.get(second) or {})
    assert "short of 1 ready pod" in said, f"the status does not say why {second} waits: {said}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("none", "no fault (baseline)", no_fault),
    Scenario("api-409", "API: 409 Conflict on 30% of patches", api_409),
    Scenario("api-429", "API: 429 on 25% of all calls", api_429),
    Scenario("api-5xx", "API: 500/503 on 25% of all calls", api_5xx),
    Scenario("api-slow", "API: every answer 0.1-0.8 s late", api_slow),
    Scenario("api-watch", "API: watches dropped every 1 s; resuming them answers 410 Gone",
             watch_drops_and_410),
    Scenario("sidecar-down", "sidecar of the leaking pod down for 6 s", sidecar_act(Mode.DOWN, 6, only_leaking=True)),
    Scenario("sidecar-slow", "all sidecars answer after the 2 s timeout for 6 s", sidecar_act(Mode.SLOW, 6)),
    Scenario("sidecar-hang", "all sidecars accept and never answer for 6 s", sidecar_act(Mode.HANG, 6)),
    Scenario("sidecar-garbage", "all sidecars answer random bytes for 6 s", sidecar_act(Mode.GARBAGE, 6)),
    Scenario("sidecar-truncated", "all sidecars answer truncated JSON for 6 s", sidecar_act(Mode.TRUNCATED, 6)),
    Scenario("sidecar-skewed", "all sidecars: samples reversed, a third stamped a day ahead", sidecar_skewed),
    Scenario("sidecar-flood", "all sidecars answer 16 MiB of empty objects for 6 s", sidecar_act(Mode.FLOOD, 6)),
    Scenario("sidecar-backdated", "all sidecars answer 171,195 samples from the past day for 6 s",
             sidecar_act(Mode.BACKDATED, 6)),
    Scenario("sidecar-deep", "all sidecars answer JSON nested a million deep for 6 s", sidecar_act(Mode.DEEP, 6)),
    Scenario("sidecar-drip", "all sidecars drip their answer a byte every 0.2 s for 6 s", sidecar_act(Mode.DRIP, 6)),
    Scenario("sidecar-hostile", "flood, backdated, deep and drip at once, one kind per pod, for 8 s",
             hostile_sidecars, expect="no eviction on hostile answers; the operator stays up; then the rotation"),
    Scenario("sidecar-odd", "every other pod answers a 350-digit integer, a status or Content-Length of "
             "non-ASCII digits, in turn", odd_answers_beside_a_leak,
             expect="the leaking worker rotated on time beside them; their pollFailure BadAnswer"),
    Scenario("sidecar-behind", "leaking pod's sidecar clock a day behind (all samples stale)", sidecar_behind,
             rotated=0, expect="never rotated on stale samples; status says they are old"),
    Scenario("ip-reused", "a healthy pod's IP leads to the leaking pod's sidecar", ip_taken_over,
             expect="only the leaking pod rotated; the healthy one's answers dropped"),
    Scenario("kill-annotated", "operator SIGKILLed after annotating (status write failing)", killed_at("draining"),
             expect="restart adopts the annotated pod; one eviction"),
    Scenario("kill-drained", "operator SIGKILLed after draining (evictions failing)", killed_at("evicting"),
             expect="restart resumes at the eviction; one eviction"),
    # The replacement takes 2,400 s of clock plus the pod's start; the timeout
    # leaves room for a loaded machine, where the restart's own start takes
    # seconds of the clock's 600 a second (10,800 s, 18 s real, failed once
    # in a CI run on a slow host: the replacement was up 5 s after the old
    # pod's end, the restarted operator had not seen it ready 21 s after).
    Scenario("kill-evicted", "operator SIGKILLed after evicting (replacement pending)", killed_at("replacing"),
             guard_spec={"rotation": {"replacementTimeoutSeconds": 21600}},
             expect="restart waits for the replacement; one eviction"),
    Scenario("shard-killed", "two replicas sharing 4 shards: the one holding the leaking guard's shard SIGKILLed "
             "mid-rotation (eviction held)", shard_killed, shards=SHARDS,
             # The policy acts on the leak about 48 real s in (at 21,700 s of its trace), after the placement.
             speed=200.0, lived_s=12000.0,
             expect="the other replica took the shard over within 30 s and finished the rotation; one eviction"),
    Scenario("gcs-down", "Ray GCS unreachable when the worker is drained", gcs_unreachable,
             operator_env={"MEMORYGUARD_DRAIN": "true", "MEMORYGUARD_DRAIN_RPC_TIMEOUT_SECONDS": "1"},
             expect="drain reported failed (Warning Event); the pod evicted all the same"),
    Scenario("pdb-forever", "a user's PodDisruptionBudget refuses every eviction of the group", pdb_forever,
             rotated=0, failed=1, guard_spec={"rotation": {"evictionTimeoutSeconds": 1800}},
             expect="rotation failed at evictionTimeoutSeconds naming the budget; no eviction, no marks left"),
    Scenario("kuberay-slow", "KubeRay replaces after 2,400 s (clock)", kuberay_slow,
             guard_spec={"rotation": {"replacementTimeoutSeconds": 10800}}),
    Scenario("kuberay-never", "KubeRay never replaces; two leaking workers, maxUnavailable 1", kuberay_never,
             rotated=0, failed=1, leaking=frozenset({0, 1}), replace_delay_s=None,
             guard_spec={"rotation": {"replacementTimeoutSeconds": 1200}},
             expect="rotation failed with a reason; the second leak waits (group short)"),
)
