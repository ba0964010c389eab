"""``make bench-tenants`` (its second half): the attacks of issue 44 on the
sidecar (6 and 7), made on the real sidecar process reading this machine's
real cgroup files.

6. **A slow Ray endpoint.** The sidecar's Ray metrics URL answers as a
   hostile or broken raylet might: one line every 1.5 s (no read ever
   times out), a 7 MiB page sent at 256 KiB/s, a connection accepted and
   never answered. Each row runs 25 s beside a row with no Ray endpoint at
   all. Printed per row: the cgroup samples the sidecar took (it samples
   every 0.5 s), its slowest ``/healthz`` answer and how many were not 200,
   its largest RSS.
7. **Secrets in command lines.** 27 shapes of a secret in a process's
   arguments (``--password:X``, ``-p X``, ``curl -u user:X``,
   ``Authorization: Bearer X``, ``?X-Amz-Signature=X``, ...), each secret
   distinct, each in a process of the sidecar's own session (``--process-scope
   session``), in batches the table's 20 rows hold. Printed: the processes
   listed by ``/v1/processes`` (so that "no secret served" cannot pass by
   listing nothing) and the secrets found anywhere in its answers.

Exit 1 on a miss: a row with fewer than 90% of the no-endpoint row's
samples, a ``/healthz`` answer not 200 or over 1 s, an attacker's process
not listed, or any secret served.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from memoryguard_kuberay.core import helptext

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from operator_scale import proc_cpu_rss  # noqa: E402

from tests.procs import free_port, http_get  # noqa: E402

VENV_BIN = Path(sys.executable).parent
HOST = "127.0.0.61"  # the sidecar's; the hostile Ray endpoint on the next address
RAY_HOST = "127.0.0.62"
INTERVAL_S = 0.5
ROW_S = 25.0
TARGETS = {"samples_share": 0.9, "health_max_s": 1.0}
BATCH = 15  # attacker processes at once: with the sidecar, within the table's 20 rows


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """tests.procs.http_get, with no answer at all as 0 (the sidecar not up yet, or gone)."""
    try:
        return http_get(url, timeout)
    except OSError:
        return 0, b""


class Hostile(http.server.BaseHTTPRequestHandler):
    """Ray's metrics page, as the row's kind serves it."""

    kind = "drip"

    def do_GET(self) -> None:
        if self.kind == "silent":
            time.sleep(ROW_S + 5)  # accepted, never answered
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            if self.kind == "drip":
                for i in range(40):
                    self.wfile.write(f"# line {i}\n".encode())
                    self.wfile.flush()
                    time.sleep(1.5)
            else:  # "slow 7 MiB": 256 KiB a second
                line = b"ray_object_store_memory{Location=\"MMAP_SHM\"} 1.0\n" * 5000
                for _ in range((7 << 20) // len(line)):
                    self.wfile.write(line)
                    self.wfile.flush()
                    time.sleep(len(line) / (256 << 10))
        except OSError:
            pass

    def log_message(self, *a: object) -> None:
        pass


@contextlib.contextmanager
def hostile_ray(kind: str) -> Iterator[str]:
    handler = type("Row", (Hostile,), {"kind": kind})
    server = socketserver.ThreadingTCPServer((RAY_HOST, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{RAY_HOST}:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def sidecar(args: list[str], attackers: list[list[str]] | None = None) -> Iterator[tuple[str, int]]:
    """The real sidecar; with ``attackers``, they are started first in its
    own session (a launcher makes the session, starts them, then becomes
    the sidecar)."""
    port = free_port(HOST)
    cmd = [str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"{HOST}:{port}",
           "--interval", str(INTERVAL_S), *args]
    launcher = ("import os, subprocess, sys\n"
                "for a in " + repr(attackers or []) + ":\n"
                "    subprocess.Popen(a, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)\n"
                "os.execv(sys.argv[1], sys.argv[1:])\n")
    proc = subprocess.Popen([sys.executable, "-c", launcher, *cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 20
        while get(url + "/healthz", 1)[0] not in (200, 503):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the sidecar did not answer at {url}")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the session: the sidecar and its attackers
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def own_memory_cgroup() -> str:
    """This process's memory cgroup directory, v2 or v1: real kernel files
    for the sidecar to read (a container's, on this machine)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        base = ("/sys/fs/cgroup" if controllers == "" else
                "/sys/fs/cgroup/memory" if "memory" in controllers.split(",") else None)
        d = Path(f"{base}{path}")
        if base and ((d / "memory.current").exists() or (d / "memory.usage_in_bytes").exists()):
            return str(d)
    raise SystemExit("no memory cgroup of this process to read (neither cgroup v2 nor v1's memory controller)")


def slow_ray_row(kind: str | None, cgroup: str) -> dict[str, object]:
    with contextlib.ExitStack() as stack:
        ray_url = stack.enter_context(hostile_ray(kind)) if kind else ""
        url, pid = stack.enter_context(sidecar(["--cgroup-root", cgroup, "--ray-metrics-url", ray_url,
                                                "--ray-metrics-interval", "1"]))
        status, body = get(url + "/v1/samples")
        first = {s["time"] for s in json.loads(body)["samples"]} if status == 200 else set()
        worst, failed, rss = 0.0, 0, 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < ROW_S:
            t = time.monotonic()
            code, _ = get(url + "/healthz", 5)
            worst = max(worst, time.monotonic() - t)
            failed += code != 200
            rss = max(rss, proc_cpu_rss(pid)[1])
            time.sleep(0.25)
        status, body = get(url + "/v1/samples")
        samples = [s for s in json.loads(body)["samples"] if s["time"] not in first] if status == 200 else []
    return {"row": kind or "no Ray endpoint", "samples": len(samples),
            "with_memory": sum(1 for s in samples if s.get("memory_current")), "health_max_s": round(worst, 3),
            "health_not_200": failed, "rss_max_mib": round(rss, 1)}


