"""The kit's whole cluster (``../shared/realk8s/cluster/``, never copied
in) for this test run (issue 58): a real control plane, kubelet with
containerd, scheduler, kube-proxy, cluster DNS, a pod network and the real
KubeRay with its defaults, all in one network namespace of the run's own.

What this module chooses: the state directory (fresh each run), the
namespace's name (this run's own), an audit log, the order of the work (the
project's images are built in the host's namespace, where the registries
are, while the cluster comes up in its own), and it keeps the kit's Python
base in the image cache so that its debootstrap runs once per machine.

The tests talk to the apiserver and the pods from inside the kit's
namespace (nothing is routed between it and the host's): ``inside()`` moves
the calling thread there (``setns``), so that what it starts (kubectl,
helm, the pod recorder's thread) is there too, and moves it back after.

The kubelet is one per machine (the ``kubepods`` cgroups are fixed paths):
a run that finds another kubelet up skips, saying so; ``lock()`` makes two
runs of this tier on one machine take turns instead.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from ..realk8s.controlplane import AUDIT_POLICY, KIT, ControlPlane
from . import images

CLUSTER_KIT = KIT / "cluster"
LOCK = Path("/run/lock/memoryguard-realpods.lock")
UP_TIMEOUT_S = 900  # the first run of a machine builds the Python base (debootstrap)
CLONE_NEWNET = 0x40000000  # sched.h
CLUSTER_DNS = "10.96.0.10"  # the kit's default MG_DNS_IP (cluster-up.sh): its dnsmasq, in the namespace
APISERVER_PORT = 26443  # the kit's default (kubelet-common.sh): inside the run's own namespace, nothing else holds it


class Unavailable(RuntimeError):
    """A requirement is missing: the tier is skipped with this message."""


def requirements() -> str | None:
    """Why this tier cannot run here, or None."""
    if not (CLUSTER_KIT / "cluster-up.sh").exists():
        return (f"{CLUSTER_KIT}/cluster-up.sh is absent: the real-pod tier (issue 58) runs only where the kit is "
                "beside the checkout (its binaries are never copied into the project)")
    if os.geteuid() != 0:
        return "the real-pod tier needs root (a kubelet, containerd, cgroups, a network namespace, chroot builds)"
    for tool in ("unshare", "chroot", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"the real-pod tier needs {tool} (util-linux, coreutils, iproute2)"
    if os.path.exists("/sys/fs/cgroup/memory/kubepods") or os.path.exists("/sys/fs/cgroup/kubepods"):
        return "another kubelet runs on this machine (a kubepods cgroup exists): the kit's kubelet is one per machine"
    return None


@contextlib.contextmanager
def lock() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET) failed")


@dataclasses.dataclass
class Cluster(ControlPlane):
    netns: str = ""
    made_netns_dir: bool = False  # /run/netns was made here (_with_cluster_dns), and goes with the cluster
    up_seconds: float = 0.0
    images_seconds: float = 0.0

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """The calling thread in the kit's network namespace (a network
        namespace is a thread's, not the process's: other threads stay
        where they are; threads and processes started here start in it)."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        kit = os.open(f"/run/netns/{self.netns}", os.O_RDONLY)
        try:
            _setns(kit)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(kit)
            os.close(home)

    def log_of(self, name: str) -> str:
        path = self.home / "run" / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def down(self, *, purge: bool = True) -> None:
        """Everything cluster-up.sh started, by saved PIDs, then the
        namespace; with ``purge`` the state dir too (about 4.6 GB at peak:
        kept homes once filled this machine's disk, and a CI run saw every
        pod stay Pending)."""
        subprocess.run(["bash", str(CLUSTER_KIT / "cluster-down.sh"), *(["--purge"] if purge else [])],
                       env=self.env, capture_output=True, timeout=600)
        runs = Path("/run/netns")
        if self.made_netns_dir and runs.is_dir() and not any(runs.iterdir()):  # as cluster-down.sh does for its own
            subprocess.run(["umount", str(runs)], capture_output=True, timeout=30)
            with contextlib.suppress(OSError):
                runs.rmdir()


