"""Which Ray node is a pod's (raynodes.py): by the pod's IP, else by its name
(hostNetwork: the pod's IP is the host's; seen on the kit's kubelet, a Ray
node started at 127.0.0.1 is registered under the host's outward address)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from memoryguard_kuberay.operator.rotations import raynodes


def node(ip: str, name: str = "", host: str = "vm", state: int = 0) -> SimpleNamespace:
    return SimpleNamespace(node_manager_address=ip, node_name=name or ip, node_manager_hostname=host, state=state)


HEAD = node("192.0.2.2", host="vm")
WORKER = node("192.0.2.2", name="rc-w-abc", host="vm")
POD_NET = node("10.1.2.3", host="rc-w-xyz")  # an ordinary pod: its own IP, its name as host name
DEAD = node("10.1.2.9", state=1)


@pytest.mark.parametrize("pod_ip,pod_name,found,how", [
    ("10.1.2.3", "rc-w-xyz", [POD_NET], "at 10.1.2.3"),
    ("127.0.0.1", "rc-w-abc", [WORKER], "named rc-w-abc"),  # hostNetwork: found by --node-name
    ("10.9.9.9", "rc-w-xyz", [POD_NET], "named rc-w-xyz"),  # by host name
    ("10.1.2.9", "", [], "at 10.1.2.9"),  # dead nodes are nobody's
    ("127.0.0.1", "", [], "at 127.0.0.1"),
])
def test_a_pods_ray_node(pod_ip: str, pod_name: str, found: list[SimpleNamespace], how: str) -> None:
    nodes, where = raynodes.find([HEAD, WORKER, POD_NET, DEAD], pod_ip=pod_ip, pod_name=pod_name)
    assert nodes == found and where.startswith(how)
