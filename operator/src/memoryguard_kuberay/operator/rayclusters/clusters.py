"""The first steps of a guard's cycle, each with explicit inputs and
outputs: select the RayClusters (``select``), set them up (the sidecar
injected, the PodDisruptionBudgets kept: ``set_up``). The guard loop calls
them in that order, then reads their pods (podcache.py)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core.trust import Trust
from memoryguard_kuberay.operator.api import podinfo as pi
from memoryguard_kuberay.operator.api.errors import ApiError, Conflict, NotFound
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.api.readbudget import ReadBudget
from memoryguard_kuberay.operator.decided import Say, say
from memoryguard_kuberay.operator.events import EventReason
from memoryguard_kuberay.operator.guardspec import GuardSpec, SpecError, read_guard_spec
from memoryguard_kuberay.operator.rayclusters import injection, kuberayrules, patches
from memoryguard_kuberay.operator.rayclusters.groups import desired_replicas
from memoryguard_kuberay.operator.rotations import budgets

log = logging.getLogger("memoryguard_kuberay.operator")


# The most of RayClusters one guard reads in a cycle (their JSON, as the
# server sends it; one answer past it may be finished, itself within it): a
# KubeRay cluster is some 10 KiB, a large one 100 KiB, so this is hundreds
# of real clusters; a tenant's clusters padded to the server's limit (1.2 MB
# each, a hundred of them, one guard listing them every second) held the
# operator at 309 MiB (issue 44, 4). Past it, the clusters not read are not
# guarded, and the status says so.
CLUSTER_READ_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Selected:
    clusters: list[dict[str, Any]]  # the RayClusters this guard acts on, by name
    missing: list[str]  # named in the spec, not found
    contested: dict[str, str]  # RayCluster -> the older guard that has it
    unread: str | None = None  # why some clusters the spec selects were not read (CLUSTER_READ_BYTES)


def older(me: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether ``other`` is another live guard created before ``me`` (ties
    broken by name): the older guard keeps a contested cluster."""
    mine, theirs = me.get("metadata") or {}, other.get("metadata") or {}
    if theirs.get("uid") == mine.get("uid") or theirs.get("deletionTimestamp"):
        return False
    return (str(theirs.get("creationTimestamp", "")), str(theirs.get("name", ""))) < (
        str(mine.get("creationTimestamp", "")), str(mine.get("name", "")))


async def select(kube: Kube, *, namespace: str, guard: Mapping[str, Any], spec: GuardSpec,
                 guards: Sequence[Mapping[str, Any]], trust: Trust | None = None,
                 read_bytes: int = CLUSTER_READ_BYTES) -> Selected:
    """The RayClusters ``guard`` selects and may act on. A cluster an older
    guard also selects is left to that guard: two guards never rotate one
    cluster's pods with two sets of budgets. A guard the operator refuses
    (judged with the same ``trust``) guards nothing, so it takes nothing.
    ``guards``: the namespace's guards (guardroster.py: listed once for all).
    What it reads is bounded by ``read_bytes`` (CLUSTER_READ_BYTES): the
    clusters past it are named in ``unread``, and not guarded."""
    found: dict[str, dict[str, Any]] = {}
    missing, skipped = [], []
    budget = ReadBudget(read_bytes)
    for name in spec.selection.cluster_names:
        if budget.spent:
            skipped.append(name)
            continue
        try:
            found[name] = await kube.get_raycluster(namespace, name, budget=budget)
        except ApiError as e:
            if not isinstance(e, NotFound):
                raise
            missing.append(name)
    if spec.selection.cluster_labels:
        sel = ",".join(f"{k}={v}" for k, v in sorted(spec.selection.cluster_labels.items()))
        for rc in await kube.list_rayclusters(namespace, sel, budget=budget):
            found[rc["metadata"]["name"]] = rc
    contested: dict[str, str] = {}
    if found:
        for other in guards:
            if not older(guard, other):
                continue
            try:
                sel_other = read_guard_spec(other.get("spec"), trust=trust).selection
            except SpecError:
                continue  # an invalid guard guards nothing
            for name, rc in list(found.items()):
                labels = (rc.get("metadata") or {}).get("labels") or {}
                if name in sel_other.cluster_names or (sel_other.cluster_labels and all(
                        labels.get(k) == v for k, v in sel_other.cluster_labels.items())):
                    contested[name] = other["metadata"]["name"]
                    del found[name]
    return Selected([found[k] for k in sorted(found)], missing, contested, _unread(budget, skipped, len(found)))


