"""The drain adapter against a real two-node Ray on loopback: a head at
127.0.0.3 and a second node at 127.0.0.2 (see tests/rayfixture.py). The second node is drained (and
leaves the cluster); the head is never drained."""

from __future__ import annotations

import asyncio

import pytest

from memoryguard.operator.drain import RayGcsDrainer

from ..procs import wait_until
from ..rayfixture import ray_head, ray_worker_node

pytestmark = pytest.mark.ray


def _alive(gcs: str) -> dict[str, bool]:
    import ray._raylet

    nodes = ray._raylet.GcsClient(address=gcs).get_all_node_info(timeout=5)
    return {info.node_manager_address: info.state == 0 for info in nodes.values()}


def test_drain_second_node_not_head() -> None:
    with ray_head("127.0.0.3") as head, ray_worker_node(head, ip="127.0.0.2"):
        wait_until(lambda: _alive(head.gcs_address).get("127.0.0.2"), 60, what="the second node to join")
        d = RayGcsDrainer()
        refused = asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.3", deadline_s=30,
                                      reason="test", timeout_s=10))
        assert not refused.ok and "head" in refused.message
        assert asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.9", deadline_s=30,
                                   reason="test", timeout_s=10)).message == "no alive Ray node at 127.0.0.9"
        result = asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.2", deadline_s=30,
                                     reason="memoryguard: projected OOM", timeout_s=10))
        assert result.ok, result.message
        # An idle node drains at once: its raylet exits and the GCS marks it dead.
        wait_until(lambda: _alive(head.gcs_address).get("127.0.0.2") is False, 60, what="the node to be drained")
        assert _alive(head.gcs_address)["127.0.0.3"] is True
