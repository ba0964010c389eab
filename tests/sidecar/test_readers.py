"""The sidecar's readers on fixture trees, on garbage, and on this
machine's real cgroup v1 files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memoryguard_kuberay.sidecar import discovery
from memoryguard_kuberay.sidecar.cgroup import CgroupV1Reader, CgroupV2Reader
from memoryguard_kuberay.sidecar.objectstore import StoreReading
from memoryguard_kuberay.sidecar.procfs import DEFAULT_PATTERN, find_ray_pids
from memoryguard_kuberay.sidecar.sampler import Sampler

from .conftest import make_proc

GIB = 1024**3


def test_cgroup_v2(fixtures: Path) -> None:
    m = CgroupV2Reader(str(fixtures / "cgroup-v2-ray")).read()
    assert m.current_bytes == 27380736000 and m.limit_bytes == 32 * GIB and m.limit_known
    assert (m.anon_bytes, m.file_bytes, m.inactive_file_bytes, m.shmem_bytes) == (
        23622320128, 2147483648, 1610612736, 1073741824)
    assert (m.psi_some_avg10_pct, m.psi_full_avg10_pct) == (3.5, 1.25)
    assert m.oom_kill_count == 1
    # The kernel's unreclaimable part (issue 59, 1): each as memory.stat says.
    assert (m.slab_unreclaimable_bytes, m.sock_bytes, m.kernel_stack_bytes, m.pagetables_bytes, m.percpu_bytes) == (
        10485760, 0, 2097152, 52428800, 1048576)


def test_cgroup_v2_no_limit_no_pressure(fixtures: Path) -> None:
    r = CgroupV2Reader(str(fixtures / "cgroup-v2-nolimit"))
    m = r.read()
    assert m.limit_known and m.limit_bytes is None  # "max": known to be unlimited
    assert m.psi_some_avg10_pct is None and m.psi_full_avg10_pct is None  # unknown, not 0
    assert "memory.pressure" not in {k for k, v in r.errors().items() if v}


def test_cgroup_v1(fixtures: Path) -> None:
    m = CgroupV1Reader(str(fixtures / "cgroup-v1-ray")).read()
    assert m.current_bytes == 2080251904 and m.limit_bytes is None and m.limit_known  # page-rounded LONG_MAX
    assert (m.anon_bytes, m.file_bytes, m.inactive_file_bytes, m.shmem_bytes) == (
        479621120, 1485168640, 1055973376, 104869888)
    assert m.oom_kill_count == 3
    assert m.sock_bytes is None and m.slab_unreclaimable_bytes is None  # v1 gives no breakdown: unknown


def test_garbage_in_every_file_gives_unknowns_and_counts(tmp_path: Path, fixtures: Path) -> None:
    d = tmp_path / "cg"
    shutil.copytree(fixtures / "cgroup-v2-ray", d)
    for f in d.iterdir():
        f.write_bytes(b"\xff\xfe garbage -1 NaN\n\0\0" * 3)
    r = CgroupV2Reader(str(d))
    m = r.read()
    assert m.current_bytes is None and not m.limit_known and m.anon_bytes is None and m.oom_kill_count is None
    assert m.psi_full_avg10_pct is None
    (d / "memory.current").unlink()
    r.files["memory.current"].close()
    assert r.read().current_bytes is None
    assert r.errors()["memory.current"] >= 1


def test_files_are_kept_open_and_reread(tmp_path: Path, fixtures: Path) -> None:
    d = tmp_path / "cg"
    shutil.copytree(fixtures / "cgroup-v2-ray", d)
    r = CgroupV2Reader(str(d))
    assert r.read().current_bytes == 27380736000
    fd = r.files["memory.current"].fd
    with open(d / "memory.current", "r+") as f:  # rewrite in place, as the kernel would re-render
        f.write("27380736001")
    assert r.read().current_bytes == 27380736001
    assert r.files["memory.current"].fd == fd  # same descriptor: pread, not reopen


def test_find_ray_pids_skips_the_sidecar(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, None)
    assert find_ray_pids(str(proc), DEFAULT_PATTERN) == [100, 300]  # raylet first, never pid 200


@pytest.mark.parametrize("v1, fixture, kind",
                         [(False, "cgroup-v2-ray", "cgroup-v2"), (True, "cgroup-v1-ray", "cgroup-v1")])
def test_discovery_through_proc_root(tmp_path: Path, v1: bool, fixture: str, kind: str) -> None:
    proc = make_proc(tmp_path, fixture, v1=v1)
    src = discovery.discover(cgroup_root=None, proc_root=str(proc), pattern=DEFAULT_PATTERN, limit_bytes=None)
    assert src is not None and src.kind == kind
    assert "/100/root/sys/fs/cgroup" in discovery.source_name(src)
    assert src.read().current_bytes is not None


def test_discovery_falls_back_to_smaps_with_downward_limit(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, None)
    src = discovery.discover(cgroup_root=None, proc_root=str(proc), pattern=DEFAULT_PATTERN, limit_bytes=8 * GIB)
    assert src is not None and src.kind == "smaps"
    m = src.read()
    assert m.current_bytes == (100 + 300) * 900 * 1024  # raylet + worker, not the sidecar
    assert m.limit_bytes == 8 * GIB and m.inactive_file_bytes == 0


def test_explicit_cgroup_root_wins(tmp_path: Path, fixtures: Path) -> None:
    proc = make_proc(tmp_path, "cgroup-v1-ray", v1=True)
    src = discovery.discover(cgroup_root=str(fixtures / "cgroup-v2-ray"), proc_root=str(proc),
                             pattern=DEFAULT_PATTERN, limit_bytes=None)
    assert src is not None and src.kind == "cgroup-v2"


def test_sampler_rediscovers_after_the_container_restarts(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, "cgroup-v2-ray")
    s = Sampler(cgroup_root=None, proc_root=str(proc), pattern=DEFAULT_PATTERN, limit_bytes=None)
    first = s.take(1.0, StoreReading(used_bytes=5, capacity_bytes=10))
    assert first.working_set_bytes == 27380736000 - 1610612736 and first.store_fraction == 0.5
    # The Ray container restarts: new PIDs, a new cgroup (v1 here, to tell them
    # apart), while the old descriptors still read the old cgroup (a real
    # kernel lets them until the cgroup is removed). That reading is served
    # once, as the gone container's last: it is the one whose memory.events
    # shows the OOM kill that ended it. Then the new container is read.
    make_proc(tmp_path / "new", "cgroup-v1-ray", v1=True)
    shutil.rmtree(proc)
    shutil.move(tmp_path / "new" / "proc", proc)
    (proc / "100").rename(proc / "1100")
    last = s.take(1.5, StoreReading())
    assert last.memory_current_bytes == 27380736000 and last.oom_kill_count == 1 and s.discoveries == 1
    second = s.take(2.0, StoreReading())
    assert second.memory_current_bytes == 2080251904 and s.discoveries == 2
    # Ray gone altogether: unknown, never zero, and it keeps looking.
    shutil.rmtree(proc)
    proc.mkdir()
    last, *gone = [s.take(float(t), StoreReading()) for t in range(3, 8)]
    assert last.memory_current_bytes == 2080251904  # its last reading, once
    assert all(g.memory_current_bytes is None and g.working_set_bytes is None for g in gone)
    assert s.discoveries >= 3


def test_this_machines_cgroup_v1() -> None:
    """The real files of the cgroup this test runs in (cgroup v1 here)."""
    path = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, p = line.split(":", 2)
        if "memory" in ctrls.split(","):
            path = "/sys/fs/cgroup/memory" + p
    if path is None or not os.path.exists(os.path.join(path, "memory.usage_in_bytes")):
        pytest.skip("no cgroup v1 memory controller on this machine")
    r = CgroupV1Reader(path)
    m = r.read()
    assert m.current_bytes is not None and m.current_bytes > 0
    assert m.inactive_file_bytes is not None and m.anon_bytes is not None
    assert m.limit_known
    before = m.current_bytes
    blob = bytearray(64 * 1024 * 1024)  # noqa: F841 (charged to this cgroup while alive)
    assert r.read().current_bytes != before


def test_a_container_with_no_limit_gets_the_nodes_available_memory(tmp_path: Path, fixtures: Path) -> None:
    """Issue 39: with memory.max "max" the node is the ceiling; the sample
    carries /proc/meminfo's MemAvailable (only then: a limited container's
    samples and traces stay as they were)."""
    cg = tmp_path / "cg"
    shutil.copytree(fixtures / "cgroup-v2-ray", cg)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal:       65536000 kB\nMemFree:  1000 kB\nMemAvailable:   40000000 kB\n")
    limited = Sampler(cgroup_root=str(cg), proc_root=str(proc), pattern=DEFAULT_PATTERN, limit_bytes=None)
    assert limited.take(1.0, StoreReading()).node_available_bytes is None
    (cg / "memory.max").write_text("max\n")
    free = Sampler(cgroup_root=str(cg), proc_root=str(proc), pattern=DEFAULT_PATTERN, limit_bytes=None)
    s = free.take(1.0, StoreReading())
    assert s.memory_max_bytes is None and s.node_available_bytes == 40000000 * 1024
