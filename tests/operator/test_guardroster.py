"""A namespace's guards: listed once for all of them, and at most the chart's
``guardsPerNamespace`` served, the oldest first (issue 24: 1,001 guards each
listing every guard every cycle made the operator unresponsive to all)."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.operator.cycle import guardroster


def _g(name: str, created: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"u-{name}", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta}


GUARDS = [_g("c", "2026-01-03T00:00:00Z"), _g("a", "2026-01-01T00:00:00Z"), _g("b", "2026-01-02T00:00:00Z"),
          _g("gone", "2025-12-01T00:00:00Z", deleting=True)]


@pytest.mark.parametrize("me, limit, refused", [
    ("a", 2, False),  # the oldest
    ("b", 2, False),
    ("c", 2, True),   # the third by age, over a limit of 2 (a guard being deleted does not count)
    ("c", 3, False),
    ("x", 1, False),  # not listed yet (just created): judged on the next list
])
def test_the_oldest_are_served(me: str, limit: int, refused: bool) -> None:
    why = guardroster.refusal(GUARDS, _g(me, ""), limit)
    assert (why is not None) == refused
    if why:
        assert "number 3 by age" in why and "guardsPerNamespace" in why


class CountingKube:
    def __init__(self) -> None:
        self.lists = 0

    async def list_guard_identities(self, namespace: str) -> list[dict[str, Any]]:
        self.lists += 1
        return GUARDS


async def test_many_guards_one_list() -> None:
    import asyncio

    kube = CountingKube()
    roster = guardroster.GuardRoster(kube, ttl_s=60)  # type: ignore[arg-type]
    await asyncio.gather(*(roster.guards("ns") for _ in range(1001)))
    assert kube.lists == 1


def test_the_guards_are_listed_in_pages() -> None:
    """Issue 24: a tenant's thousands of guards are read a page at a time, as
    client-go's pager reads a LIST, never in one answer of them all."""
    import asyncio

    from memoryguard_kuberay.operator.api.credentials import Credentials
    from memoryguard_kuberay.operator.api.kube import LIST_PAGE, Kube

    asked: list[dict[str, str]] = []
    total = 2 * LIST_PAGE + 7

    async def request(method: str, path: str, *, params: dict[str, str] | None = None, **_: object) -> object:
        q = dict(params or {})
        asked.append(q)
        start = int(q.get("continue") or 0)
        end = min(total, start + int(q["limit"]))
        return {"metadata": {"resourceVersion": "9", **({"continue": str(end)} if end < total else {})},
                "items": [{"metadata": {"name": f"g{i}"}} for i in range(start, end)]}

    kube = Kube(Credentials(server="http://127.0.0.1:1"))
    kube.request = request  # type: ignore[method-assign,assignment]
    guards = asyncio.run(kube.list_guards("team-a"))
    assert len(guards) == total and [g["metadata"]["name"] for g in guards[-2:]] == [f"g{total - 2}", f"g{total - 1}"]
    assert len(asked) == 3 and all(q["limit"] == str(LIST_PAGE) for q in asked)


def test_a_namespaces_list_is_not_kept_past_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44, 5: a deleted namespace's last list (its guards, padded by a
    tenant) was held for ever; a list past its time goes when another is made."""
    import asyncio

    class Kube:
        async def list_guard_identities(self, namespace: str) -> list[dict[str, Any]]:
            return [{"metadata": {"name": "g", "namespace": namespace}}]

    clock = [1000.0]
    roster = guardroster.GuardRoster(Kube(), ttl_s=5.0)  # type: ignore[arg-type]
    monkeypatch.setattr(guardroster.time, "monotonic", lambda: clock[0])
    asyncio.run(roster.guards("gone"))
    clock[0] += 10.0
    asyncio.run(roster.guards("other"))
    assert set(roster._lists) == {"other"} and set(roster._locks) == {"other"}


def test_a_refused_guard_costs_its_identity_and_only_served_guards_are_read_whole() -> None:
    """Issue 44, 3: every list held every guard whole (status, managed
    fields, kopf's copy of the spec), 0.4 MiB a guard, refused or not. Now
    the roster keeps each guard's identity and age, and reads the spec of a
    served guard older than the one asking, once per generation."""
    import asyncio
    import json

    padded = "x" * 200_000  # what a tenant can put in a guard's annotations
    guards = [{"metadata": {"name": f"g{i}", "uid": f"u{i}", "generation": 1, "creationTimestamp":
                            f"2026-01-01T00:00:{i:02d}Z", "annotations": {"pad": padded},
                            "managedFields": [{"manager": padded}]},
               "spec": {"clusterSelector": {"names": [f"rc{i}"]}}, "status": {"pad": padded}} for i in range(40)]
    got: list[str] = []

    class Kube:
        async def list_guard_identities(self, namespace: str) -> list[dict[str, Any]]:
            return guards

        async def get_guard(self, namespace: str, name: str) -> dict[str, Any]:
            got.append(name)
            return next(g for g in guards if g["metadata"]["name"] == name)

    roster = guardroster.GuardRoster(Kube(), limit=5, ttl_s=60)  # type: ignore[arg-type]
    listed = asyncio.run(roster.guards("ns"))
    assert len(json.dumps(listed)) < 150 * len(guards), len(json.dumps(listed))  # no annotation, field or status
    older = asyncio.run(roster.older_served("ns", guards[3]))  # older and served: g0-g2, identity and spec
    assert older == [{"metadata": {"name": f"g{i}", "uid": f"u{i}", "generation": 1,
                                   "creationTimestamp": f"2026-01-01T00:00:{i:02d}Z"},
                      "spec": {"clusterSelector": {"names": [f"rc{i}"]}}} for i in range(3)]
    assert got == ["g0", "g1", "g2"]
    asyncio.run(roster.older_served("ns", guards[30]))  # refused itself: the served older ones, g0-g4
    assert got == ["g0", "g1", "g2", "g3", "g4"]  # g0-g2 kept from before
    guards[1]["metadata"]["generation"] = 2  # its spec changed: read again
    roster._lists.clear()
    asyncio.run(roster.older_served("ns", guards[30]))
    assert got[5:] == ["g1"]
    assert set(roster._specs["ns"]) == {"u0", "u1", "u2", "u3", "u4"}  # never a refused guard's
