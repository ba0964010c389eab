"""The sidecar as a real process on a loopback address, over HTTP."""

from __future__ import annotations

import itertools
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

from memoryguard_kuberay.core import commands

from ..procs import VENV_BIN, free_port, get_json, http_get, sidecar_process, wait_until

FIELDS = {"time", "memory_current", "memory_max", "anon", "file", "inactive_file", "shmem", "working_set",
          "plasma_used", "plasma_capacity", "plasma_spilled", "psi_some_avg10", "psi_full_avg10", "oom_kill",
          # cgroup v2's memory.high and memory.events high/max (issue 40), the
          # node's available memory for a container with no limit (issue 39)
          "memory_high", "events_high", "events_max", "node_available",
          # cgroup v2's memory.stat: the kernel's unreclaimable part (issue 59, 1)
          "slab_unreclaimable", "sock", "kernel_stack", "pagetables", "percpu"}


def test_serves_samples_and_metrics_from_a_cgroup(fixtures: Path) -> None:
    args = ["--cgroup-root", str(fixtures / "cgroup-v2-ray"), "--interval", "0.2", "--ray-metrics-url", ""]
    with sidecar_process("127.0.0.21", args) as url:
        doc = wait_until(lambda: (d := get_json(url + "/v1/samples")) and len(d["samples"]) >= 3 and d, 10,
                         what="three samples")
        assert doc["source"].startswith("cgroup-v2:")
        s = doc["samples"][-1]
        assert set(s) == FIELDS
        assert s["memory_current"] == 27380736000 and s["working_set"] == 27380736000 - 1610612736
        assert s["plasma_used"] is None and s["oom_kill"] == 1 and s["psi_full_avg10"] == 1.25
        assert (s["slab_unreclaimable"], s["sock"], s["pagetables"]) == (10485760, 0, 52428800)
        since = doc["samples"][-2]["time"]
        newer = get_json(f"{url}/v1/samples?since={since}")["samples"]
        assert newer and all(x["time"] > since for x in newer)
        status, body = http_get(url + "/metrics")
        text = body.decode()
        assert status == 200
        assert "memoryguard_sidecar_working_set_bytes 2.5770123264e+10" in text
        assert 'memoryguard_sidecar_scrape_success{source="memory"} 1.0' in text
        assert "memoryguard_sidecar_plasma_used_bytes" not in text  # unknown is absent, not 0
        # The kernel's OOM kills are a counter (rate() and increase() read it), named as one.
        assert "# TYPE memoryguard_sidecar_oom_kills_total counter" in text
        assert "memoryguard_sidecar_oom_kills_total 1.0" in text
        assert http_get(url + "/healthz")[0] == 200


