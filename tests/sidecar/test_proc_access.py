"""The kernel's rule the injected sidecar lives by (issue 28, seen on a real
kubelet): another process's /proc/<pid>/root and smaps_rollup can be read
only with its uid AND gid. Shown here with real processes of those ids (as
root, which can take them): Ray's images run Ray as 1000:100."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from memoryguard_kuberay.sidecar.procfs import SmapsReader, access_problem

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as other uids and gids")

def _probe_as(uid: int, gid: int, pid: int) -> dict[str, object]:
    """access_problem and SmapsReader, run in a forked child that took these
    ids (a fresh interpreter could not: the venv is under /root)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            doc = {"problem": access_problem("/proc", pid), "smaps": SmapsReader("/proc", lambda: [pid], None).usable()}
            os.write(w, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(child, 0)
    return dict(json.loads(out))


@pytest.mark.parametrize("sidecar,readable", [((1000, 100), True), ((1000, 1000), False), ((1001, 100), False)])
def test_only_the_same_uid_and_gid_may_read_a_ray_process(sidecar: tuple[int, int], readable: bool) -> None:
    def as_ray() -> None:
        os.setgroups([])
        os.setgid(100)
        os.setuid(1000)

    ray = subprocess.Popen(["/bin/sleep", "60"], preexec_fn=as_ray)
    try:
        seen = _probe_as(*sidecar, ray.pid)
        assert seen["smaps"] is readable
        if readable:
            assert seen["problem"] is None
        else:
            problem = str(seen["problem"])
            assert f"uid {sidecar[0]}, gid {sidecar[1]}" in problem and "uid 1000, gid 100" in problem, problem
    finally:
        ray.kill()
        ray.wait()
