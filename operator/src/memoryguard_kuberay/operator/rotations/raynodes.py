"""Which Ray node is a pod's, in the GCS node table. Purely computational.

By the pod's IP first: under KubeRay each pod has its own IP, and Ray's node
address is it. Then by the pod's name, as Ray's node name (``ray start
--node-name``) or its host name (a pod's host name is its name): with
``hostNetwork`` the pod's IP is the host's, which every Ray pod of that host
shares, and Ray may not even register it (seen on the kit's kubelet: a node
started with ``--node-ip-address=127.0.0.1`` is registered under the host's
outward address, Ray's ``resolve_ip_for_localhost``; docs/facts.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ALIVE = 0  # GcsNodeInfo.state


def find(nodes: Iterable[Any], *, pod_ip: str, pod_name: str = "") -> tuple[list[Any], str]:
    """(the alive Ray nodes that are the pod's, how they were found)."""
    alive = [n for n in nodes if getattr(n, "state", None) == ALIVE]
    by_ip = [n for n in alive if getattr(n, "node_manager_address", None) == pod_ip]
    if by_ip:
        return by_ip, f"at {pod_ip}"
    if pod_name:
        by_name = [n for n in alive if pod_name in (getattr(n, "node_name", None),
                                                     getattr(n, "node_manager_hostname", None))]
        if by_name:
            return by_name, f"named {pod_name}"
    return [], f"at {pod_ip}" + (f" or named {pod_name}" if pod_name else "")