def _python_base(home: Path, env: dict[str, str]) -> None:
    """The kit's Python base, from the image cache or made once (debootstrap,
    in the host's namespace: it reaches the Debian mirror)."""
    cached = images.CACHE / "kit-python.tar"
    (home / "images").mkdir(parents=True, exist_ok=True)
    if cached.exists():  # the kit builds it only when $KUBELET_HOME/images/python.tar is absent
        shutil.copy(cached, home / "images" / "python.tar")
        return
    out = subprocess.run(["bash", str(CLUSTER_KIT / "kubelet-up.sh")], env={**env, "KL_PYTHON": "1",
                                                                            "KL_PYTHON_ONLY": "1"},
                         capture_output=True, text=True, timeout=UP_TIMEOUT_S)
    if out.returncode == 2:
        raise Unavailable(f"kubelet-up.sh: {(out.stderr or out.stdout).strip().splitlines()[-1]}")
    if out.returncode != 0:
        raise RuntimeError(f"the kit's Python base failed ({out.returncode}): {out.stdout[-3000:]}{out.stderr[-3000:]}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(home / "images" / "python.tar", cached)


def start(home: Path, tools: Path, workdir: Path, names: list[str]) -> tuple[Cluster, dict[str, str]]:
    """The cluster up with the project's images ``names`` in its containerd;
    returns it and name -> image ref. The images are built while the
    cluster comes up (independent work, at once)."""
    home.mkdir(parents=True, exist_ok=True)
    policy = home / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = home / "audit.log"
    netns = f"mgrp{os.getpid()}"  # this run's own
    env = {**os.environ, "KUBELET_HOME": str(home), "KUBECTL": str(tools / "kubectl"), "MG_NETNS": netns,
           "MG_SKIP_IMAGES": "1",  # the Python base is made before (_python_base)
           # The kit's namespace has no route to the Service network (no default
           # route, as a node has): its apiserver calls the chart's webhook (and
           # any aggregated API) at the Service's endpoints, the pods' IPs, as
           # control planes off the Service network are run (docs/facts.md).
           "APISERVER_EXTRA_ARGS": f"--audit-policy-file={policy} --audit-log-path={audit_log} "
                                   "--audit-log-maxsize=200 --enable-aggregator-routing=true"}
    t0 = time.monotonic()
    _python_base(home, env)
    cl = Cluster(home=home, env=env, server=f"https://127.0.0.1:{APISERVER_PORT}", kubeconfig=home / "kubeconfig",
                 audit_log=audit_log, tools=tools, netns=netns)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        built = pool.submit(lambda: {i.name: (i.ref, images.build(i, kubelet_home=home, workdir=workdir))
                                     for i in images.project_images() if i.name in names})
        cl.made_netns_dir = not Path("/run/netns").exists()
        out = subprocess.run(_with_cluster_dns(home, netns, ["bash", str(CLUSTER_KIT / "cluster-up.sh")]), env=env,
                             capture_output=True, text=True, timeout=UP_TIMEOUT_S)
        cl.up_seconds = time.monotonic() - t0
        if out.returncode != 0:
            built.cancel()
            cl.down()
            if out.returncode == 2:
                raise Unavailable(f"cluster-up.sh: {(out.stderr or out.stdout).strip().splitlines()[-1]}")
            raise RuntimeError(f"cluster-up.sh failed ({out.returncode}): {out.stdout[-3000:]}{out.stderr[-3000:]}")
        try:
            tarballs = built.result()
        except BaseException:
            cl.down()
            raise
    refs = {}
    for name, (ref, tar) in tarballs.items():
        images.import_into(home, tar)  # containerd's socket: reachable from any namespace
        refs[name] = ref
    cl.images_seconds = time.monotonic() - t0
    return cl, refs


def _with_cluster_dns(home: Path, netns: str, cmd: list[str]) -> list[str]:
    """``cmd`` in a mount namespace of its own whose /etc/resolv.conf asks
    the cluster's DNS first, then the host's servers: every process the kit
    starts keeps it. The kit runs KubeRay as a process, not a pod, with the
    host's resolver, and KubeRay reaches a RayService's (and a RayJob's)
    head by its Service's DNS name (the dashboard, for the Serve
    applications): seen here, "lookup real-svc-...-head-svc.ray-real.svc.
    cluster.local on 10.255.255.53:53: network is unreachable", and the
    RayService never left Initializing. In the cluster KubeRay runs as a pod
    with the cluster's DNS; this gives the kit's KubeRay the same. Outside
    the namespace (the kit's own package installs) the first server is
    unreachable and the host's answer; inside it the host's are
    unreachable, and dnsmasq answers for cluster.local (and refuses the
    rest, as before). The host's /etc/resolv.conf is untouched. The network
    namespace is made first, out here: made in there, its bind mount on
    /run/netns/<name> would be that mount namespace's alone (cluster-up.sh
    uses one it finds)."""
    host = Path("/etc/resolv.conf")
    lines = host.read_text(errors="replace").splitlines() if host.exists() else []
    conf = home / "resolv-cluster-first.conf"
    conf.write_text("\n".join([f"nameserver {CLUSTER_DNS}", *lines]) + "\n")
    if not Path(f"/run/netns/{netns}").exists():
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True, timeout=30)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(conf), *cmd]