def test_only_get_and_bounded_requests(fixtures: Path) -> None:
    args = ["--cgroup-root", str(fixtures / "cgroup-v2-ray"), "--ray-metrics-url", ""]
    with sidecar_process("127.0.0.22", args) as url:
        host, port = url[7:].split(":")
        assert http_get(url + "/v1/samples?since=yesterday")[0] == 400
        assert http_get(url + "/nope")[0] == 404

        def raw(data: bytes) -> bytes:
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(data)
                return s.recv(4096)

        assert raw(b"POST /v1/samples HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405")
        assert raw(b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
        assert raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert http_get(url + "/healthz")[0] == 200  # still serving


def test_replay_serves_a_trace_on_its_own_clock_and_exits_on_sigterm(tmp_path: Path) -> None:
    trace = commands.examples_dir() / "leak_steady.csv"
    port = free_port("127.0.0.23")
    epoch = time.time()
    proc = subprocess.Popen([str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"127.0.0.23:{port}",
                             "--replay", str(trace), "--speed", "600", "--epoch", str(epoch),
                             "--start", str(epoch)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.23:{port}"
        doc = wait_until(lambda: (d := get_json(url + "/v1/samples")) and len(d["samples"]) >= 40 and d, 20,
                         what="replayed samples")
        assert doc["source"] == "replay:leak_steady.csv"
        ts = [s["time"] - epoch for s in doc["samples"]]
        assert ts[0] == 0 and all(b - a == 15 for a, b in itertools.pairwise(ts))  # the trace's own 15 s steps
        # 600x: the trace clock runs ahead of the wall clock
        assert ts[-1] <= (time.time() - epoch) * 600 + 15
        out = tmp_path / "rec.csv"
        rec = subprocess.run([str(VENV_BIN / "memoryguard-kuberay"), "record", "--url", url, str(out)],
                             capture_output=True, text=True, timeout=30)
        assert rec.returncode == 0, rec.stderr
        lines = out.read_text().splitlines()
        assert lines[0].startswith("t_s,memory_current") and lines[1].startswith("0,")
        assert len(lines) - 1 >= 40
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert b"stopped" in proc.stdout.read()  # type: ignore[union-attr]


def test_bad_replay_file_is_a_clear_error(tmp_path: Path) -> None:
    r = subprocess.run([str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", "127.0.0.24:0", "--replay",
                        str(tmp_path / "missing.csv")], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "missing.csv" in r.stderr and "Traceback" not in r.stderr


def test_json_roundtrip_of_wire_format() -> None:
    from memoryguard_kuberay.core.samples import Sample

    s = Sample(time_s=1.5, memory_current_bytes=10, inactive_file_bytes=3, psi_full_avg10_pct=2.5)
    assert Sample.from_wire(json.loads(json.dumps(s.to_wire()))) == s


def _pid_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_idle_and_slow_connections_never_turn_the_probe_or_the_poll_away(fixtures: Path) -> None:
    """Slowloris (issue 12): 300 connections held open idle or dribbling a
    request head, and more opened meanwhile; /healthz and /v1/samples still
    answer 200, and the sidecar's memory stays bounded."""
    args = ["--cgroup-root", str(fixtures / "cgroup-v2-ray"), "--interval", "0.2", "--ray-metrics-url", ""]
    with sidecar_process("127.0.0.24", args) as url:
        host, port = url[7:].split(":")
        wait_until(lambda: http_get(url + "/healthz")[0] == 200, 10, what="healthy")
        pid = int(subprocess.run(["pgrep", "-f", "--", f"--listen {host}:{port}"], capture_output=True, text=True)
                  .stdout.split()[0])
        held: list[socket.socket] = []
        try:
            for i in range(300):
                s = socket.create_connection((host, int(port)), timeout=5)
                if i % 2:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")  # a head that never ends
                held.append(s)
            for path in ("/healthz", "/v1/samples", "/healthz"):
                t0 = time.monotonic()
                status, _ = http_get(url + path, timeout=5)
                assert status == 200, (path, status)
                print(f"{path}: {time.monotonic() - t0:.3f} s with 300 connections held")
            rss = _pid_rss_bytes(pid)
            print(f"sidecar RSS {rss / 2**20:.1f} MiB")
            assert rss < 64 * 2**20  # the injected sidecar's default limit
        finally:
            for s in held:
                s.close()


def test_a_blind_sidecar_says_so_in_its_log_and_its_health(tmp_path: Path) -> None:
    """Issue 12: a sidecar that finds nothing to read must not look healthy."""
    port = free_port("127.0.0.25")
    log = tmp_path / "sidecar.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / "memoryguard-kuberay"), "sidecar", "--listen", f"127.0.0.25:{port}",
                                 "--cgroup-root", str(tmp_path / "no-such-cgroup"), "--interval", "0.2",
                                 "--ray-metrics-url", ""], stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.25:{port}"
        _, body = wait_until(lambda: (r := http_get(url + "/healthz", 1)) and r[0] == 200 and r, 15,
                                  what="the sidecar answering")
        assert b"degraded: no memory source" in body
        doc = get_json(url + "/v1/samples")
        assert doc["source"] == "none" and doc["samples"][-1]["memory_current"] is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert "memory source lost" in log.read_text()


def test_one_peer_cannot_take_every_connection() -> None:
    # Issue 24: a flood from one peer left a legitimate poller a few answers.
    # One peer holds at most MAX_PER_PEER connections; others are served.
    from memoryguard_kuberay.sidecar import server

    args = ["--replay", str(commands.examples_dir() / "healthy_gc_sawtooth.csv"), "--speed", "600", "--interval", "1"]
    with sidecar_process("127.0.0.26", args) as url:
        host, port = url.removeprefix("http://").split(":")
        flood = []
        for _ in range(server.MAX_CONNECTIONS * 2):
            s = socket.socket()
            s.bind(("127.0.0.27", 0))
            s.connect((host, int(port)))
            flood.append(s)
        try:
            for _ in range(20):  # another peer, with the flood's connections all open
                legit = socket.socket()
                legit.bind(("127.0.0.28", 0))
                legit.settimeout(5)
                legit.connect((host, int(port)))
                legit.sendall(b"GET /v1/samples HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = b""
                while chunk := legit.recv(65536):
                    answer += chunk
                legit.close()
                assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:100]
            alive = 0
            for s in flood:  # the flooder kept at most its share: the rest were closed
                s.setblocking(False)
                try:
                    closed = s.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                alive += not closed
            assert alive <= server.MAX_PER_PEER, alive
        finally:
            for s in flood:
                s.close()


def test_a_slow_ray_endpoint_never_holds_the_cgroup_samples(fixtures: Path) -> None:
    """Issue 44, 6: Ray's metrics page dripping one line every 1.5 s (no read
    ever times out) held the sampling loop: 0 samples in 25 s and /healthz
    503. The scrape now runs beside the loop, within a deadline of its own."""
    import http.server
    import socketserver
    import threading

    class Drip(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                for i in range(60):
                    self.wfile.write(f"# line {i}\n".encode())
                    self.wfile.flush()
                    time.sleep(1.5)
            except OSError:
                pass

        def log_message(self, *a: object) -> None:
            pass

    socketserver.ThreadingTCPServer.daemon_threads = True
    server = socketserver.ThreadingTCPServer(("127.0.0.27", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.27:{server.server_address[1]}/metrics"
        args = ["--cgroup-root", str(fixtures / "cgroup-v2-ray"), "--interval", "0.5", "--ray-metrics-url", url,
                "--ray-metrics-interval", "1"]
        with sidecar_process("127.0.0.28", args) as side:
            time.sleep(6)
            status, _ = http_get(side + "/healthz")
            samples = get_json(side + "/v1/samples")["samples"]
            metrics = http_get(side + "/metrics")[1].decode()
    finally:
        server.shutdown()
    assert status == 200
    assert len(samples) >= 8, len(samples)  # a sample each 0.5 s, whatever Ray's page does
    assert all(s["memory_current"] for s in samples)
    assert 'memoryguard_sidecar_scrape_success{source="ray"} 0.0' in metrics, metrics[-2000:]
