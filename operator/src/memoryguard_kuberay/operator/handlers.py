"""kopf handlers: thin. They unpack what kopf gives, call the domain modules
and return. Settings live in the one ``@kopf.on.startup`` below."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import kopf

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator import config
from memoryguard_kuberay.operator.api.credentials import NoCredentials, load_credentials
from memoryguard_kuberay.operator.api.kube import REQUEST_CONNECTIONS, Kube, client_session
from memoryguard_kuberay.operator.api.podcache import PodCaches
from memoryguard_kuberay.operator.clock import Clock
from memoryguard_kuberay.operator.cycle import finalizer, guarding, guardstate
from memoryguard_kuberay.operator.cycle.eventqueue import EventPoster
from memoryguard_kuberay.operator.cycle.guardroster import GuardRoster
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.rayclusters import kuberayrules
from memoryguard_kuberay.operator.rotations.drain import NoDrainer, RayGcsDrainer
from memoryguard_kuberay.operator.sharding.shards import AllShards, ShardConfig, ShardKeeper

log = logging.getLogger("memoryguard_kuberay.operator")
# On a guard's deletion kopf sets the daemon's ``stopped``; the reconciler sees it
# between steps and returns. kopf waits STOP_WAIT_S for that (its
# instant_exit_timeout, set at startup) and cancels the daemon only after the
# backoff: cutting an API request in half makes the server log "context
# canceled" and kopf "escalate". A step longer than that (a poll with a 60 s
# timeout) is cut.
STOP_WAIT_S = 30.0
OWNER_WAIT_S = 1.0  # a guard whose shard another replica holds looks again this often (real seconds)
# kopf's watches besides the guards' (one per watched namespace, or one):
# its observers of namespaces and CRDs, and its peering.
KOPF_OTHER_WATCHES = 3


@kopf.on.login()
async def login(memo: kopf.Memo, **_: Any) -> kopf.AiohttpSession:
    """kopf's own session to the API server, with at most as many
    connections as its watches and REQUEST_CONNECTIONS requests. kopf's
    default has no limit: 1,000 guards at start made 935 connections at
    once, for their finalizers and daemons, and the memory their buffers
    took stayed with the process (issue 44, 3). The credentials are read
    again at every login: kopf logs in again on a 401 (a rotated token)."""
    try:
        creds = load_credentials()
    except NoCredentials as exc:
        raise kopf.LoginError(str(exc)) from None
    watches = int(memo.get("watches") or 1) + KOPF_OTHER_WATCHES
    return kopf.AiohttpSession(server=creds.server.rstrip("/"), aiohttp_session=client_session(
        creds, limit=REQUEST_CONNECTIONS + watches, user_agent="memoryguard-kopf"))


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """All kopf settings, and what every guard shares: ``memo.ctx`` (kopf
    hands each object's handlers a copy of the operator's memo). The
    settings and credentials were read and checked once, before kopf
    started (main.py: ``memo.cfg``, ``memo.credentials``)."""
    cfg: config.OperatorConfig = memo.get("cfg") or config.from_env()
    # Progress and diff-base in annotations under our own prefix: the status
    # is ours, for users to read.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="memoryguard.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="memoryguard.io",
                                                                           key="last-handled-configuration")
    settings.posting.level = logging.WARNING  # kopf's own Events: only problems
    settings.watching.server_timeout = cfg.watch_timeout_s
    settings.watching.client_timeout = cfg.watch_timeout_s + 30
    settings.networking.request_timeout = cfg.api_timeout_s
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60]
    # A deleted guard's reconciler finishes the step it is in; kopf waits for that,
    # then removes the finalizer at once. Without this wait kopf would sleep
    # the whole cancellation_backoff before removing it (seen: a guard hung).
    settings.background.instant_exit_timeout = STOP_WAIT_S
    if cfg.admission_port:
        from memoryguard_kuberay.operator import webhook

        settings.admission.server = webhook.server(cfg)
        settings.admission.managed = None  # the chart owns the webhook's configuration
    metrics = OperatorMetrics(per_pod=cfg.per_pod_metrics)
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(cfg.metrics_port, addr=cfg.metrics_host, registry=metrics.registry)
    kube = Kube(memo.get("credentials") or load_credentials(), timeout_s=cfg.api_timeout_s)
    drainer = RayGcsDrainer(rpc_timeout_s=cfg.drain_rpc_timeout_s) if cfg.drain else NoDrainer()
    events = EventPoster(kube)
    events.start()
    sharding: ShardConfig | None = memo.get("sharding")
    shards = ShardKeeper(kube, sharding) if sharding else AllShards()
    memo.shards_task = asyncio.create_task(_keep_shards(shards, metrics, memo.get("identity") or "standalone"))
    memo.ctx = guardstate.OperatorContext(
        kube=kube, events=events, drainer=drainer, pods=PodCaches(kube, watch_timeout_s=cfg.watch_timeout_s),
        clock=_clock(cfg, events), metrics=metrics, sidecar_image=cfg.sidecar_image, trust=cfg.trust,
        ray_forensics=cfg.drain, roster=GuardRoster(kube, limit=cfg.max_guards_per_namespace), shards=shards,
        native_sidecars=kuberayrules.native_sidecars(await kube.server_minor()), admission=bool(cfg.admission_port))
    pool = memo.ctx.pod_pool
    metrics.count_connections(lambda: (pool.opened, pool.reused))


def _clock(cfg: config.OperatorConfig, events: EventPoster) -> Clock:
    """The wall's, faster for the tests, or the demo world's (its files),
    which also waits for the Events a cycle queued."""
    if not cfg.clock_file:
        return Clock(cfg.time_scale, cfg.epoch)
    clock = Clock(cfg.time_scale, cfg.epoch, shared=Path(cfg.clock_file),
                  wake=Path(cfg.clock_wake_file) if cfg.clock_wake_file else None)
    clock.pending.append(events.busy)
    return clock


async def _keep_shards(shards: AllShards | ShardKeeper, metrics: OperatorMetrics, identity: str) -> None:
    """The shards' Leases renewed, and the replica's share in its metrics."""
    if isinstance(shards, AllShards):
        metrics.owning(identity, 1, 1)
        return
    task = asyncio.create_task(shards.run())
    try:
        while not task.done():
            metrics.owning(identity, shards.owned(), shards.shards)
            await asyncio.sleep(shards.cfg.renew_s)
        task.result()
    finally:
        task.cancel()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    ctx = memo.get("ctx")
    task = memo.get("shards_task")
    if task is not None:
        task.cancel()
    if ctx is not None:
        await ctx.shards.close()  # handed over at once
        ctx.pod_pool.close()
        await ctx.events.close()
        await ctx.pods.close()
        await ctx.kube.close()


@kopf.daemon(C.GROUP, C.VERSION, C.PLURAL, cancellation_backoff=STOP_WAIT_S, cancellation_timeout=10.0)
async def guard(stopped: kopf.DaemonStopped, body: kopf.Body, namespace: str | None, name: str | None,
                memo: kopf.Memo, **_: Any) -> None:
    """Each MemoryGuard's reconciler: one cycle per sampling interval until stopped."""
    ctx: guardstate.OperatorContext = memo.ctx
    ns, nm = namespace or "", name or ""
    held: guarding.Guard | None = None  # while this replica holds its shard
    counted: int | None = None  # its pods, as the last cycle to count them found them
    term = -1
    ctx.shards.enlist(ns, nm)
    ctx.clock.enlist(f"{ns}/{nm}")
    try:
        while not stopped:
            if held is not None and (not ctx.shards.holds_guard(ns, nm) or ctx.shards.term(ns, nm) != term):
                # Its shard gone, or held again after another replica may have
                # held it: what this replica knew of the guard is stale (the
                # guard's status is the truth), and its windows are memory.
                await guarding.close(held)
                ctx.metrics.forget_guard(ns, nm)
                ctx.shards.weigh(ns, nm, None)
                held, counted = None, None
            if not ctx.shards.owns_guard(ns, nm):
                # Not ours, or not this moment (a renewal late): kept while held.
                await stopped.wait(OWNER_WAIT_S)
                continue
            if held is None:
                term = ctx.shards.term(ns, nm)
                held = guarding.Guard(ctx, ns, nm)
            with ctx.shards.acting(ns, nm):
                try:
                    ended = await guarding.cycle(
                        held, body, stopped=lambda: bool(stopped) or not ctx.shards.owns_guard(ns, nm))
                except asyncio.CancelledError:
                    raise
                except Exception:  # one bad cycle must not end the guard; the next one retries
                    log.exception("%s/%s: cycle failed", namespace, name)
                    ended = guarding.Ended(15.0)
            counted = ended.pods if ended.pods is not None else counted
            ctx.shards.weigh(ns, nm, counted)  # shards are placed by their pods
            await ctx.clock.sleep(ended.delay_s, stopped, f"{ns}/{nm}")
    finally:
        ctx.clock.delist(f"{ns}/{nm}")
        ctx.shards.delist(ns, nm)
        if held is not None:
            await guarding.close(held)
        if stopped.reason is not None and stopped.reason & kopf.DaemonStoppingReason.RESOURCE_DELETED:
            ctx.metrics.drop_guard(ns, nm)  # gone for good: none of its series stays


@kopf.on.delete(C.GROUP, C.VERSION, C.PLURAL)
async def removed(body: kopf.Body, namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Finalizer: take back what this guard put into other objects (finalizer.py),
    in the replica that holds the guard's shard (kopf runs this in every
    replica; the others wait, and kopf's record of the retry is shared)."""
    ctx: guardstate.OperatorContext = memo.ctx
    if not ctx.shards.owns_guard(namespace or "", name or ""):
        raise kopf.TemporaryError("another replica holds this guard's shard", delay=5)
    try:
        await finalizer.release(memo.ctx, namespace or "", name or "", body)
    except finalizer.NotYet as e:
        raise kopf.TemporaryError(str(e), delay=10) from e
