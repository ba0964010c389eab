"""What a MemoryGuard takes back when it is deleted: its rotation marks on
pods, the sidecar it injected into RayCluster templates, its own
PodDisruptionBudgets (never a user's of the same name). Called by the
handler of the guard's deletion (handlers.py), which only unpacks kopf's
arguments.

The spec is read as the cycle reads it, with the installer's trust limits:
a guard the operator refused put nothing anywhere, so there is nothing of
its own to take back from the clusters it named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import pressure
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.cycle.guardstate import OperatorContext
from memoryguard_kuberay.operator.decided import say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import clusters, injection, kuberayrules, patches
from memoryguard_kuberay.operator.rotations import budgets


class NotYet(RuntimeError):
    """A part could not be taken back now (an API error); the handler retries."""


async def unmark_pods(ctx: OperatorContext, namespace: str, guard: str) -> None:
    """This guard's rotation marks off every pod that has them: nothing may
    be left half-rotated by a guard that is gone; and the ladder's step it
    asked (a pod told to shed by a guard that is gone would shed for ever)."""
    # A page at a time: a tenant's pods, listed whole, were hundreds of MB once.
    async for items, _rv in ctx.kube.pod_pages(namespace, f"{C.LABEL_IS_RAY_NODE}=yes"):
        for info in [pi.pod_info(p) for p in items if isinstance(p, dict)]:
            if info.terminating:
                continue
            off: dict[str, str | None] = {}
            if info.annotations.get(C.ANN_GUARD) == guard:
                off.update(dict.fromkeys(pi.ROTATION_ANNOTATIONS))
            asked = pressure.parse(info.annotations.get(C.ANN_PRESSURE))
            if asked is not None and asked.guard == guard:
                off[C.ANN_PRESSURE] = None
            if off:
                await ctx.kube.patch_pod_annotations(namespace, info.name, off)


async def release(ctx: OperatorContext, namespace: str, name: str, body: Mapping[str, Any]) -> None:
    await unmark_pods(ctx, namespace, name)
    try:
        gs = read_guard_spec(body.get("spec"), sidecar_image=ctx.sidecar_image, trust=ctx.trust)
    except SpecError:
        return  # refused: it never injected, patched or budgeted anything
    selected = await clusters.select(ctx.kube, namespace=namespace, guard=body, spec=gs,
                                     guards=await ctx.roster.older_served(namespace, body), trust=ctx.trust)
    if selected.unread:
        # The cycles read no more than this either: what they never read, they never changed.
        ctx.events.announce(namespace, body, say(EventReason.SIDECAR_REMOVAL_FAILED, selected.unread, body))
    ours = await clusters.our_budgets(ctx.kube, namespace, selected.clusters) if gs.pdb.enabled else {}
    for rc in selected.clusters:
        rc_name = rc["metadata"]["name"]
        hold = kuberayrules.template_hold(rc, allow_recreate=gs.allow_recreate)
        if gs.sidecar.inject and hold is not None and injection.uninject_patch(rc):
            # Removing it would recreate the whole cluster (or not last): said, not done.
            ctx.events.announce(namespace, body, say(EventReason.SIDECAR_REMOVAL_FAILED,
                                                     f"sidecar left in RayCluster {rc_name}: {hold.message}", rc))
        elif gs.sidecar.inject:
            ops = injection.uninject_patch(rc)
            if ops:
                try:
                    await ctx.kube.json_patch_raycluster(namespace, rc_name, ops)
                except ApiError as e:
                    ctx.events.announce(namespace, body, say(EventReason.SIDECAR_REMOVAL_FAILED, f"{rc_name}: {e}", rc))
                    raise NotYet(str(e)) from e
                ctx.events.announce(namespace, body, say(EventReason.SIDECAR_REMOVED,
                                                         f"sidecar removed from RayCluster {rc_name}", rc))
        if gs.pdb.enabled:
            for group, _path, _tpl in patches.templates(rc, include_head=False):
                pdb = budgets.pdb_name(rc_name, group)
                if pdb in ours:
                    await ctx.kube.delete_pdb(namespace, pdb)
