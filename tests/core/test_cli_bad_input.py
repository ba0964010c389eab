"""Bad input to the CLI (issue 12): every case ends in one line naming the
file, line or field, and a non-zero exit; never a traceback, never a silent
acceptance. Each command runs as a user runs it, in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryguard_kuberay.core import commands

LEAK = str(commands.examples_dir() / "leak_steady.csv")
HEADER = "t_s,memory_current,memory_max,inactive_file\n"


def mg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryguard_kuberay", *args], capture_output=True, text=True,
                          timeout=120)


def _said_once(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode != 0, r.stdout[-500:]
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("usage:")]
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


TRACES: list[tuple[str, Callable[[Path], Path], list[str]]] = [
    ("binary", lambda d: _write(d / "b.csv", os.urandom(4096) + b"\xff\xfe"), ["b.csv", "not a UTF-8"]),
    ("latin-1", lambda d: _write(d / "l.csv", (HEADER + "0,1,2,0\n# caf\xe9\n").encode("latin-1")),
     ["l.csv", "UTF-8"]),
    ("huge field", lambda d: _write(d / "h.csv", (HEADER + "0," + "9" * 200_000 + ",2,0\n").encode()),
     ["h.csv:2", "field larger"]),
    ("negative", lambda d: _write(d / "n.csv", (HEADER + "-5,1,2,0\n").encode()), ["n.csv:2", "negative"]),
    ("device", lambda d: Path("/dev/zero"), ["/dev/zero", "not a regular file"]),
]


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("case, make, words", TRACES, ids=[c for c, _, _ in TRACES])
def test_simulate_refuses_a_bad_trace(tmp_path: Path, case: str, make: Callable[[Path], Path],
                                      words: list[str]) -> None:
    _said_once(mg("simulate", str(make(tmp_path))), *words)


@pytest.mark.parametrize("case, rows", [("shuffled", "0,1,2,0\n60,1,2,0\n30,1,2,0\n"),
                                         ("duplicate", "0,1,2,0\n60,1,2,0\n60,1,2,0\n")])
def test_rows_out_of_time_order_are_dropped_and_said(tmp_path: Path, case: str, rows: str) -> None:
    """Issue 39, 5: as the operator drops a sample older than its last (an NTP
    step, a sample written twice), the replay drops the row and says so."""
    r = mg("simulate", str(_write(tmp_path / "t.csv", (HEADER + rows).encode())))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "1 row(s) dropped" in r.stderr and "2 samples" in r.stdout, (r.stdout, r.stderr)


GUARDS = [
    ("nan", "spec:\n  policy:\n    criticalPercent: .nan\n", ["criticalPercent", "finite"]),
    ("400 digits", "spec:\n  policy:\n    horizonSeconds: " + "9" * 400 + "\n", ["horizonSeconds", "finite"]),
    ("policy list", "spec:\n  policy: [1, 2]\n", ["spec.policy must be an object"]),
]


@pytest.mark.parametrize("case, text, words", GUARDS, ids=[c for c, _, _ in GUARDS])
def test_simulate_refuses_a_bad_guard(tmp_path: Path, case: str, text: str, words: list[str]) -> None:
    g = tmp_path / "g.yaml"
    g.write_text(text)
    r = mg("simulate", "--guard", str(g), LEAK)
    _said_once(r, "g.yaml", *words)
    assert r.stderr.count("must be an object") <= 1


def test_simulate_checks_the_plot_path_before_the_work(tmp_path: Path) -> None:
    _said_once(mg("simulate", "--plot", str(tmp_path / "missing" / "x.png"), LEAK), "does not exist")


def test_inject_false_as_a_string_is_refused_not_read_as_true() -> None:
    from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec

    with pytest.raises(SpecError, match="inject must be true or false"):
        read_guard_spec({"clusterSelector": {"names": ["a"]}, "sidecar": {"inject": "false"}})


def _serve_once(body: bytes) -> str:
    """A fake sidecar on loopback answering ``body`` to every request."""
    srv = socket.create_server(("127.0.0.41", 0))
    port = srv.getsockname()[1]

    def run() -> None:
        srv.settimeout(20)
        try:
            while True:
                conn, _ = srv.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                                 % (len(body), body))
        except OSError:
            pass
        finally:
            srv.close()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.41:{port}"


@pytest.mark.parametrize("case, body, words", [
    ("deep", b'{"samples":' + b"[" * 200_000 + b"]" * 200_000 + b"}", ["not JSON"]),
    ("bad utf-8", b'{"samples": ["\xff\xfe"]}', ["not JSON"]),
])
def test_record_refuses_a_bad_answer(tmp_path: Path, case: str, body: bytes, words: list[str]) -> None:
    _said_once(mg("record", "--url", _serve_once(body), str(tmp_path / "o.csv")), *words)


def test_record_refuses_a_bad_url_or_output_before_fetching(tmp_path: Path) -> None:
    _said_once(mg("record", "--url", "http://[::1", str(tmp_path / "o.csv")), "not a URL")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores the mode: use a folder that does not exist instead
            target = str(tmp_path / "missing" / "o.csv")
            words = ["does not exist"]
        else:
            target, words = str(locked / "o.csv"), ["not writable"]
        # The URL would answer; the output is refused first, so nothing is fetched and lost.
        _said_once(mg("record", "--url", _serve_once(b'{"samples":[]}'), target), *words)
    finally:
        locked.chmod(0o700)


def test_daily_commands_say_a_sentence_not_a_traceback(tmp_path: Path) -> None:
    # Issue 26: each of these ended in a traceback (or wrote nothing silently).
    exe = str(Path(sys.executable).parent / "memoryguard-kuberay")
    a_file = tmp_path / "x.csv"
    a_file.write_text("")
    env_none = {"KUBECONFIG": str(tmp_path / "absent"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    cases = [
        ([exe, "operator"], {**env_none, "MEMORYGUARD_METRICS_PORT": "abc"}, "MEMORYGUARD_METRICS_PORT='abc'"),
        ([exe, "operator"], env_none, "no Kubernetes credentials"),
        ([exe, "forensics", "pod"], env_none, "no Kubernetes credentials"),
        ([exe, "uninstall"], env_none, "no Kubernetes credentials"),
        ([exe, "sidecar"], {**env_none, "MEMORYGUARD_INTERVAL": "abc"}, "invalid float value: 'abc'"),
        ([exe, "gen-traces", str(a_file)], env_none, "exists and is not a directory"),
        ([exe, "gen-traces", "--random", "-1", str(tmp_path / "d")], env_none, "must be 1 or more"),
    ]
    for cmd, env, says in cases:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, (cmd, out.stderr[-800:])
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and version.stdout.startswith("memoryguard-kuberay 0.")


@pytest.mark.parametrize("rows, says", [
    ("t_s,memory_current,memory_max,inactive_file\n0,1,10,abc\n",
     "x.csv:2: column inactive_file: 'abc' is not a number"),
    ("t_s,memory_current,memory_max,inactive_file\n0,1,10,0\n5,-3,10,0\n", "x.csv:3: column memory_current: -3 is "
                                                                          "negative"),
])
def test_a_bad_cell_names_its_file_line_and_column(tmp_path: Path, rows: str, says: str) -> None:
    from memoryguard_kuberay.core.traces import TraceError, read_trace

    (tmp_path / "x.csv").write_text(rows)
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "x.csv")
    assert says in str(e.value)


def test_a_trace_the_policy_cannot_judge_says_so(tmp_path: Path) -> None:
    # Issue 26: a trace without inactive_file climbing to 99% of its limit
    # never rotated and said nothing ("first rotation at -").
    rows = "t_s,memory_current,memory_max\n" + "".join(f"{i * 60},{i * 10**8},{10**10}\n" for i in range(100))
    (tmp_path / "climb.csv").write_text(rows)
    out = subprocess.run([str(Path(sys.executable).parent / "memoryguard-kuberay"), "simulate",
                          str(tmp_path / "climb.csv")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "no inactive_file column: the working set (memory_current - inactive_file) is unknown" in out.stderr


def test_bench_on_the_examples_folder_points_at_its_traces(tmp_path: Path) -> None:
    # Issue 61, 7: `bench examples` failed ("no .csv traces in examples")
    # where its help said the examples were the default.
    exe = str(Path(sys.executable).parent / "memoryguard-kuberay")
    (tmp_path / "examples" / "traces").mkdir(parents=True)
    (tmp_path / "examples" / "traces" / "labels.json").write_text("{}")
    out = subprocess.run([exe, "bench", "examples"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "(did you mean examples/traces?)" in out.stderr, out.stderr
    helped = subprocess.run([exe, "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert "examples/traces" in " ".join(helped.stdout.split()), helped.stdout
