"""Fixture trees for the sidecar's readers: checked-in cgroup directories
and a fake /proc laid out around them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def make_proc(root: Path, cgroup_fixture: str | None, *, v1: bool = False) -> Path:
    """A /proc with a raylet (pid 100), a Ray worker (300) and the sidecar
    itself (200); the raylet's /proc/100/root shows its container's cgroup."""
    proc = root / "proc"
    raylet = b"/usr/local/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet\0--node_ip_address=10.0.0.5\0"
    procs = {100: raylet,
             200: b"/usr/local/bin/python\0/usr/local/bin/memoryguard-kuberay\0sidecar\0",
             300: b"ray::IDLE\0"}
    for pid, cmd in procs.items():
        d = proc / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(cmd)
        if v1:
            (d / "cgroup").write_text("12:memory:/kubepods/pod1/ray\n11:cpu,cpuacct:/kubepods/pod1/ray\n")
        else:
            (d / "cgroup").write_text("0::/\n")
        (d / "smaps_rollup").write_text(
            "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0    [rollup]\n"
            f"Rss:             {pid * 1000} kB\nPss:             {pid * 900} kB\n"
            f"Pss_Anon:        {pid * 800} kB\nPss_File:        {pid * 90} kB\nPss_Shmem:       {pid * 10} kB\n")
    if cgroup_fixture is not None:
        target = proc / "100" / "root" / "sys" / "fs" / "cgroup"
        if v1:
            target = target / "memory" / "kubepods" / "pod1" / "ray"
        shutil.copytree(FIXTURES / cgroup_fixture, target)
    return proc


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