def secret_shapes() -> list[list[str]]:
    """27 shapes of a secret in a command line (issue 44, 7), the secret of
    shape ``i`` (at ``{s}``) being ``S3cr3t-<i>``."""
    shapes = [
        "--password={s}", "--password {s}", "--password:{s}", "--pass={s}", "--passwd={s}", "-p {s}", "-p{s}",
        "--redis_password={s}", "--redis-password {s}", "--token {s}", "--token={s}", "--api-key={s}",
        "--apikey {s}",
        "--secret={s}", "--client-secret {s}", "-u user:{s}", "-H Authorization: Bearer {s}",
        "--header=Authorization:Bearer {s}", "https://h/x?X-Amz-Signature={s}", "https://h/x?token={s}&a=b",
        "postgres://app:{s}@db:5432/x", "redis://:{s}@h:6379/0", "DB_PASSWORD={s}", "AWS_SECRET_ACCESS_KEY={s}",
        "--aws-secret-access-key {s}", "--private-key=-----BEGIN {s}", "-e GITHUB_TOKEN={s}",
    ]
    out = []
    for i, shape in enumerate(shapes):
        args = shape.replace("{s}", f"S3cr3t-{i:02d}").split()
        # The program a Python that sleeps; its arguments the shape's.
        out.append(["python3", "-c", "import time; time.sleep(120)", "tool", *args])
    return out


def secrets_row() -> dict[str, object]:
    shapes = secret_shapes()
    listed, served = 0, []
    for start in range(0, len(shapes), BATCH):
        batch = shapes[start:start + BATCH]
        secrets = [f"S3cr3t-{i:02d}" for i in range(start, start + len(batch))]
        with sidecar(["--ray-metrics-url", "", "--process-scope", "session"], attackers=batch) as (url, _pid):
            deadline, rows, body = time.monotonic() + 30, [], b""
            while time.monotonic() < deadline:
                status, body = get(url + "/v1/processes", 10)
                rows = json.loads(body)["processes"] if status == 200 else []
                if sum(1 for r in rows if r["cmdline"].startswith("python3 -c ")) >= len(batch):
                    break
                time.sleep(0.5)
            listed += sum(1 for r in rows if r["cmdline"].startswith("python3 -c "))
            text = body.decode(errors="replace") + get(url + "/metrics")[1].decode(errors="replace")
            served += [s for s in secrets if s in text]
    return {"shapes": len(shapes), "listed": listed, "secrets_served": served}


def main() -> int:
    argparse.ArgumentParser(description=helptext.summary(__doc__)).parse_args()
    rows, cgroup = [], own_memory_cgroup()
    for kind in (None, "drip", "slow 7 MiB", "silent"):
        print(f"  attack 6: {kind or 'no Ray endpoint'} ({ROW_S:.0f} s), the sidecar reading {cgroup} ...",
              file=sys.stderr, flush=True)
        rows.append(slow_ray_row(kind, cgroup))
        print("  " + json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("  attack 7: secrets in command lines ...", file=sys.stderr, flush=True)
    secrets = secrets_row()
    base = rows[0]["samples"]
    print(f"{'attack 6: Ray endpoint':<30} {'samples (with memory)':>22} {'health max':>11} {'not 200':>8} "
          f"{'RSS max':>8}")
    for r in rows:
        print(f"{r['row']:<30} {r['samples']:>12} ({r['with_memory']:>5}) {r['health_max_s']:>9.3f} s "
              f"{r['health_not_200']:>8} {r['rss_max_mib']:>5.0f} MiB")
    print(f"attack 7: {secrets['shapes']} secret shapes in command lines: {secrets['listed']} of the processes "
          f"listed by /v1/processes, secrets served: {len(secrets['secrets_served'])} {secrets['secrets_served']}")
    missed = []
    for r in rows:
        if r["with_memory"] != r["samples"]:
            missed.append(f"{r['row']}: {r['samples'] - r['with_memory']} samples without the cgroup's memory")
        if r["samples"] < TARGETS["samples_share"] * float(base):  # type: ignore[arg-type]
            missed.append(f"{r['row']}: {r['samples']} samples against {base}")
        if r["health_not_200"] or r["health_max_s"] > TARGETS["health_max_s"]:  # type: ignore[operator]
            missed.append(f"{r['row']}: /healthz {r['health_not_200']} not 200, at most {r['health_max_s']} s")
    if secrets["listed"] < secrets["shapes"]:
        missed.append(f"only {secrets['listed']} of {secrets['shapes']} attacker processes listed")
    if secrets["secrets_served"]:
        missed.append(f"secrets served: {secrets['secrets_served']}")
    print(f"targets: samples >= {TARGETS['samples_share']:.0%} of the row with no endpoint, /healthz 200 within "
          f"{TARGETS['health_max_s']:g} s, every attacker listed, no secret served: "
          + ("MISSED: " + "; ".join(missed) if missed else "all met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