def _unread(budget: ReadBudget, skipped: Sequence[str], read: int) -> str | None:
    if not skipped and not budget.cut:
        return None
    what = [f"RayCluster(s) {', '.join(skipped)}"] if skipped else []
    what += ["any further RayCluster the label selector matches"] if budget.cut else []
    return (f"{read} RayCluster(s) read, {budget.spent_bytes / 2**20:.1f} MiB, the most the operator reads for one "
            f"guard in a cycle ({budget.limit / 2**20:.0f} MiB): {' and '.join(what)} not read and not guarded; "
            "select fewer clusters per guard (one guard per cluster or per few)")


def owner_ref(guard: Mapping[str, Any]) -> dict[str, Any]:
    meta = guard.get("metadata") or {}
    return {"apiVersion": guard.get("apiVersion"), "kind": guard.get("kind"), "name": meta.get("name"),
            "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": False}


@dataclasses.dataclass(frozen=True)
class SetUp:
    says: list[Say]
    held: dict[str, kuberayrules.Held]  # RayCluster -> why its templates are left alone


async def set_up(kube: Kube, *, namespace: str, guard: Mapping[str, Any], spec: GuardSpec,
                 clusters: Sequence[Mapping[str, Any]], native_sidecar: bool = False,
                 held_before: Sequence[str] = (), dry_run: bool = False, admission: bool = False) -> SetUp:
    """The sidecar in the pod templates (when injected) and one PDB per
    guarded worker group (when enabled). Idempotent. A cluster whose
    templates KubeRay would not take as a change for new pods alone
    (kuberayrules.template_hold) is left as it is, said once (a Warning
    when it is first held: ``held_before`` lists those already said). A
    dry run injects the sidecar (the observer: new pods get it, no running
    pod is touched, and without it a dry run has no figures to report:
    issue 42, 1) and keeps no budget (budgets gate evictions it never makes).
    ``admission``: the webhook gives pods the sidecar as they are created
    (webhook.py), so no template is patched for it."""
    says: list[Say] = []
    held: dict[str, kuberayrules.Held] = {}
    ours = await our_budgets(kube, namespace, clusters) if spec.pdb.enabled and clusters and not dry_run else {}
    for rc in clusters:
        name = rc["metadata"]["name"]
        hold = kuberayrules.template_hold(rc, allow_recreate=spec.allow_recreate, admission=admission)
        if hold is not None:
            held[name] = hold
            if name not in held_before:
                says.append(say(EventReason.TEMPLATES_HELD, hold.message, rc))
        if spec.sidecar.inject and hold is None and not admission:
            ops = injection.inject_patch(rc, spec.sidecar, groups=spec.selection.worker_groups,
                                       include_head=spec.policy.include_head, native=native_sidecar)
            if ops:
                try:
                    await kube.json_patch_raycluster(namespace, name, ops)
                    says.append(say(EventReason.SIDECAR_INJECTED, f"sidecar added to the pod templates of "
                                    f"RayCluster {name}; pods get it as KubeRay creates them", rc))
                except ApiError as e:
                    says.append(say(EventReason.SIDECAR_INJECTION_FAILED, f"RayCluster {name}: {e}", rc))
        too_many = hold is not None and hold.why is kuberayrules.TemplateHold.TOO_MANY_GROUPS
        if spec.pdb.enabled and not dry_run and not too_many:
            await keep_budgets(kube, namespace=namespace, guard=guard, spec=spec, rc=rc, ours=ours)
    return SetUp(says, held)


