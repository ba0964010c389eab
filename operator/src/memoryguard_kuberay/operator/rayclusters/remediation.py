"""Remediation of a worker group: jemalloc (``LD_PRELOAD``, ``MALLOC_CONF``)
on a plateau, object spilling settings on a filling store, Ray's record of
where object references are created when a rotation's evidence lacked it. Recommended
(an Event) or applied (a targeted JSON patch of the group's pod template;
pods get it as they are replaced), as the guard's spec says."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.policy import Decision
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.decided import Say, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import GuardSpec, Mode
from memoryguard_kuberay.operator.rayclusters import kuberayrules, patches

log = logging.getLogger("memoryguard_kuberay.operator")


@dataclasses.dataclass(frozen=True)
class Remedied:
    """What a remediation did: the mode it acted in ("recommend", "auto"),
    "" when there was nothing to do, None when the API refused the patch
    (to be tried again); and its Event."""

    mode: str | None
    says: tuple[Say, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # what it set (mode "auto")
    rc: Mapping[str, Any] | None = None  # the RayCluster as the patch left it, for the rest of the cycle


async def remediate(kube: Kube, *, namespace: str, spec: GuardSpec, rc: Mapping[str, Any], pod: pi.PodInfo,
                    decision: Decision, kind: str, admission: bool = False) -> Remedied:
    """Recommend or apply ``kind`` ("jemalloc", "spilling" or "callsites")
    to the pod's group. ``admission``: the webhook is served, so a cluster
    whose templates are held (a RayService's, a Recreate one) gets it all
    the same, through its ConfigMap alone: the webhook names it in each new
    pod of the group (webhook.py), no template is changed."""
    mode = patches.mode_of(spec, kind)
    found = patches._worker_group(rc, pod.group)
    if mode == Mode.OFF or found is None:
        return Remedied("")
    container = (((found[1].get("template") or {}).get("spec") or {}).get("containers") or [{}])[0]
    preload = next((e.get("value") for e in container.get("env") or [] if e.get("name") == "LD_PRELOAD"), None)
    env = patches.wanted_env(spec, kind, preload)
    what = ", ".join(f"{k}={v}" for k, v in env.items())
    why = f"{pod.name}: {decision.reason.value}: {decision.message}"
    where = f"group {pod.group} of {pod.cluster}"
    hold = kuberayrules.template_hold(rc, allow_recreate=spec.allow_recreate)
    if hold is not None and admission and mode == Mode.AUTO and not spec.policy.dry_run:
        return await _through_admission(kube, namespace=namespace, rc=rc, pod=pod, kind=kind, env=env,
                                        what=what, why=why, where=where)
    if mode == Mode.RECOMMEND or spec.policy.dry_run or hold is not None:
        # A held cluster gets the advice, never the patch: on it a template
        # change would recreate the whole cluster, or not last.
        held = f"; not applied: {hold.message}" if hold is not None and mode == Mode.AUTO else ""
        return Remedied(str(Mode.RECOMMEND.value if held else mode.value), (say(
            EventReason.REMEDIATION_RECOMMENDED, f"{where}: set {what} ({why}){held}", rc),))
    record = f"{decision.reason.value} on {pod.name}"
    # Through a ConfigMap the Ray container alone reads (envFrom): KubeRay's
    # wait-gcs-ready copies the container's env, not its envFrom. Unless the
    # container's own env sets one of them (env wins over envFrom).
    configmap = None if patches.env_sets(rc, pod.group, list(env)) else patches.remedy_configmap(
        pod.cluster, pod.group, kind)
    ops = patches.remediation_patch(rc, pod.group, env, record=record, configmap=configmap)
    if not ops:
        return Remedied("")
    try:
        if configmap is not None:  # first, so that no pod ever names one not there
            await kube.put_configmap(namespace, patches.remedy_configmap_body(rc, configmap, kind, env))
        patched = await kube.json_patch_raycluster(namespace, pod.cluster, ops)
    except ApiError as e:
        return Remedied(None, (say(EventReason.REMEDIATION_FAILED, f"{where}: {e}", rc),))
    how = f" (ConfigMap {configmap}, read through envFrom)" if configmap else ""
    return Remedied(str(mode.value), (say(EventReason.REMEDIATION_APPLIED, f"{where}: set {what} in the pod "
                                          f"template{how} ({why}); pods get it as they are replaced", rc),),
                    patches.env_from_mark(configmap) if configmap else env, patched)


async def _through_admission(kube: Kube, *, namespace: str, rc: Mapping[str, Any], pod: pi.PodInfo, kind: str,
                             env: Mapping[str, str], what: str, why: str, where: str) -> Remedied:
    """A held cluster's remediation: its ConfigMap alone, which the webhook
    names in the group's new pods (only while it holds exactly what the
    guard's spec sets: admission.remedy_ops)."""
    configmap = patches.remedy_configmap(pod.cluster, pod.group, kind)
    try:
        await kube.put_configmap(namespace, patches.remedy_configmap_body(rc, configmap, kind, env))
    except ApiError as e:
        return Remedied(None, (say(EventReason.REMEDIATION_FAILED, f"{where}: {e}", rc),))
    return Remedied(str(Mode.AUTO.value), (say(
        EventReason.REMEDIATION_APPLIED, f"{where}: set {what} through ConfigMap {configmap}, which new pods of "
        f"the group read as they are created (admission; KubeRay's templates are left as they are) ({why}); pods "
        f"get it as they are replaced", rc),), patches.env_from_mark(configmap), None)


async def revert(kube: Kube, *, namespace: str, rc: Mapping[str, Any], cluster: str, group: str, kind: str,
                 env: Mapping[str, str], why: str, allow_recreate: bool = False,
                 admission: bool = False) -> tuple[str, Say | None, Mapping[str, Any] | None]:
    """Undo a remediation judged ineffective (patches.revert_patch): what
    was done, in words ("" when the API refused it for now: tried again next
    cycle, no Event), its Event, and the RayCluster as the patch left it.
    A held cluster (kuberayrules.py) is not touched: the revert is said, not done."""
    where = f"{kind} on group {group} of {cluster}"
    hold = kuberayrules.template_hold(rc, allow_recreate=allow_recreate)
    if hold is not None and admission:
        # Applied through admission: without its ConfigMap new pods get none of it.
        configmap = patches.remedy_configmap(cluster, group, kind)
        try:
            await kube.delete_configmap(namespace, configmap)
        except ApiError as e:
            log.warning("%s: %s: revert refused for now, tried again next cycle: %s", namespace, where, e)
            return "", None, None
        return "reverted", say(EventReason.REMEDIATION_REVERTED, f"{where} undone ({why}): ConfigMap {configmap} "
                                                                 "deleted; new pods of the group are created "
                                                                 "without it", rc), None
    if hold is not None:
        return (f"not reverted: {hold.message}",
                say(EventReason.REMEDIATION_REVERT_FAILED, f"{where}: not reverted: {hold.message}", rc), None)
    ops = patches.revert_patch(rc, group, env)
    if isinstance(ops, str):
        return f"not reverted: {ops}", say(EventReason.REMEDIATION_REVERT_FAILED, f"{where}: {ops}", rc), None
    try:
        patched = await kube.json_patch_raycluster(namespace, cluster, ops)
    except ApiError as e:
        log.warning("%s: %s: revert refused for now, tried again next cycle: %s", namespace, where, e)
        return "", None, None
    return "reverted", say(EventReason.REMEDIATION_REVERTED, f"{where} undone ({why}): the pod template has what "
                                                             f"it had before; pods get it as they are replaced",
                           rc), patched
