"""``make psi-at-the-limit``: what a real cgroup v2 kernel says of memory
pressure (PSI) in a cgroup held near its ``memory.max`` (docs/facts.md).

Run on the host, as root: boots ``../shared/cgroupv2`` (Debian's 6.1 under
QEMU) once and runs this file inside it with ``--guest``. There, a cgroup
of 256 MiB ``memory.max`` holds anonymous memory at 70-96% of it, 30 s a
level, while a reader keeps a file's pages in use (none, 10 MiB, 40 MiB: a
page-cache working set that fits beside the anon, or not). Each level
prints memory.current, anon, file, PSI some and full avg10, and
memory.events' max and oom_kill. Bounded: about 10 minutes, the VM stopped
by the kit at 15. Not in CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MIB = 1 << 20
LIMIT = 256 * MIB
CG = "/sys/fs/cgroup/psiprobe"
LEVELS = (0.70, 0.80, 0.85, 0.90, 0.93, 0.96)
HOLD_S = 30  # avg10 settles within it
WORKING_SETS_MIB = (0, 10, 40)
OWN_MIB = 8  # the Python processes' own anon, less from each level


def _read(name: str) -> str:
    with open(f"{CG}/{name}") as f:
        return f.read()


def _flat(name: str) -> dict[str, str]:
    return dict(line.split()[:2] for line in _read(name).splitlines())


def _avg10(kind: str) -> float:
    for line in _read("memory.pressure").splitlines():
        if line.startswith(kind + " "):
            return float(dict(x.split("=") for x in line.split()[1:])["avg10"])
    raise ValueError(f"no {kind} line in memory.pressure")


def _enter() -> None:
    with open(f"{CG}/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))


def _hold(r: int) -> None:
    """Grow anon to each size the parent writes, touching every page."""
    _enter()
    chunks: list[bytearray] = []
    while True:
        want = int(os.read(r, 16).decode())
        while len(chunks) * MIB < want:
            c = bytearray(MIB)
            for i in range(0, MIB, 4096):
                c[i] = 1
            chunks.append(c)


def _reread(path: str) -> None:
    """Read the file over and over: its pages are a working set."""
    _enter()
    buf = bytearray(MIB)
    while True:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _levels(ws_mib: int) -> None:
    os.makedirs(CG, exist_ok=True)
    with open(f"{CG}/memory.max", "w") as f:
        f.write(str(LIMIT))
    path = f"/root/ws{ws_mib}"
    if ws_mib:
        with open(path, "wb") as f:
            f.write(os.urandom(ws_mib * MIB))
        subprocess.run("sync; echo 1 > /proc/sys/vm/drop_caches", shell=True, check=True)
    r, w = os.pipe()
    children = []
    for role in ("hold", "reread")[: 2 if ws_mib else 1]:
        pid = os.fork()
        if pid == 0:
            _hold(r) if role == "hold" else _reread(path)
            os._exit(0)
        children.append(pid)
    for level in LEVELS:
        os.write(w, str(int(level * LIMIT) - OWN_MIB * MIB).encode().ljust(16))
        time.sleep(HOLD_S)
        stat, events = _flat("memory.stat"), _flat("memory.events")
        print(json.dumps({"file_working_set_mib": ws_mib, "anon_target": level,
                          "current_mib": int(_read("memory.current")) // MIB,
                          "anon_mib": int(stat["anon"]) // MIB, "file_mib": int(stat["file"]) // MIB,
                          "psi_some_avg10": _avg10("some"), "psi_full_avg10": _avg10("full"),
                          "events_max": int(events["max"]), "oom_kill": int(events["oom_kill"])}), flush=True)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    time.sleep(1)
    os.rmdir(CG)


def main() -> int:
    if sys.argv[1:] == ["--guest"]:
        for ws in WORKING_SETS_MIB:
            _levels(ws)
        return 0
    kit = Path(__file__).resolve().parents[2] / "shared" / "cgroupv2"  # beside the checkout (not in the guest)
    run = kit / "run.sh"
    if not run.exists():
        print(f"psi-at-the-limit: the cgroup v2 kit is not at {kit}", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    return subprocess.call([str(run), "-t", "900", "-m", "2G", "-S", f"{here}:/probe", "--",
                            "python3", "/probe/psi_at_the_limit.py", "--guest"])


if __name__ == "__main__":
    sys.exit(main())
