"""The Ray objects held on one node, grouped by the call site that created
them: part of the evidence kept before a rotation.

Run as its own process by the operator (``python -m
memoryguard_kuberay.operator.forensics.rayprobe --gcs ADDR --node-ip IP``), killed at
its time budget, its output read up to a cap: whatever a hostile raylet
answers costs this short-lived process, never the operator that guards
every tenant. Prints one JSON document.

How: the GCS node table gives the raylet's address and port for the pod's
IP; the raylet's ``GetNodeStats`` with ``include_memory_info`` lists, per
worker process, the object references it holds (the reply ``ray memory``
is built from). The call site is recorded only when the cluster runs with
``RAY_record_ref_creation_sites=1`` (a remediation the guard can set; it
costs a stack walk per ``ray.put`` and task call); without it the sites are
"(not recorded)". Cost, measured with Ray 2.60 on a 2-core machine: 0.8 s
for 300 references, nearly all of it starting Python and importing Ray (the
RPC itself 0.04 s).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from memoryguard_kuberay.operator.rotations import raynodes

NOT_RECORDED = "(not recorded: RAY_record_ref_creation_sites=1 records it)"
TOP = 20
MAX_OBJECTS = 100_000
MAX_REPLY_BYTES = 32 * 1024 * 1024  # a raylet's reply larger than this is refused by gRPC
SITE_MAX = 300


def readable_site(site: str) -> str:
    """Ray records the whole stack: ``(put object)  | <ray's own frames> |
    /app/serve.py:handle:42``. Ray's own frames are dropped, the user's kept."""
    if not site:
        return NOT_RECORDED
    frames = [f.strip() for f in site.split("|")]
    head, rest = frames[0], frames[1:]
    mine = [f for f in rest if "/site-packages/ray/" not in f and "/dist-packages/ray/" not in f]
    return " | ".join([head, *mine] if mine or not rest else frames)[:SITE_MAX]


def kind_of(ref: Any) -> str:
    """What holds the object, as ``ray memory`` names it."""
    if getattr(ref, "pinned_in_memory", False):
        return "PINNED_IN_MEMORY"
    if getattr(ref, "local_ref_count", 0) > 0:
        return "LOCAL_REFERENCE"
    if getattr(ref, "submitted_task_ref_count", 0) > 0:
        return "USED_BY_PENDING_TASK"
    if getattr(ref, "contained_in_owned", None):
        return "CAPTURED_IN_OBJECT"
    return "OTHER"


def group(refs: Iterable[tuple[str, int, str, int]], *, top: int = TOP,
          max_objects: int = MAX_OBJECTS) -> dict[str, Any]:
    """(call site, size, kind, pid) per reference -> the ``top`` call sites
    by bytes, with counts, kinds and a few of the processes holding them.
    Stops reading after ``max_objects`` and says so."""
    sites: dict[str, list[Any]] = {}
    n = total = recorded = 0
    truncated = False
    for site, size, kind, pid in refs:
        if n >= max_objects:
            truncated = True
            break
        n += 1
        size = max(0, size)
        total += size
        recorded += bool(site)
        site = readable_site(site)
        entry = sites.get(site)
        if entry is None:
            entry = sites[site] = [0, 0, collections.Counter(), set()]
        entry[0] += 1
        entry[1] += size
        entry[2][kind] += 1
        if len(entry[3]) < 5:
            entry[3].add(pid)
    ranked = sorted(sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))[:top]
    # recordedSites: references whose creation site Ray recorded (none
    # unless RAY_record_ref_creation_sites=1: the guard can then set it).
    return {"objects": n, "bytes": total, "truncated": truncated, "callSitesTotal": len(sites),
            "recordedSites": recorded,
            "callSites": [{"callSite": s, "count": e[0], "bytes": e[1], "kinds": dict(e[2]), "pids": sorted(e[3])}
                          for s, e in ranked]}


def _refs(reply: Any) -> Iterable[tuple[str, int, str, int]]:
    for worker in reply.core_workers_stats:
        for ref in worker.object_refs:
            yield ref.call_site, int(ref.object_size), kind_of(ref), int(worker.pid)


def probe(gcs_address: str, node_ip: str, *, timeout_s: float, top: int, max_objects: int,
          pod_name: str = "") -> dict[str, Any]:
    import grpc
    import ray._raylet
    from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

    t0 = time.monotonic()
    client = ray._raylet.GcsClient(address=gcs_address)  # type: ignore[attr-defined]
    nodes = client.get_all_node_info(timeout=timeout_s)
    alive, where = raynodes.find(nodes.values(), pod_ip=node_ip, pod_name=pod_name)
    if not alive:
        return {"error": f"no alive Ray node {where}"}
    node = alive[0]
    left = max(1.0, timeout_s - (time.monotonic() - t0))
    channel = grpc.insecure_channel(f"{node.node_manager_address}:{node.node_manager_port}", options=[
        ("grpc.max_receive_message_length", MAX_REPLY_BYTES)])
    try:
        stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)  # type: ignore[no-untyped-call]
        request = node_manager_pb2.GetNodeStatsRequest(include_memory_info=True)  # type: ignore[attr-defined]
        reply = stub.GetNodeStats(request, timeout=left)
    finally:
        channel.close()
    out = group(_refs(reply), top=top, max_objects=max_objects)
    out["workers"] = len(reply.core_workers_stats)
    out["tookSeconds"] = round(time.monotonic() - t0, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memoryguard_kuberay.operator.forensics.rayprobe",
                                 description="Ray objects on one node by call site, as JSON")
    ap.add_argument("--gcs", required=True, help="the head's GCS address, host:port")
    ap.add_argument("--node-ip", required=True, help="the pod's IP (its Ray node's address)")
    ap.add_argument("--pod-name", default="", help="the pod's name (its Ray node's name, under hostNetwork)")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=TOP)
    ap.add_argument("--max-objects", type=int, default=MAX_OBJECTS)
    args = ap.parse_args(argv)
    try:
        doc = probe(args.gcs, args.node_ip, timeout_s=args.timeout, top=args.top, max_objects=args.max_objects,
                    pod_name=args.pod_name)
    except Exception as e:  # any failure is the answer, said in one line
        doc = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    json.dump(doc, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