async def our_budgets(kube: Kube, namespace: str,
                      clusters: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """MemoryGuard's budgets for these clusters' worker groups, by name, read
    with one label-selected LIST (in pages). Anyone who may create budgets in
    the namespace can put MemoryGuard's label on more: only those named for
    these groups are kept."""
    names = {budgets.pdb_name(rc["metadata"]["name"], group)
             for rc in clusters for group, _, _ in patches.templates(rc, include_head=False)}
    ours: dict[str, dict[str, Any]] = {}
    async for items, _rv in kube.pdb_pages(namespace, budgets.selector()):
        for pdb in items:
            name = (pdb.get("metadata") or {}).get("name") if isinstance(pdb, dict) else None
            if name in names:
                ours[name] = pdb
    return ours


async def keep_budgets(kube: Kube, *, namespace: str, guard: Mapping[str, Any], spec: GuardSpec,
                       rc: Mapping[str, Any], ours: Mapping[str, Mapping[str, Any]]) -> None:
    """One PodDisruptionBudget per guarded worker group, compared every
    cycle with ``ours`` (MemoryGuard's budgets as listed) and written only
    when it differs (see budgets.py for its shape)."""
    name = rc["metadata"]["name"]
    desired = desired_replicas(rc)
    for group, _, _ in patches.templates(rc, include_head=False):
        if spec.selection.worker_groups and group not in spec.selection.worker_groups:
            continue
        wanted = budgets.wanted_pdb(namespace=namespace, cluster=name, group=group,
                                    desired_pods=desired.get((name, group), 0),
                                    max_unavailable=spec.pdb.max_unavailable, owner=owner_ref(guard))
        pdb = wanted["metadata"]["name"]
        current = ours.get(pdb)
        if current is None:
            try:
                await kube.create_pdb(namespace, wanted)
            except ApiError as e:
                if not isinstance(e, Conflict):
                    raise
                # Not among ours, yet there: somebody else's budget of that name.
                log.warning("%s: PodDisruptionBudget %s exists and is not MemoryGuard's; left alone", namespace, pdb)
        elif (patch := budgets.pdb_patch(current, wanted)) is not None:
            await kube.patch_pdb(namespace, pdb, patch)


def unknown_groups(spec: GuardSpec, clusters: Sequence[Mapping[str, Any]]) -> list[str]:
    """The spec's workerGroups that no selected RayCluster has (a typo)."""
    have = {group for rc in clusters for group, _, _ in patches.templates(rc, include_head=False)}
    return [g for g in spec.selection.worker_groups if g not in have] if clusters else []


def declared_groups(clusters: Sequence[Mapping[str, Any]]) -> frozenset[tuple[str, str]]:
    """Each selected RayCluster's worker groups, as (cluster, group): the
    groups its spec declares, bounded by it, whatever labels pods carry."""
    return frozenset((rc["metadata"]["name"], group) for rc in clusters
                     for group, _, _ in itertools.islice(patches.templates(rc, include_head=False),
                                                         kuberayrules.MAX_WORKER_GROUPS))


def is_guarded(spec: GuardSpec, p: pi.PodInfo, declared: frozenset[tuple[str, str]]) -> bool:
    """The head if the guard includes it; a worker of a group its RayCluster
    declares (and the guard selects). A pod labelled with a group its
    cluster does not declare is not KubeRay's: anyone who may create pods
    could label a thousand so, each a group of metric series of its own
    (issue 63, 6)."""
    if p.is_head:
        return spec.policy.include_head
    if (p.cluster, p.group) not in declared:
        return False
    return not spec.selection.worker_groups or p.group in spec.selection.worker_groups


def gcs_address(rc: Mapping[str, Any], pods: Sequence[pi.PodInfo]) -> str | None:
    head = next((p for p in pods if p.is_head and p.cluster == rc["metadata"]["name"] and p.ip), None)
    if head is None:
        return None
    params = ((rc.get("spec") or {}).get("headGroupSpec") or {}).get("rayStartParams") or {}
    port = str(params.get("port", "6379"))
    return f"{head.ip}:{port}" if port.isdigit() else None
