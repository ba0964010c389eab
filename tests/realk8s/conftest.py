"""The real control plane tier (issue 22): one kube-apiserver,
kube-controller-manager and etcd for the session, started here on free
ports in a state directory of this run's own and stopped by PID at the end.
Skipped, saying why, where ``../shared/realk8s`` is absent. (The fixture
``real`` is in tests/conftest.py: the contract table uses it too.)"""

from __future__ import annotations

import pytest

from . import controlplane

pytestmark = pytest.mark.realk8s


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if controlplane.kit_present():
        return
    skip = pytest.mark.skip(reason=controlplane.ABSENT)
    for item in items:
        if "realk8s" in item.nodeid:
            item.add_marker(skip)


