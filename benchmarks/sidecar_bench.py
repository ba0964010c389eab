"""``make bench-sidecar``: what one sample costs the sidecar, and its RSS.

1. In-process, the real ``Sidecar.sample_once`` path on this machine's own
   cgroup (v1 here), N times: CPU per sample (thread CPU time), median and
   p99; then the object store scrape alone against a loopback server that
   serves a real Ray 2.60 raylet page (287 KiB).
2. The sidecar as a real process at its default interval (5 s) for a bounded
   time, scraping that page every 10 s: its CPU seconds per sample and RSS,
   read from /proc.
Prints figures; asserts nothing (targets: <= 200 us per sample without the
scrape, RSS <= 40 MiB).
"""

from __future__ import annotations

import argparse
import http.server
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from memoryguard_kuberay.sidecar.main import Sidecar, parse_args
from memoryguard_kuberay.sidecar.objectstore import RayMetricsScraper

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "ray-2.60-metrics.txt").read_bytes()


def own_memory_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if "memory" in ctrls.split(","):
            return "/sys/fs/cgroup/memory" + path
    if Path("/sys/fs/cgroup/memory.current").exists():
        return "/sys/fs/cgroup"
    sys.exit("no memory cgroup found on this machine")


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--process-seconds", type=float, default=60.0)
    a = ap.parse_args()
    cg = own_memory_cgroup()
    srv = http.server.ThreadingHTTPServer(("127.0.0.41", 0), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    metrics_url = f"http://127.0.0.41:{srv.server_address[1]}/metrics"

    sc = Sidecar(parse_args(["--cgroup-root", cg, "--ray-metrics-url", ""]))
    costs = []
    for _ in range(a.samples):
        t0 = time.thread_time()
        sc.sample_once(time.time())
        costs.append(time.thread_time() - t0)
    print(f"source: {sc.sampler.source_name}")
    print(f"sample without scrape: median {statistics.median(costs) * 1e6:.1f} us, "
          f"p99 {pct(costs, 99) * 1e6:.1f} us CPU over {a.samples} samples")

    scraper = RayMetricsScraper(metrics_url)
    scrape = []
    for _ in range(50):
        t0 = time.thread_time()
        r = scraper.scrape(time.time())
        scrape.append(time.thread_time() - t0)
    assert r.used_bytes is not None
    print(f"object store scrape (287 KiB page): median {statistics.median(scrape) * 1e3:.2f} ms, "
          f"p99 {pct(scrape, 99) * 1e3:.2f} ms CPU; at most one per 10 s, so per 5 s sample "
          f"{statistics.median(scrape) / 2 * 1e6:.0f} us amortised")

    port = srv.server_address[1] + 1
    proc = subprocess.Popen([sys.executable, "-m", "memoryguard_kuberay", "sidecar", "--listen", f"127.0.0.42:{port}",
                             "--cgroup-root", cg, "--ray-metrics-url", metrics_url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:
            f = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / ticks

        def samples() -> int:
            body = urllib.request.urlopen(f"http://127.0.0.42:{port}/metrics", timeout=5).read().decode()
            line = next(x for x in body.splitlines() if x.startswith("memoryguard_sidecar_samples_total"))
            return int(float(line.split()[-1]))

        c0, n0 = cpu_s(), samples()
        time.sleep(a.process_seconds)
        c1, n1 = cpu_s(), samples()
        rss = next(int(x.split()[1]) for x in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                   if x.startswith("VmRSS"))
        print(f"process at the default 5 s interval for {a.process_seconds:.0f} s: {n1 - n0} samples, "
              f"{(c1 - c0) * 1000:.0f} ms CPU in all (incl. scrapes and two HTTP polls), "
              f"{(c1 - c0) / max(1, n1 - n0) * 1e3:.2f} ms per sample at clock-tick resolution; "
              f"RSS {rss / 1024:.1f} MiB")
    finally:
        proc.terminate()
        proc.wait(10)
        srv.shutdown()


if __name__ == "__main__":
    main()
