"""The pod admission webhook: kopf serves it (``@kopf.on.mutate``) with the
certificate the chart mounts; the chart owns the
MutatingWebhookConfiguration (kopf's "managed" mode is off), so uninstalling
removes it with the release, before the operator's pod is gone.

Registered only where ``MEMORYGUARD_ADMISSION_PORT`` is set (main.py calls
``register``): kopf refuses to start with admission handlers and no server.
The handler is thin: an index of the guards (small, ``admission.Admitting``),
one read of the pod's RayCluster, ``admission.admit``, and the ops applied.
It never refuses a pod: whatever goes wrong, the pod is created as it came
and the guard's status names it as unguarded (judging.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import jsonpatch
import kopf

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.api.errors import ApiError, NotFound
from memoryguard_kuberay.operator.api.kube import PageTooLarge
from memoryguard_kuberay.operator.api.readbudget import ReadBudget
from memoryguard_kuberay.operator.config import OperatorConfig
from memoryguard_kuberay.operator.rayclusters import admission

log = logging.getLogger("memoryguard_kuberay.operator")
# The API server waits timeoutSeconds (the chart's admission.timeoutSeconds,
# 2) and then creates the pod without us (failurePolicy Ignore); the answer
# must come well within it, so the RayCluster's read gets this much.
READ_BUDGET_S = 1.0
# A RayCluster is some 10 KiB; the API's limit is about 1.5 MB.
READ_BYTES = 2 << 20
REMEDY_BYTES = 64 << 10  # a remediation's ConfigMap holds a few variables
HANDLER_ID = "inject"  # the path the chart's webhook calls: /inject
FAILED = "Failed"


def server(cfg: OperatorConfig) -> kopf.WebhookServer:
    """kopf's HTTPS server on the chart's certificate (reread when the
    Secret's files change: kopf checks them every minute)."""
    certs = Path(cfg.admission_cert_dir)
    if cfg.admission_insecure:
        return kopf.WebhookServer(addr=cfg.admission_host, port=cfg.admission_port, insecure=True)
    return kopf.WebhookServer(addr=cfg.admission_host, port=cfg.admission_port,
                              certfile=str(certs / "tls.crt"), pkeyfile=str(certs / "tls.key"))


def register() -> None:
    """The index of guards and the mutating handler, in kopf's registry."""
    kopf.index(C.GROUP, C.VERSION, C.PLURAL, id="admitting")(index_guard)
    kopf.on.mutate("", "v1", "pods", id=HANDLER_ID, operations=["CREATE"], side_effects=False)(inject)


def index_guard(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> Any:
    """{namespace: the guard as the webhook needs it}, or nothing for a
    guard that gives pods nothing (admission.Admitting.of)."""
    cfg: OperatorConfig = memo.cfg
    found = admission.Admitting.of(body, sidecar_image=cfg.sidecar_image, trust=cfg.trust)
    return None if found is None else {namespace or "": found}


async def inject(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
    """kopf hands every handler the indices by their ids: ``admitting``."""
    started = time.monotonic()
    admitting: Any = kwargs.get("admitting") or {}
    ctx = memo.ctx
    pod = dict(body)
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    outcome = FAILED
    try:
        decision = await _decide(ctx, pod, namespace, list(admitting.get(namespace, ())))
        outcome = decision.reason.value
        if decision.ops:
            ops = decision.ops
            jsonpatch.apply_patch(pod, ops)  # a patch that does not apply fails here, not in kopf's answer
            patch.fns.append(lambda raw: jsonpatch.apply_patch(raw, ops, in_place=True))
            log.debug("%s: %s", namespace, decision.message)
    except Exception as e:  # never a refused pod: it is created as it came
        log.warning("%s: a Ray pod created without the sidecar: %s", namespace, e or type(e).__name__)
    finally:
        if outcome != admission.AdmissionReason.NOT_A_RAY_NODE.value:
            ctx.metrics.admissions.labels(namespace, outcome).inc()
        ctx.metrics.admission_seconds.observe(time.monotonic() - started)


async def _configmap(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """A remediation's ConfigMap (a few hundred bytes), or None: absent, or
    too big to be one (a tenant's, under the name: never named in a pod)."""
    try:
        return dict(await kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                                       max_bytes=REMEDY_BYTES))
    except (NotFound, PageTooLarge):
        return None
    except ApiError as e:  # a remediation's env missed costs the pod nothing else: the sidecar still goes in
        log.warning("%s: ConfigMap %s not read, not named in the pod: %s", namespace, name, e)
        return None


async def _decide(ctx: Any, pod: dict[str, Any], namespace: str,
                  guards: list[admission.Admitting]) -> admission.Admission:
    """The pod's RayCluster read, then the remediations' ConfigMaps its
    guard may name (at most three, at once), all within READ_BUDGET_S."""
    node = admission.ray_node(pod)
    if node is None or not guards:
        return admission.admit(pod, None, guards, native=ctx.native_sidecars)
    deadline = time.monotonic() + READ_BUDGET_S
    try:
        cluster = await asyncio.wait_for(
            ctx.kube.get_raycluster(namespace, node[0], budget=ReadBudget(READ_BYTES)), READ_BUDGET_S)
    except NotFound:
        cluster = None
    wanted = admission.remedies(pod, cluster, guards)
    names = sorted(wanted)
    read = await asyncio.wait_for(asyncio.gather(*(_configmap(ctx.kube, namespace, n) for n in names)),
                                  max(0.05, deadline - time.monotonic()))
    return admission.admit(pod, cluster, guards, native=ctx.native_sidecars, configmaps=dict(zip(names, read)))
