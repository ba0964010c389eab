"""Draining a Ray node before its pod is evicted, through the head's GCS
(``DrainNode``, reason PREEMPTION, which a raylet cannot refuse, with a
deadline). Best effort: a drain that fails or times out is reported and the
rotation goes on to the eviction, which is what makes the pod go.

The Ray node is found by its IP in the GCS node table (the pod IP under
KubeRay). ``ray`` is imported only when a drain is made; the blocking RPCs
run in a worker thread under a timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class DrainResult:
    ok: bool
    message: str
    node_id: str | None = None
    skipped: bool = False  # draining is switched off: nothing to report


class Drainer(Protocol):
    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    timeout_s: float) -> DrainResult: ...


class RayGcsDrainer:
    """Drains through ``ray._raylet.GcsClient`` (the call ``ray drain-node``
    makes, without its habit of starting a local Ray when no node is given)."""

    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    timeout_s: float = 15.0) -> DrainResult:
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._drain, gcs_address, node_ip, deadline_s, reason, timeout_s), timeout_s + 1)
        except TimeoutError:
            return DrainResult(False, f"drain timed out after {timeout_s:g} s")
        except Exception as exc:  # any failure of a best-effort step is a message, not a crash
            return DrainResult(False, f"drain failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _drain(gcs_address: str, node_ip: str, deadline_s: float, reason: str, timeout_s: float) -> DrainResult:
        import ray._raylet
        from ray.core.generated import autoscaler_pb2

        client = ray._raylet.GcsClient(address=gcs_address)  # type: ignore[attr-defined]
        nodes = client.get_all_node_info(timeout=timeout_s)
        alive = [(nid, info) for nid, info in nodes.items()
                 if info.node_manager_address == node_ip and info.state == 0]
        if not alive:
            return DrainResult(False, f"no alive Ray node at {node_ip}")
        workers = [(nid, info) for nid, info in alive if not info.is_head_node]
        if not workers:
            return DrainResult(False, f"the Ray node at {node_ip} is the head; not draining it")
        nid, _ = workers[0]
        deadline_ms = int((time.time() + deadline_s) * 1000)
        accepted, why = client.drain_node(nid.hex(), autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
            "DRAIN_NODE_REASON_PREEMPTION"), reason[:256], deadline_ms)
        if not accepted:
            return DrainResult(False, f"drain refused: {why}", nid.hex())
        return DrainResult(True, f"drain of node {nid.hex()[:12]} accepted, deadline {deadline_s:.0f} s", nid.hex())


class NoDrainer:
    """For clusters (and the emulator) without a reachable GCS."""

    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    timeout_s: float = 15.0) -> DrainResult:
        return DrainResult(False, "draining disabled", skipped=True)
