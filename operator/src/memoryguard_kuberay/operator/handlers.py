"""kopf handlers: thin. They unpack what kopf gives, call the domain modules
and return. Settings live in the one ``@kopf.on.startup`` below."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from memoryguard_kuberay.operator import budgets, clusters, config, crd, guarding, patches
from memoryguard_kuberay.operator.clock import Clock
from memoryguard_kuberay.operator.drain import NoDrainer, RayGcsDrainer
from memoryguard_kuberay.operator.eventqueue import EventPoster
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec
from memoryguard_kuberay.operator.kube import ApiError, Kube, load_credentials
from memoryguard_kuberay.operator.metrics import OperatorMetrics
from memoryguard_kuberay.operator.podcache import PodCaches

log = logging.getLogger("memoryguard_kuberay.operator")
_context: dict[str, guarding.OperatorContext] = {}  # set once at startup; kopf's memo is per object
# On a guard's deletion kopf sets the daemon's ``stopped``; the reconciler sees it
# between steps and returns. kopf waits STOP_WAIT_S for that (its
# instant_exit_timeout, set at startup) and cancels the daemon only after the
# backoff: cutting an API request in half makes the server log "context
# canceled" and kopf "escalate". A step longer than that (a poll with a 60 s
# timeout) is cut.
STOP_WAIT_S = 30.0


def context() -> guarding.OperatorContext:
    return _context["ctx"]


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    """All kopf settings, and what every guard shares."""
    cfg = config.from_env()
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
    metrics = OperatorMetrics()
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(cfg.metrics_port, addr=cfg.metrics_host, registry=metrics.registry)
    kube = Kube(load_credentials(), timeout_s=cfg.api_timeout_s)
    drainer = RayGcsDrainer(rpc_timeout_s=cfg.drain_rpc_timeout_s) if cfg.drain else NoDrainer()
    events = EventPoster(kube)
    events.start()
    _context["ctx"] = guarding.OperatorContext(
        kube=kube, events=events, drainer=drainer, pods=PodCaches(kube, watch_timeout_s=cfg.watch_timeout_s),
        clock=Clock(cfg.time_scale, cfg.epoch), metrics=metrics, sidecar_image=cfg.sidecar_image, trust=cfg.trust,
        ray_forensics=cfg.drain)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    ctx = _context.pop("ctx", None)
    if ctx is not None:
        await ctx.events.close()
        await ctx.pods.close()
        await ctx.kube.close()


@kopf.daemon(crd.GROUP, crd.VERSION, crd.PLURAL, cancellation_backoff=STOP_WAIT_S, cancellation_timeout=10.0)
async def guard(stopped: kopf.DaemonStopped, body: kopf.Body, namespace: str | None, name: str | None,
                **_: Any) -> None:
    """Each MemoryGuard's reconciler: one cycle per sampling interval until stopped."""
    ctx = context()
    reconciler = guarding.GuardReconciler(ctx, namespace or "", name or "")
    try:
        while not stopped:
            try:
                delay = await reconciler.cycle(body, stopped=lambda: bool(stopped))
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad cycle must not end the guard; the next one retries
                log.exception("%s/%s: cycle failed", namespace, name)
                delay = 15.0
            await stopped.wait(ctx.clock.real_seconds(delay))
    finally:
        await reconciler.close()


@kopf.on.delete(crd.GROUP, crd.VERSION, crd.PLURAL)
async def removed(spec: kopf.Spec, namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> None:
    """Finalizer: take back what this guard put into other objects: its
    rotation marks on pods, the sidecar it injected, its PDBs."""
    ctx = context()
    ns = namespace or ""
    reconciler = guarding.GuardReconciler(ctx, ns, name or "")
    reconciler.body = body
    await reconciler.unmark_pods()
    try:
        gs = read_guard_spec(spec, sidecar_image=ctx.sidecar_image)
    except SpecError:
        return
    selected = await clusters.select(ctx.kube, namespace=ns, guard=body, spec=gs, trust=ctx.trust)
    # MemoryGuard's budgets (a user's of the same name stay).
    ours = await clusters.our_budgets(ctx.kube, ns, selected.clusters) if gs.pdb.enabled else {}
    for rc in selected.clusters:
        if gs.sidecar.inject:
            ops = patches.uninject_patch(rc)
            if ops:
                try:
                    await ctx.kube.json_patch_raycluster(ns, rc["metadata"]["name"], ops)
                    await reconciler.event(EventReason.SIDECAR_REMOVED, f"sidecar removed from RayCluster "
                                                                 f"{rc['metadata']['name']}", also=[rc])
                except ApiError as e:
                    await reconciler.event(EventReason.SIDECAR_REMOVAL_FAILED, f"{rc['metadata']['name']}: {e}",
                                           also=[rc])
                    raise kopf.TemporaryError(str(e), delay=10) from e
        if gs.pdb.enabled:
            for group, _path, _tpl in patches.templates(rc, include_head=False):
                name = budgets.pdb_name(rc["metadata"]["name"], group)
                if name in ours:
                    await ctx.kube.delete_pdb(ns, name)
