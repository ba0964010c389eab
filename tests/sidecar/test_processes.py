"""The Ray container's processes by memory (``/v1/processes``): on this
machine's real /proc, with 500 extra processes, one of them big; bounded in
what it reads and returns; never a process's environment."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from memoryguard_kuberay.sidecar import processes

from ..procs import get_json, sidecar_process, wait_until

SMALL_BIG = "b = b'x' * (1 << 27); print('ready', flush=True); input()"  # 128 MiB of its own
BIG = "import sys; b = bytearray(b'x' * (160 * 1024 * 1024)); print('ready', flush=True); sys.stdin.readline()"


@contextlib.contextmanager
def crowd(n: int) -> Iterator[subprocess.Popen]:  # type: ignore[type-arg]
    """``n`` sleeping processes and one that holds 160 MiB of its own."""
    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(n)]
    big = subprocess.Popen([sys.executable, "-c", BIG, "--note=" + "t" * 400], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert big.stdout is not None and big.stdout.readline().strip() == "ready"
        yield big
    finally:
        for p in [*sleepers, big]:
            p.kill()
        for p in [*sleepers, big]:
            p.wait()


def test_top_processes_bounded_with_500_processes() -> None:
    with crowd(500) as big:
        doc = processes.top_processes(limit=20)
        assert doc["total"] >= 501 and doc["scanned"] >= 501 and doc["stopped"] is None
        rows = doc["processes"]
        assert len(rows) == 20
        assert rows == sorted(rows, key=lambda r: -r["uss"])
        top = next(r for r in rows if r["pid"] == big.pid)
        assert top["uss"] >= 150 * 1024 * 1024 and top["pss"] >= top["uss"] and top["rss"] >= top["uss"]
        # A command line is served as its shape: its long "--note=..." value is not in it.
        assert len(top["cmdline"]) <= processes.CMDLINE_MAX and top["cmdline"].endswith("--note=\u2026")
        # A smaller scan stops and says why.
        doc = processes.top_processes(max_scan=100)
        assert doc["scanned"] == 100 and "first 100" in doc["stopped"]


def test_the_time_budget_stops_the_scan() -> None:
    ticks = iter(range(0, 10**6))
    doc = processes.top_processes(budget_s=5, clock=lambda: float(next(ticks)))
    assert doc["scanned"] <= 6 and "time budget of 5 s" in doc["stopped"]


def test_no_environment_is_ever_read() -> None:
    opened: list[str] = []

    def hook(event: str, args: tuple) -> None:  # type: ignore[type-arg]
        if event == "open" and isinstance(args[0], str) and args[0].startswith("/proc/"):
            opened.append(args[0])

    sys.addaudithook(hook)  # audit hooks stay for the process: this one only records /proc opens
    with crowd(5):
        processes.top_processes()
    assert opened, "the audit hook saw no /proc reads"
    assert any(p.endswith("/smaps_rollup") for p in opened)
    assert not [p for p in opened if p.endswith("/environ")]
    opened.clear()


def test_the_sidecar_serves_its_processes() -> None:
    with crowd(3) as big, sidecar_process("127.0.0.33", ["--interval", "1", "--ray-metrics-url", ""]) as url:
        wait_until(lambda: bool(get_json(url + "/v1/processes")["processes"]), 20, what="a process table")
        doc = get_json(url + "/v1/processes")
        assert any(r["pid"] == big.pid for r in doc["processes"]) and doc["took_s"] < processes.BUDGET_S + 1


def test_secret_shaped_arguments_are_never_served() -> None:
    # Issue 24: /v1/processes returned Ray's --redis_password and a --token verbatim.
    secret = "s3cr3t-value-42"
    # argv[0] short and the program small: the served line is cut at CMDLINE_MAX, and the
    # interpreter's own path (a checkout's venv) must not push the arguments past the cut.
    proc = subprocess.Popen(["python3", "-c", SMALL_BIG, "--node-ip-address=127.0.0.1", f"--redis_password={secret}",
                             "--token", secret, f"AWS_SECRET_ACCESS_KEY={secret}"], executable=sys.executable,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with sidecar_process("127.0.0.34", ["--interval", "1", "--ray-metrics-url", ""]) as url:
            row = wait_until(lambda: next((r for r in get_json(url + "/v1/processes")["processes"]
                                           if r["pid"] == proc.pid), None), 20, what="the process in the table")
    finally:
        proc.kill()
        proc.wait()
    assert secret not in row["cmdline"], row["cmdline"]
    assert not row["cmdline"].endswith("..."), f"the line was cut; the test proves nothing: {row['cmdline']}"
    assert "--redis_password=\u2026" in row["cmdline"] and "--node-ip-address=\u2026" in row["cmdline"]
    assert "AWS_SECRET_ACCESS_KEY" not in row["cmdline"] and row["cmdline"].startswith("python3 -c \u2026")


# What is served of a command line: its shape, no value (issue 44, 7). The
# shapes a deny-list of names missed, each with the secret "S3cr3t".
@pytest.mark.parametrize("cmd, served", [
    ("raylet --redis_password=S3cr3t --port 6379", "raylet --redis_password=\u2026 --port \u2026"),
    ("ray start --token S3cr3t --block", "ray start --token \u2026 --block"),
    ("serve --api-key=S3cr3t --session-name=s", "serve --api-key=\u2026 --session-name=\u2026"),
    ("job DB_PASSWORD=S3cr3t GCS=redis://u:S3cr3t@h:1/0", "job \u2026"),
    ("tool --password:S3cr3t --pass=S3cr3t -p S3cr3t", "tool \u2026 --pass=\u2026 -p \u2026"),
    ("curl -u user:S3cr3t -H Authorization: Bearer S3cr3t https://h/x?X-Amz-Signature=S3cr3t",
     "curl -u \u2026 -H \u2026"),
    ("/usr/bin/python3 /app/leaky_service.py --db postgres://a:S3cr3t@h", "python3 /app/leaky_service.py --db \u2026"),
    ("python -m ray.util.client.server --redis-password S3cr3t", "python -m ray.util.client.server "
                                                                "--redis-password \u2026"),
    ("mysql -uroot -pS3cr3t -h db", "mysql -u\u2026 -p\u2026 -h \u2026"),  # a value joined to its flag
    ("java -Dkey=S3cr3t -jar app.jar", "java -D\u2026 -j\u2026 \u2026"),
    ("ray::LeakyActor.handle", "ray::LeakyActor.handle"),  # what the forensics reads: kept
    ("S3cr3t=1 x", "\u2026"),
])
def test_a_command_line_is_served_as_its_shape(cmd: str, served: str) -> None:
    out = processes.shape(cmd.split())
    assert out == served and "S3cr3t" not in out


def test_a_simulated_pod_lists_only_its_own_processes() -> None:
    # Issue 24: the demo's evidence listed this machine's processes, other
    # users' command lines included. In session scope, only the sidecar's own.
    import subprocess as sp

    from ..procs import VENV_BIN, free_port, stop

    port = free_port("127.0.0.35")
    proc = sp.Popen([str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"127.0.0.35:{port}",
                     "--interval", "1", "--ray-metrics-url", "", "--process-scope", "session"],
                    stdout=sp.DEVNULL, stderr=sp.DEVNULL, start_new_session=True)
    try:
        with crowd(3):
            doc = wait_until(lambda: get_json(f"http://127.0.0.35:{port}/v1/processes"), 20, what="a process table")
        assert [r["pid"] for r in doc["processes"]] == [proc.pid], doc["processes"]
    finally:
        stop(proc)


def test_the_cgroup_scope_lists_only_the_processes_of_the_cgroup_read() -> None:
    """On this machine's real memory cgroups (v1, as root): a group made for
    the test holds one process; the scan of that group lists it alone among
    the host's hundreds (as ``make real-leak``'s sidecar does)."""
    import os
    from pathlib import Path

    v1 = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (v1 / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy to make a group in")
    group = v1 / f"memoryguard-test-scope-{os.getpid()}"
    group.mkdir()
    inside = subprocess.Popen(["sh", "-c", f"echo $$ > {group}/cgroup.procs && exec sleep 120"])
    outside = subprocess.Popen(["sleep", "120"])
    try:
        wait_until(lambda: processes.memory_cgroup_of(inside.pid) == f"/{group.name}", 10)
        doc = processes.top_processes(cgroup=f"/{group.name}")
        assert [r["pid"] for r in doc["processes"]] == [inside.pid] and doc["total"] == 1
        everyone = processes.top_processes(limit=10_000)
        assert {inside.pid, outside.pid} <= {r["pid"] for r in everyone["processes"]}
    finally:
        for p in (inside, outside):
            p.kill()
            p.wait()
        group.rmdir()


@pytest.mark.parametrize("path,cgroup,inside", [
    ("/a", "/a", True), ("/a/b", "/a", True), ("/ab", "/a", False), (None, "/a", False), ("/", "/", True),
    ("/x", "/", True),
])
def test_in_cgroup(path: str | None, cgroup: str, inside: bool) -> None:
    assert processes.in_cgroup(path, cgroup) is inside
