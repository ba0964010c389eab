"""The cgroup v2 kit (../shared/cgroupv2) as the tier uses it: where it is,
why it cannot run here (a reason, or None), the project's sidecar installed
from its wheels into a folder the guest mounts, and one VM run of the guest
driver (guest/probe.py) over a list of cases.

The kit's files are read where they are, never copied into the project
(podlib.py is shared into the guest read-only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..devworld import ROOT

KIT = ROOT.parent / "shared" / "cgroupv2"
CACHE = Path(os.environ.get("MG_KIT_CACHE", "/var/tmp/memoryguard-cgroupv2-kit"))
GUEST = Path(__file__).resolve().parent / "guest"
BUILD_TIMEOUT_S = 900


def unavailable() -> str | None:
    """Why the kit cannot run here, or None. Builds the guest image once per
    machine when it is missing (about 2-4 minutes; it needs Debian's mirror)."""
    if not (KIT / "run.sh").is_file():
        return f"the cgroup v2 kit is absent ({KIT})"
    if os.geteuid() != 0:
        return "the cgroup v2 kit needs root (QEMU, debootstrap, runc in the guest)"
    if not (CACHE / "stamp").is_file():
        print(f"building the cgroup v2 kit's guest image into {CACHE} (once per machine)", file=sys.stderr)
        r = subprocess.run([str(KIT / "build-image.sh")], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"the cgroup v2 kit's image could not be built: {tail[0][:200]}"
    return None


def install_sidecar(site: Path, wheels: Path) -> None:
    """The project's core and sidecar built as wheels, and installed from
    those wheels alone (with their dependencies' wheels) into ``site``,
    which the sidecar container mounts as /opt/mg."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["wheel", "-w", str(wheels), str(ROOT / "core"), str(ROOT / "sidecar")], check=True,
                   timeout=600)
    subprocess.run(pip + ["install", "--no-index", "--find-links", str(wheels), "--target", str(site),
                          "--no-compile", "memoryguard-kuberay-sidecar"], check=True, timeout=600)


def run_guest(share: Path, site: Path, cases: list[dict[str, Any]], *, layout: str, port: int,
              timeout_s: int) -> tuple[int, float, str]:
    """One VM: the driver over ``cases``; their records land in share/out.
    Returns (exit code, wall seconds, the run's output). A guest whose
    kernel reports a soft lockup (seen once here: TCG's vCPU threads starved
    while the host's two cores were busy) is stopped and booted again, once."""
    (share / "probes").mkdir(parents=True, exist_ok=True)
    for program in ("leak.py", "sockleak.py"):
        shutil.copy(GUEST / program, share / "probes" / program)
    shutil.copy(GUEST / "probe.py", share / "probe.py")
    (share / "conf.json").write_text(json.dumps({"layout": layout, "port": port, "cases": cases}))
    cmd = [str(KIT / "run.sh"), "-q", "-t", str(timeout_s), "-s", str(share), "-S", f"{site}:/site",
           "-S", f"{KIT}:/cgkit", "-o", str(share / "vm"), "--cgroup", layout, "--", "python3", "/share/probe.py"]
    t0 = time.monotonic()
    for attempt in (1, 2):
        shutil.rmtree(share / "out", ignore_errors=True)
        shutil.rmtree(share / "vm", ignore_errors=True)
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            locked = False
            try:
                while proc.poll() is None:
                    time.sleep(5)
                    if time.monotonic() - t0 > timeout_s + 120:
                        break
                    console = share / "vm" / "console.log"
                    if console.is_file() and b"soft lockup" in console.read_bytes()[-65536:]:
                        locked = True
                        break
            finally:
                if proc.poll() is None:
                    proc.terminate()  # run.sh ends its QEMU on TERM
                    proc.wait(timeout=30)
            out.seek(0)
            text = out.read().decode("utf-8", "replace")[-6000:]
        if not locked or attempt == 2:
            return proc.returncode, time.monotonic() - t0, text
        print(f"[cgroupv2] the {layout} guest reported a soft lockup; booting it again", file=sys.stderr)
    raise AssertionError("unreachable")


def record(share: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((share / "out" / f"{name}.json").read_text()))
