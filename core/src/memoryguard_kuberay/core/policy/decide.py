"""``decide``: the one policy the operator, ``simulate`` and the tests share.

Rules are checked in order of urgency; a rule fires when all detectors of
any one of its groups fire (AND within a group, OR across groups). A rotation
then passes the gates that protect the cluster (enabled, head, maxUnavailable,
cooldown, hourly cap) or becomes a deferred ``none`` that says what it waits
for. Purely computational: no I/O, no clock (``now_s`` is an argument).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from memoryguard_kuberay.core.policy import detectors
from memoryguard_kuberay.core.policy.projection import Verdict
from memoryguard_kuberay.core.policy.types import Action, Decision, Evidence, Reason, RotationHistory
from memoryguard_kuberay.core.policy.window import PodWindow
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.units import fmt_bytes, fmt_duration, fmt_oom_in, fmt_rate

Observation = detectors.Observation
Detector = Callable[[Observation], Verdict]


@dataclasses.dataclass(frozen=True)
class Rule:
    reason: Reason
    action: Action
    groups: tuple[tuple[Detector, ...], ...]


RULES: tuple[Rule, ...] = (
    Rule(Reason.OOM_KILLED, Action.ROTATE, ((detectors.oom_kills,),)),
    Rule(Reason.RAPID_GROWTH, Action.ROTATE, ((detectors.rapid_growth,),)),
    Rule(Reason.CRITICAL_USAGE, Action.ROTATE, ((detectors.critical_usage,),)),
    Rule(Reason.MEMORY_PRESSURE, Action.ROTATE, ((detectors.pressure, detectors.high_usage),)),
    Rule(Reason.PROJECTED_OOM, Action.ROTATE, ((detectors.creep,), (detectors.floor_rising,),
                                               (detectors.peaks_rising,))),
    Rule(Reason.NODE_MEMORY_RUNNING_OUT, Action.ROTATE, ((detectors.node_running_out,),)),
    Rule(Reason.OBJECT_STORE_FULL, Action.ROTATE, ((detectors.store_full,),)),
    Rule(Reason.OBJECT_STORE_FILLING, Action.ROTATE, ((detectors.store_filling,),)),
    Rule(Reason.GROWTH_PLATEAU, Action.REMEDIATE, ((detectors.plateau,),)),
)


def _fire(rule: Rule, obs: Observation) -> list[str] | None:
    for group in rule.groups:
        verdicts = [det(obs) for det in group]
        if all(v.fired for v in verdicts):
            return [v.note for v in verdicts if v.note]
    return None


def evidence_for(obs: Observation) -> Evidence:
    window, now_s = obs.window, obs.now_s
    last = window.last
    if last is None:
        return Evidence()
    ws_proj, st_proj = obs.creep[1], obs.filling[1]
    if obs.rapid[0].fired:
        ws_proj = obs.rapid[1]
    elif obs.floor[0].fired and not obs.creep[0].fired:
        ws_proj = obs.floor[1]
    elif obs.peaks[0].fired and not obs.creep[0].fired:
        ws_proj = obs.peaks[1]
    node = window.node_ceiling_bytes if not last.memory_max_bytes else None
    if node is not None and obs.node[1] is not None:
        ws_proj = obs.node[1]
    return Evidence(
        used_bytes=last.unreclaimable_bytes,
        working_set_bytes=last.working_set_bytes,
        limit_bytes=last.memory_max_bytes,
        slope_bytes_per_h=ws_proj.slope_per_s * 3600 if ws_proj else None,
        projected_oom_s=ws_proj.eta_s if ws_proj and ws_proj.sustained else None,
        store_fraction=last.store_fraction,
        spilled_bytes=last.plasma_spilled_bytes,
        store_projected_full_s=st_proj.eta_s if st_proj and st_proj.sustained else None,
        psi_some_avg10_pct=last.psi_some_avg10_pct,
        psi_full_avg10_pct=last.psi_full_avg10_pct,
        oom_kills_seen=window.oom_kills_seen,
        held_for_s=window.critical.held_for(now_s) or None,
        node_ceiling_bytes=int(node) if node is not None else None,
        watched_oom_s=min((p.eta_s for p in (obs.creep[1], obs.rapid[1])
                           if p is not None and p.watching and p.eta_s is not None), default=None),
    )


def summary(ev: Evidence) -> str:
    """``in use 41.2 GiB of 64.0 GiB (64%), +4.4 GiB/h``: memory in use is
    what the kernel cannot reclaim (anon + shmem), page cache aside."""
    if ev.used_bytes is None:
        return "memory in use unknown"
    text = f"in use {fmt_bytes(ev.used_bytes)}"
    if ev.limit_bytes:
        text += f" of {fmt_bytes(ev.limit_bytes)} ({ev.used_bytes / ev.limit_bytes:.0%})"
    if ev.slope_bytes_per_h is not None:
        text += f", {fmt_rate(ev.slope_bytes_per_h)}"
    if ev.store_fraction is not None:
        text += f", object store {ev.store_fraction:.0%}"
    return text


def _gate(settings: PolicySettings, history: RotationHistory, now_s: float) -> str | None:
    """Why a wanted rotation must wait, or None if it may go ahead."""
    if not settings.rotation_enabled:
        return "rotation is disabled for this guard"
    if history.is_head and not settings.include_head:
        return "this is the head pod and the guard does not include the head"
    hosts = history.hosts_per_replica
    if hosts > 1 and history.group_in_flight + history.group_short + hosts > settings.max_unavailable:
        return (f"a multi-host replica goes as one unit of {hosts} pods (KubeRay deletes its other hosts once one "
                f"is gone), and the group may lose at most {settings.max_unavailable} (maxUnavailable)"
                + (f", {history.group_short} short" if history.group_short else "")
                + (f", {history.group_in_flight} rotating" if history.group_in_flight else ""))
    if history.group_in_flight >= settings.max_unavailable:
        return (f"{history.group_in_flight} pod(s) of the group already rotating "
                f"(maxUnavailable {settings.max_unavailable})")
    if history.group_in_flight + history.group_short >= settings.max_unavailable:
        return (f"the group is short of {history.group_short} ready pod(s)"
                + (f" and {history.group_in_flight} rotating" if history.group_in_flight else "")
                + f" (maxUnavailable {settings.max_unavailable})")
    if history.group_last_rotation_s is not None and now_s - history.group_last_rotation_s < settings.cooldown_s:
        left = settings.cooldown_s - (now_s - history.group_last_rotation_s)
        return f"group cooling down for another {fmt_duration(left)}"
    if history.guard_rotations_last_hour >= settings.max_rotations_per_hour:
        return (f"{history.guard_rotations_last_hour} rotation(s) in the last hour "
                f"(cap {settings.max_rotations_per_hour})")
    return None


def decide(*, settings: PolicySettings, window: PodWindow, history: RotationHistory, now_s: float) -> list[Decision]:
    """Decisions for one pod now: at most one rotation (or its deferral) and
    at most one remediation; a single ``none`` when there is nothing to do."""
    last = window.last
    if last is None:
        return [Decision(Action.NONE, Reason.NO_SAMPLES, "no samples from the sidecar yet", Evidence())]
    obs = Observation.at(window, settings, now_s)  # the trend projections, once per decision
    ev = evidence_for(obs)
    age = now_s - last.time_s
    if age > settings.stale_after_s:
        return [Decision(Action.NONE, Reason.SAMPLES_STALE,
                         f"newest sample is {fmt_duration(age)} old; not acting on stale data", ev)]
    if history.pod_rotation_in_flight:
        return [Decision(Action.NONE, Reason.ROTATION_IN_PROGRESS, "rotation in progress", ev)]

    out: list[Decision] = []
    wanted: tuple[Reason, list[str]] | None = None
    if history.user_requested:
        wanted = (Reason.USER_REQUESTED, ["rotation requested with the memoryguard.io/rotate annotation"])
    remediate: tuple[Reason, list[str]] | None = None
    for rule in RULES:
        if rule.action is Action.ROTATE and wanted is not None:
            continue
        if rule.action is Action.REMEDIATE and (remediate is not None or history.remediation_advised):
            continue
        notes = _fire(rule, obs)
        if notes is None:
            continue
        if rule.action is Action.ROTATE:
            wanted = (rule.reason, notes)
        else:
            remediate = (rule.reason, notes)

    if wanted is None and history.ladder_replace:
        wanted = (Reason.LADDER_EXHAUSTED, ["the ladder's reclaim and shed did not slow its growth toward the limit"])
    if wanted is not None:
        reason, notes = wanted
        message = f"{summary(ev)}: {'; '.join(notes)}"
        blocked = _gate(settings, history, now_s)
        if blocked is not None:
            out.append(Decision(Action.NONE, Reason.ROTATION_DEFERRED,
                                f"would rotate ({reason.value}): {message}; waiting: {blocked}", ev))
        else:
            out.append(Decision(Action.ROTATE, reason, message, ev, dry_run=settings.dry_run))
    if remediate is not None and (wanted is None or out[0].action is not Action.ROTATE):
        reason, notes = remediate
        out.append(Decision(Action.REMEDIATE, reason,
                            f"{summary(ev)}: {'; '.join(notes)}; jemalloc (LD_PRELOAD) usually returns "
                            "fragmented memory, a bounded cache needs its bound lowered", ev, dry_run=settings.dry_run))
    if out:
        return out
    if not last.memory_max_bytes:
        if ev.node_ceiling_bytes is not None:
            tail = f", {fmt_oom_in(ev.projected_oom_s)}" if ev.projected_oom_s is not None else ""
            return [Decision(Action.NONE, Reason.NO_LIMIT, f"{summary(ev)}; no memory limit: judged against the "
                             f"node, {fmt_bytes(ev.node_ceiling_bytes)} reachable now{tail}", ev)]
        return [Decision(Action.NONE, Reason.NO_LIMIT, f"{summary(ev)}; no memory limit to project to", ev)]
    if last.used_fraction is not None and last.used_fraction >= settings.critical_fraction:
        # At the limit's edge, before criticalForSeconds have passed (or in
        # warm-up): not a rotation yet, but never "Healthy" (issue 39: a real
        # pod read Healthy at 97% until the kernel killed it).
        held = window.critical.held_for(now_s)
        return [Decision(Action.NONE, Reason.NEAR_LIMIT,
                         f"{summary(ev)}; at or above {settings.critical_fraction:.0%} of the limit for "
                         f"{fmt_duration(held)}, rotated once it holds {fmt_duration(settings.critical_for_s)}", ev)]
    if window.age_s < settings.trend_min_span_s:
        return [Decision(Action.NONE, Reason.WARMING_UP,
                         f"{summary(ev)}; trend needs {fmt_duration(settings.trend_min_span_s)} of history", ev)]
    if ev.projected_oom_s is not None:
        tail = f", {fmt_oom_in(ev.projected_oom_s)}"
    elif ev.watched_oom_s is not None:
        tail = f"; a new climb, {fmt_oom_in(ev.watched_oom_s)} at its pace, watched before it is acted on"
    else:
        tail = ""
    return [Decision(Action.NONE, Reason.HEALTHY, f"{summary(ev)}{tail}", ev)]


def urgency(decision: Decision | None) -> float:
    """Seconds until the harm a rotation would prevent (0: it is here), so
    that when several pods of a group want one, the nearest their OOM or a
    full object store goes first."""
    if decision is None:
        return float("inf")
    ev = decision.evidence
    if decision.reason in (Reason.PROJECTED_OOM, Reason.RAPID_GROWTH, Reason.LADDER_EXHAUSTED) \
            and ev.projected_oom_s is not None:
        return ev.projected_oom_s
    if decision.reason is Reason.OBJECT_STORE_FILLING and ev.store_projected_full_s is not None:
        return ev.store_projected_full_s
    return 0.0
