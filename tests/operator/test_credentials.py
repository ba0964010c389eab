"""Whose token the operator runs with: the release's ServiceAccount, read
from the token's claims, owns the Leases the operator creates, so they go
with the release (shards.py, leader.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from memoryguard_kuberay.operator.api.credentials import service_account


def _jwt(claims: Any) -> str:
    def part(doc: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_a_bound_token_names_its_service_account() -> None:
    # As `kubectl create token` and a projected volume issue them.
    token = _jwt({"aud": ["https://kubernetes.default.svc"], "sub": "system:serviceaccount:mg-system:mg",
                  "kubernetes.io": {"namespace": "mg-system", "serviceaccount": {"name": "mg", "uid": "u-1"},
                                    "pod": {"name": "mg-abc", "uid": "p-1"}}})
    assert service_account(token) == ("mg-system", "mg", "u-1")


def test_a_legacy_secret_token_names_its_service_account() -> None:
    token = _jwt({"iss": "kubernetes/serviceaccount", "kubernetes.io/serviceaccount/namespace": "ns",
                  "kubernetes.io/serviceaccount/service-account.name": "sa",
                  "kubernetes.io/serviceaccount/service-account.uid": "u-2"})
    assert service_account(token) == ("ns", "sa", "u-2")


@pytest.mark.parametrize("token", [None, "", "not-a-jwt", "a.b.c", _jwt(["a list"]), _jwt({"sub": "someone"}),
                                   _jwt({"kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa"}}}),
                                   "x." + "A" * 20000 + ".y"])
def test_any_other_credential_names_none(token: str | None) -> None:
    assert service_account(token) is None
