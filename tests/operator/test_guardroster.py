"""A namespace's guards: listed once for all of them, and at most the chart's
``guardsPerNamespace`` served, the oldest first (issue 24: 1,001 guards each
listing every guard every cycle made the operator unresponsive to all)."""

from __future__ import annotations

from typing import Any

import pytest

from memoryguard_kuberay.operator import guardroster


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

    async def list_guards(self, namespace: str) -> list[dict[str, Any]]:
        self.lists += 1
        return GUARDS


async def test_many_guards_one_list() -> None:
    import asyncio

    kube = CountingKube()
    roster = guardroster.GuardRoster(kube, ttl_s=60)  # type: ignore[arg-type]
    await asyncio.gather(*(roster.guards("ns") for _ in range(1001)))
    assert kube.lists == 1
