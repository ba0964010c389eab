"""Issue 11 in tables: the shapes the operator writes, checked against what
a real control plane does with them (through the emulator's stand-ins for
the disruption controller and the structural schema)."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.devkit.emulator import disruption, schema
from memoryguard_kuberay.operator import crd
from memoryguard_kuberay.operator import status as st
from memoryguard_kuberay.operator.api import errors
from memoryguard_kuberay.operator.decided import BRIEF_MAX
from memoryguard_kuberay.operator.rotations import budgets

OWNER = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "u", "controller": True}]


def _pods(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"w{i}", "labels": {"ray.io/cluster": "rc", "ray.io/group": "g"},
                          "ownerReferences": OWNER},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(n)]


@pytest.mark.parametrize("desired, max_unavailable, allowed", [
    (3, 1, 1),   # the usual group: one rotation at a time
    (5, 2, 2),
    (1, 1, 1),   # a single worker can still be rotated
    (0, 1, 0),   # scaled to zero: nothing to disrupt, and minAvailable is never negative
])
def test_the_guards_pdb_is_computable_for_raycluster_pods(desired: int, max_unavailable: int, allowed: int) -> None:
    pdb = budgets.wanted_pdb(namespace="ns", cluster="rc", group="g", desired_pods=desired,
                             max_unavailable=max_unavailable, owner={"uid": "x"})
    assert "maxUnavailable" not in pdb["spec"] and isinstance(pdb["spec"]["minAvailable"], int)
    status = disruption.budget_status(pdb, _pods(desired), now=0.0)
    assert status["conditions"][0]["reason"] != "SyncFailed"
    assert status["disruptionsAllowed"] == allowed


def test_the_old_max_unavailable_shape_would_block_every_rotation() -> None:
    old = {"metadata": {"name": "memoryguard-rc-g"},
           "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"ray.io/cluster": "rc", "ray.io/group": "g"}}}}
    status = disruption.budget_status(old, _pods(3), now=0.0)
    assert status["disruptionsAllowed"] == 0 and status["conditions"][0]["reason"] == "SyncFailed"


def test_a_budget_is_patched_only_when_it_differs() -> None:
    want = budgets.wanted_pdb(namespace="ns", cluster="rc", group="g", desired_pods=3, max_unavailable=1,
                              owner={"uid": "x"})
    assert budgets.pdb_patch(want, want) is None
    grown = budgets.wanted_pdb(namespace="ns", cluster="rc", group="g", desired_pods=4, max_unavailable=1,
                               owner={"uid": "x"})
    assert budgets.pdb_patch(want, grown) == {"spec": {"minAvailable": 3, "maxUnavailable": None,
                                                       "selector": want["spec"]["selector"]}}
    old = {"spec": {"maxUnavailable": 1, "selector": want["spec"]["selector"]}}
    assert budgets.pdb_patch(old, want)["spec"]["maxUnavailable"] is None  # type: ignore[index]


def _evaluate(path: str, doc: dict[str, Any]) -> Any:
    """The printer columns' JSONPath, for the shapes our CRD uses."""
    if "[?(" in path:
        field, rest = path.split("[?(@.", 1)
        key, value = rest.split("==", 1)
        value = value.split(")]", 1)[0].strip('"')
        items = _evaluate(field, doc) or []
        hit = next((i for i in items if i.get(key) == value), {})
        return hit.get(rest.split(")].", 1)[1]) if ")]." in rest else hit
    out: Any = doc
    for part in path.strip(".").split("."):
        out = out.get(part) if isinstance(out, dict) else None
    return out


def test_every_printer_column_is_at_most_60_characters_and_a_wide_one_a_brief() -> None:
    long = "WorkerRotationStarted: " + "x" * 300
    brief = "WorkerRotationStarted raycluster-kuberay-workergroup-worker-" + "y" * 80
    decision = Decision(Action.NONE, Reason.HEALTHY, "fine " * 100, Evidence())
    status = st.build(generation=1, clusters=["c"], pods=[st.PodView("p" * 200, "g", decision, None)],
                      spec_error=None, missing_clusters=[], rotations={"total": 12}, last_action=long,
                      last_action_brief=brief, now_iso="2026-11-30T00:00:00Z", previous={})
    # As the cycle writes it beside what build() made (guarding.write_status: the heartbeat).
    status["lastCycleTime"] = "2026-11-30T00:00:00.000000Z"
    obj = {"status": status, "metadata": {"creationTimestamp": "2026-11-30T00:00:00Z"}, "spec": {"dryRun": True}}
    columns = crd.crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    for col in columns:
        value = _evaluate(col["jsonPath"], obj)
        assert value is not None, col["name"]
        # Those of -o wide (priority 1) may hold a whole pod name with its reason (issue 61, 7).
        assert len(str(value)) <= (BRIEF_MAX if col.get("priority") else 60), (col["name"], value)
    assert status["lastAction"] == long  # the whole text stays in status


@pytest.mark.parametrize("section, field, zero_refused, smallest", [
    ("sampling", "timeoutSeconds", True, 0.1),
    ("policy", "minGrowthPercentPerHour", True, 0.01),
])
def test_the_crd_refuses_zero_where_a_fraction_is_the_minimum(section: str, field: str, zero_refused: bool,
                                                              smallest: float) -> None:
    openapi = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def admit(value: float) -> None:
        schema.admit({"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard", "metadata": {"name": "g"},
                      "spec": {"clusterSelector": {"names": ["a"]}, section: {field: value}}}, openapi, kind="MG")

    with pytest.raises(schema.SchemaError, match=f"must be at least {smallest:g}"):
        admit(0)
    admit(smallest)


@pytest.mark.parametrize("status, kind", [
    (404, errors.NotFound), (409, errors.Conflict), (410, errors.Gone), (429, errors.TooManyRequests),
    (500, errors.ServerError), (503, errors.ServerError), (0, errors.ServerError),  # no answer at all
    (422, errors.ApiError), (403, errors.ApiError),
])
def test_api_errors_are_typed_by_what_callers_do_with_them(status: int, kind: type) -> None:
    e = errors.api_error(status, "Reason", "words")
    assert type(e) is kind and isinstance(e, errors.ApiError) and e.status == status
