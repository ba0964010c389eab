"""The kit's real kubelet (v1.36.2, containerd, runc) beside its own real
control plane, for this test run (issue 28). ``kubelet-up.sh`` and
``kubelet-down.sh`` are the kit's (``../shared/realk8s``, never copied in);
this module chooses the state directory (fresh each run), the ports (free
ones: the kit's defaults may be taken), an audit log, and keeps the kit's
Python image in the image cache so that the 30 s debootstrap runs once per
machine.

The kubelet is one per machine (the ``kubepods`` cgroups are fixed paths):
a run that finds another run's kubelet up skips, saying so; ``lock()``
makes two runs of this tier on one machine take turns instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from ..procs import free_port
from ..realk8s.controlplane import AUDIT_POLICY, KIT, ControlPlane
from . import images

LOCK = Path("/run/lock/memoryguard-realpods.lock")
UP_TIMEOUT_S = 900  # the first run of a machine builds the Python image (debootstrap)


class Unavailable(RuntimeError):
    """A requirement is missing: the tier is skipped with this message."""


def requirements() -> str | None:
    """Why this tier cannot run here, or None."""
    if not (KIT / "kubelet-up.sh").exists():
        return (f"{KIT}/kubelet-up.sh is absent: the real-pod tier (issue 28) runs only where the kit is beside "
                "the checkout (its binaries are never copied into the project)")
    if os.geteuid() != 0:
        return "the real-pod tier needs root (a kubelet, containerd, cgroups, chroot builds)"
    if shutil.which("unshare") is None or shutil.which("chroot") is None:
        return "the real-pod tier needs unshare and chroot (util-linux, coreutils)"
    if os.path.exists("/sys/fs/cgroup/memory/kubepods") or os.path.exists("/sys/fs/cgroup/kubepods"):
        return "another kubelet runs on this machine (a kubepods cgroup exists): the kit's kubelet is one per machine"
    return None


@contextlib.contextmanager
def lock() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@dataclasses.dataclass
class Kubelet(ControlPlane):
    up_seconds: float = 0.0

    def down(self, *, purge: bool = False) -> None:
        """Stop the kit's kubelet; with ``purge`` delete its state dir too
        (the kit does only when nothing is left behind): a run's state dir
        holds about 3 GiB of images and containers, and 18 runs that kept
        theirs filled this machine's disk to 95%, where a fresh-clone CI run
        (2026-12-07) saw every pod stay Pending (the kubelet's disk-pressure
        eviction, most likely: its node conditions were not read)."""
        args = ["bash", str(KIT / "kubelet-down.sh"), *(["--purge"] if purge else [])]
        subprocess.run(args, env=self.env, capture_output=True, timeout=300)


def start(home: Path, tools: Path) -> Kubelet:
    home.mkdir(parents=True, exist_ok=True)
    cached = images.CACHE / "kit-python.tar"
    if cached.exists():  # the kit builds it only when $KUBELET_HOME/images/python.tar is absent
        (home / "images").mkdir(exist_ok=True)
        shutil.copy(cached, home / "images" / "python.tar")
    policy = home / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = home / "audit.log"
    ports = {k: str(free_port()) for k in ("KL_ETCD_PORT", "KL_ETCD_PEER_PORT", "KL_APISERVER_PORT", "KL_KCM_PORT",
                                           "KL_KUBELET_PORT", "KL_KUBELET_HEALTHZ_PORT")}
    env = {**os.environ, "KUBELET_HOME": str(home), "KUBECTL": str(tools / "kubectl"), "KL_PYTHON": "1", **ports,
           "APISERVER_EXTRA_ARGS": f"--audit-policy-file={policy} --audit-log-path={audit_log} "
                                   "--audit-log-maxsize=200"}
    t0 = time.monotonic()
    out = subprocess.run(["bash", str(KIT / "kubelet-up.sh")], env=env, capture_output=True, text=True,
                         timeout=UP_TIMEOUT_S)
    kl = Kubelet(home=home, env=env, server=f"https://127.0.0.1:{ports['KL_APISERVER_PORT']}",
                 kubeconfig=home / "kubeconfig", audit_log=audit_log, tools=tools,
                 up_seconds=time.monotonic() - t0)
    if out.returncode == 2:
        raise Unavailable(f"kubelet-up.sh: {(out.stderr or out.stdout).strip().splitlines()[-1]}")
    if out.returncode != 0:
        kl.down()
        raise RuntimeError(f"kubelet-up.sh failed ({out.returncode}): {out.stdout[-3000:]}{out.stderr[-3000:]}")
    if not cached.exists() and (home / "images" / "python.tar").exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(home / "images" / "python.tar", cached)
    return kl
