"""``top``'s view (issue 26, 5) from guard documents as the API returns
them, hostile ones included: nearest harm first, what a person needs per
pod, each guard's last actions newest first."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from memoryguard_kuberay.operator.cli import topview

GIB = 1024**3


def _guard(ns: str, name: str, pods: dict[str, Any], rotations: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "status": {"pods": pods, "rotations": rotations or {}}}


def _pod(ws: float | None, eta: float | None, verdict: str, slope: float | None = 0.0) -> dict[str, Any]:
    return {"group": "workers", "workingSetBytes": ws, "limitBytes": 32 * GIB, "slopeBytesPerHour": slope,
            "projectedOOMSeconds": eta, "verdict": verdict, "lastDecision": "..."}


GUARDS = [
    _guard("ray-a", "g1", {"a-far": _pod(10 * GIB, 30000, "Healthy", GIB), "a-near": _pod(28 * GIB, 900,
                                                                                         "ProjectedOOM", 4 * GIB),
                           "a-full": _pod(30 * GIB, None, "CriticalUsage"), "a-idle": _pod(2 * GIB, None, "Healthy")},
           {"recent": [{"pod": "a-old", "reason": "ProjectedOOM", "finishedAt": 1_000.0, "outcome": "rotated"},
                       {"pod": "a-failed", "reason": "OOMKilled", "finishedAt": 3_000.0, "outcome": "failed"}],
            "inFlight": [{"pod": "a-near", "reason": "ProjectedOOM", "phase": "draining", "requestedAt": 4_000.0}]}),
    _guard("ray-b", "g2", {"b-mid": _pod(20 * GIB, 5000, "Healthy", 2 * GIB), "b-blind": _pod(None, None,
                                                                                               "SidecarUnreachable",
                                                                                               None)},
           {"recent": [{"pod": "b-done", "reason": "RapidGrowth", "finishedAt": 2_000.0, "outcome": "rotated"}]}),
    # What a hostile or broken status holds: never a crash, never a line.
    {"metadata": {"namespace": "ray-c", "name": "odd"}, "status": {"pods": ["not", "a", "map"], "rotations": 7}},
    {"metadata": {"namespace": "ray-c", "name": "odder"},
     "status": {"pods": {"x": "not a map", "y": {"workingSetBytes": "lots", "projectedOOMSeconds": float("nan"),
                                                 "limitBytes": True}}}},
    {"metadata": {"namespace": "ray-c", "name": "new"}},
]


def test_pods_nearest_harm_first_then_the_fullest() -> None:
    order = [p.pod for p in topview.pod_lines(GUARDS)]
    assert order[:3] == ["a-near", "b-mid", "a-far"]  # by projected OOM
    assert order[3:5] == ["a-full", "a-idle"]  # no projection: the fullest first
    assert set(order[5:]) == {"b-blind", "y"}  # nothing known
    y = next(p for p in topview.pod_lines(GUARDS) if p.pod == "y")
    assert (y.working_set, y.limit, y.eta_s) == (None, None, None)  # garbage is unknown, not a number


def test_last_actions_newest_first_across_guards() -> None:
    acts = [what for _, what in topview.actions(GUARDS)]
    assert acts == ["ray-a/g1: rotating a-near (ProjectedOOM; draining)", "ray-a/g1: failed a-failed (OOMKilled)",
                    "ray-b/g2: rotated b-done (RapidGrowth)", "ray-a/g1: rotated a-old (ProjectedOOM)"]


def test_the_screen_says_what_a_person_needs_per_pod() -> None:
    out = io.StringIO()
    Console(file=out, width=160).print(topview.screen(GUARDS, title="T", limit=4))
    text = out.getvalue()
    lines = text.splitlines()
    near = next(ln for ln in lines if "a-near" in ln and "ray-a/g1" in ln)
    assert "28.0 GiB / 32.0 GiB" in near and "+4.0 GiB/h" in near and "15 m" in near and "ProjectedOOM" in near
    assert "... and 3 more pod(s)" in text  # the limit, said (7 pods known, 4 shown)
    assert text.index("a-near") < text.index("b-mid") < text.index("a-far")
    assert "last actions:" in text and "1970-01-01 01:06:40  ray-a/g1: rotating a-near" in text


def test_nothing_to_show_is_said() -> None:
    out = io.StringIO()
    Console(file=out, width=120).print(topview.screen([], title="T"))
    assert "no guarded pods" in out.getvalue() and "last actions: none yet" in out.getvalue()


def test_verdicts_are_coloured_from_the_reasons_the_status_writes() -> None:
    # The colours were once a hand-typed list that named "OOMKilled" (the
    # status writes "OOMKillSeen") and a "FloorRising" no status ever holds.
    from memoryguard_kuberay.core.policy import Reason

    assert topview._verdict(Reason.OOM_KILLED.value).style == "bold red"
    assert topview._verdict("BadAnswer").style == "yellow" and topview._verdict("Healthy").style == "green"
    assert "FloorRising" not in topview.DANGER


def test_a_heat_map_column_is_each_groups_nearest_projection() -> None:
    def pod(group: str, eta: Any) -> dict[str, Any]:
        return {"group": group, "projectedOOMSeconds": eta, "workingSetBytes": 1, "limitBytes": 2}

    g = {"metadata": {"namespace": "ns", "name": "g"}, "status": {"pods": {
        "a": pod("serve", 7200), "b": pod("serve", 600), "c": pod("train", None), "d": pod("train", "soon")}}}
    assert topview.group_risk([g, {"status": "broken"}]) == {"ns/g serve": 600.0, "ns/g train": None}


def test_at_the_widths_people_use_no_pod_name_is_cut_and_the_why_is_shown() -> None:
    """Issue 42, 6: at 100 and 120 columns pod names were cut (a cut name
    cannot be pasted into kubectl); a pod being rotated left the table the
    moment it was deleted; the poll's error was not shown."""
    long_pod = "raycluster-kuberay-workergroup-worker-abcde"
    blind = {**_pod(None, None, "SidecarUnreachable", None), "sidecarError": "Connect call failed ('10.0.0.9', 9108)"}
    guards = [_guard("ray-production", "leak-guard-for-serving", {long_pod: _pod(28 * GIB, 900, "ProjectedOOM"),
                                                                  "x-worker-blind-pod-name": blind},
                     {"inFlight": [{"pod": "gone-worker-being-rotated", "reason": "ProjectedOOM",
                                    "phase": "replacing", "requestedAt": 1.0}]})]
    for width in (100, 120, 240):
        out = io.StringIO()
        Console(file=out, width=width).print(topview.screen(guards, title="T"))
        text = out.getvalue()
        assert all(len(line) <= width for line in text.splitlines()), width
        for name in (long_pod, "x-worker-blind-pod-name", "gone-worker-being-rotated", "Rotating (replacing)",
                     "SidecarUnreachable", "ProjectedOOM"):
            assert name in text, (width, name, text)
        # What is left out at a width is said; at 240 nothing is, the poll's error included.
        assert ("left out at this width" in text) == (width < 240), text
        assert ("Connect call failed" in text) == (width == 240), text


