"""Draining a Ray node before its pod is evicted, through the head's GCS
(``DrainNode``, reason PREEMPTION, which a raylet cannot refuse, with a
deadline). Best effort: a drain that fails or times out is reported and the
rotation goes on to the eviction, which is what makes the pod go.

The Ray node is found by its IP in the GCS node table (the pod IP under
KubeRay). ``ray`` is imported only when a drain is made; the blocking RPCs
run in a thread of their own under a timeout.

Why not ``asyncio.to_thread``: against an unreachable GCS, Ray's client
blocks for about 35 s whatever timeout it is given (it first waits for the
cluster id). The answer is abandoned at ``rpc_timeout_s`` but the thread
runs on; in the loop's default executor (6 threads on 2 cores) a few such
drains would also hold up aiohttp's DNS lookups, i.e. every call to the
Kubernetes API. So each drain gets its own daemon thread (nothing waits for
it at exit), and at most ``max_pending`` of them may be running: past that,
a drain is skipped with a message and the rotation goes on to the eviction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from memoryguard_kuberay.operator.rotations import raynodes

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class DrainResult:
    ok: bool
    message: str
    node_id: str | None = None
    skipped: bool = False  # draining is switched off: nothing to report


class Drainer(Protocol):
    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    pod_name: str = "") -> DrainResult: ...


class RayGcsDrainer:
    """Drains through ``ray._raylet.GcsClient`` (the call ``ray drain-node``
    makes, without its habit of starting a local Ray when no node is given)."""

    def __init__(self, *, rpc_timeout_s: float = 15.0, max_pending: int = 4) -> None:
        self.rpc_timeout_s = rpc_timeout_s
        self.max_pending = max_pending
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        """Drain threads still running (answered or abandoned)."""
        with self._lock:
            return self._running

    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    pod_name: str = "") -> DrainResult:
        if self.running >= self.max_pending:
            return DrainResult(False, f"{self.running} earlier drains still wait on the GCS; not draining {node_ip}")
        try:
            answer = self._in_own_thread(f"ray-drain-{node_ip}", self._drain, gcs_address, node_ip, deadline_s,
                                         reason, self.rpc_timeout_s, pod_name)
            return await asyncio.wait_for(answer, self.rpc_timeout_s + 1)
        except TimeoutError:
            return DrainResult(False, f"drain timed out after {self.rpc_timeout_s:g} s (GCS at {gcs_address})")
        except Exception as exc:  # any failure of a best-effort step is a message, not a crash
            return DrainResult(False, f"drain failed: {type(exc).__name__}: {exc}")

    def _in_own_thread(self, name: str, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, exc: Exception | None) -> None:
            if fut.done():  # abandoned at the timeout
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

        def run() -> None:
            result: T | None = None
            exc: Exception | None = None
            try:
                result = fn(*args)
            except Exception as e:  # handed to the waiting coroutine
                exc = e
            finally:
                with self._lock:
                    self._running -= 1
            try:
                loop.call_soon_threadsafe(settle, result, exc)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        with self._lock:
            self._running += 1
        threading.Thread(target=run, name=name, daemon=True).start()
        return fut

    @staticmethod
    def _drain(gcs_address: str, node_ip: str, deadline_s: float, reason: str, timeout_s: float,
               pod_name: str = "") -> DrainResult:
        import ray._raylet
        from ray.core.generated import autoscaler_pb2

        client = ray._raylet.GcsClient(address=gcs_address)  # type: ignore[attr-defined]
        nodes = client.get_all_node_info(timeout=timeout_s)
        ids = {id(info): nid for nid, info in nodes.items()}
        alive, where = raynodes.find(nodes.values(), pod_ip=node_ip, pod_name=pod_name)
        if not alive:
            return DrainResult(False, f"no alive Ray node {where}")
        workers = [info for info in alive if not info.is_head_node]
        if not workers:
            return DrainResult(False, f"the Ray node {where} is the head; not draining it")
        nid = ids[id(workers[0])]
        deadline_ms = int((time.time() + deadline_s) * 1000)
        accepted, why = client.drain_node(nid.hex(), autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
            "DRAIN_NODE_REASON_PREEMPTION"), reason[:256], deadline_ms)
        if not accepted:
            return DrainResult(False, f"drain refused: {why}", nid.hex())
        return DrainResult(True, f"drain of node {nid.hex()[:12]} accepted, deadline {deadline_s:.0f} s", nid.hex())


class NoDrainer:
    """For clusters (and the emulator) without a reachable GCS."""

    async def drain(self, *, gcs_address: str, node_ip: str, deadline_s: float, reason: str,
                    pod_name: str = "") -> DrainResult:
        return DrainResult(False, "draining disabled", skipped=True)
