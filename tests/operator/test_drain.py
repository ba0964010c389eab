"""The drain adapter against a real two-node Ray on loopback: a head at
127.0.0.3 and a second node at 127.0.0.2 (see tests/rayfixture.py). The second node is drained (and
leaves the cluster); the head is never drained. And against a GCS that is
not there: the answer comes at the adapter's timeout, and the Ray client's
own long wait holds up nothing else."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from memoryguard_kuberay.operator.rotations.drain import RayGcsDrainer

from ..procs import free_port, wait_until
from ..rayfixture import ray_head, ray_worker_node

pytestmark = pytest.mark.ray


def _alive(gcs: str) -> dict[str, bool]:
    import ray._raylet

    nodes = ray._raylet.GcsClient(address=gcs).get_all_node_info(timeout=5)
    return {info.node_manager_address: info.state == 0 for info in nodes.values()}


def test_drain_second_node_not_head() -> None:
    with ray_head("127.0.0.3") as head, ray_worker_node(head, ip="127.0.0.2"):
        wait_until(lambda: _alive(head.gcs_address).get("127.0.0.2"), 60, what="the second node to join")
        d = RayGcsDrainer(rpc_timeout_s=10)
        refused = asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.3", deadline_s=30,
                                      reason="test"))
        assert not refused.ok and "head" in refused.message
        assert asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.9", deadline_s=30,
                                   reason="test")).message == "no alive Ray node at 127.0.0.9"
        result = asyncio.run(d.drain(gcs_address=head.gcs_address, node_ip="127.0.0.2", deadline_s=30,
                                     reason="memoryguard-kuberay: projected OOM"))
        assert result.ok, result.message
        # An idle node drains at once: its raylet exits and the GCS marks it dead.
        wait_until(lambda: _alive(head.gcs_address).get("127.0.0.2") is False, 60, what="the node to be drained")
        assert _alive(head.gcs_address)["127.0.0.3"] is True


@pytest.mark.parametrize("gcs_kind", ["nothing listens", "accepts, never answers"])
async def test_unreachable_gcs_answers_at_the_timeout_and_holds_up_nothing(gcs_kind: str) -> None:
    host = "127.0.0.41" if gcs_kind == "nothing listens" else "127.0.0.51"
    mute = socket.socket()
    if gcs_kind == "nothing listens":
        gcs = f"{host}:{free_port(host)}"
    else:  # the kernel completes the handshakes; nobody ever reads or writes
        mute.bind((host, 0))
        mute.listen(16)
        gcs = f"{host}:{mute.getsockname()[1]}"
    nodes = [f"{host[:-1]}{i}" for i in (2, 3, 4)]  # this case's own node IPs, so its own threads
    d = RayGcsDrainer(rpc_timeout_s=1.0, max_pending=2)
    loop = asyncio.get_running_loop()
    try:
        t0 = time.monotonic()
        first = await asyncio.gather(*(d.drain(gcs_address=gcs, node_ip=ip, deadline_s=60, reason="test")
                                       for ip in nodes[:2]))
        answered_s = time.monotonic() - t0
        assert [r.ok for r in first] == [False, False]
        assert all("timed out after 1 s" in r.message for r in first), first
        # Ray's client goes on waiting for the GCS (about 35 s) in the
        # abandoned threads; while it does, a third drain is skipped at once...
        assert d.running == 2
        third = await d.drain(gcs_address=gcs, node_ip=nodes[2], deadline_s=60, reason="test")
        assert not third.ok and "2 earlier drains still wait on the GCS" in third.message
        # ... the loop's default executor (DNS lookups for the API) is free ...
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: "free"), 1.0) == "free"
        # ... and nothing will wait for those threads at exit.
        hung = [t for t in threading.enumerate() if t.name in {f"ray-drain-{ip}" for ip in nodes}]
        assert len(hung) == 2 and all(t.daemon for t in hung)
        # The answers came at the adapter's timeout, not the client's 35 s.
        assert answered_s < 10, f"answered after {answered_s:.1f} s"
    finally:
        mute.close()