def test_a_guard_nobody_guards_reads_as_such() -> None:
    # Issue 61, 2: after the operator stopped, top showed the frozen figures
    # as current. A guard whose lastCycleTime is older than two heartbeats and
    # a cycle (or that has none) reads Unknown, with a line saying since when.
    from memoryguard_kuberay.operator import status
    from memoryguard_kuberay.operator.clock import micro_time

    now = 1_800_000_000.0
    fresh, old = (_guard("ray-a", n, {f"{n}-w": _pod(10 * GIB, 30000, "Healthy", GIB)}) for n in ("fresh", "old"))
    fresh["status"]["lastCycleTime"] = micro_time(now - 30)
    old["status"]["lastCycleTime"] = micro_time(now - status.stale_after_s(15) - 1)
    never = _guard("ray-a", "never", {})
    assert topview.unguarded([fresh, old, never], now) == {("ray-a", "old"): status.stale_after_s(15) + 1,
                                                           ("ray-a", "never"): None}
    out = io.StringIO()
    Console(file=out, width=160).print(topview.screen([fresh, old, never], title="t", now=now))
    text = out.getvalue()
    row = {n: next(line for line in text.splitlines() if f"{n}-w" in line) for n in ("fresh", "old")}
    assert "Healthy" in row["fresh"] and "Unknown" in row["old"], text
    assert "NOT GUARDED: ray-a/old: no operator has run its cycle for 2 m" in text, text
    assert "NOT GUARDED: ray-a/never" in text and "NOT GUARDED: ray-a/fresh" not in text


def test_at_80_columns_no_verdict_is_cut() -> None:
    """Issue 61, 6: at 80 columns VERDICT read "PodNotRu", "Proj": where the
    table cannot fit whole, a pod a line, its verdict and figures under it."""
    long_pod = "raycluster-kuberay-workergroup-worker-abcde"
    guards = [_guard("ray-production", "leak-guard-for-serving",
                     {long_pod: _pod(28 * GIB, 900, "ProjectedOOM"), "w-2": _pod(10 * GIB, None, "PodNotRunning")})]
    out = io.StringIO()
    Console(file=out, width=80).print(topview.screen(guards, title="T"))
    text = out.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    lines = text.splitlines()
    at = lines.index(long_pod)
    assert lines[at + 1].split() == ["ProjectedOOM", "OOM", "in", "15", "m", "28.0", "GiB", "88%"], text
    assert "PodNotRunning" in text and "a pod a line at this width" in text


def test_a_guard_with_no_pods_is_listed_with_why() -> None:
    # Issue 61, 6: a guard whose cluster was not found, or whose spec was
    # refused, was not listed at all.
    missing = {"metadata": {"namespace": "ray-a", "name": "typo"}, "status": {"pods": {}, "conditions": [
        {"type": "Ready", "status": "False", "reason": "ClusterNotFound",
         "message": "RayCluster ray-a/raycluter not found; nearest: raycluster"}]}}
    out = io.StringIO()
    Console(file=out, width=160).print(topview.screen([missing, *GUARDS[:1]], title="T"))
    text = out.getvalue()
    assert "ray-a/typo: no pods guarded: ClusterNotFound: RayCluster ray-a/raycluter not found" in text, text
    assert "ray-a/g1: no pods guarded" not in text


def test_a_dry_runs_plans_are_among_the_last_actions() -> None:
    # Issue 61, 6: in dry run "last actions: none yet" stayed while rotations and steps were planned.
    from memoryguard_kuberay.operator.clock import micro_time

    g = _guard("ray-a", "dry", {"w": _pod(30 * GIB, 600, "ProjectedOOM")})
    g["status"].update(lastActionBrief="WorkerRotationPlanned w", lastActionTime=micro_time(5_000.0))
    assert topview.actions([g]) == [(5_000.0, "ray-a/dry: WorkerRotationPlanned w")]
    out = io.StringIO()
    Console(file=out, width=160).print(topview.screen([g], title="T"))
    assert "last actions: none yet" not in out.getvalue() and "ray-a/dry: WorkerRotationPlanned w" in out.getvalue()
