"""``memoryguard record --url http://POD:9108 OUT.csv``: fetch a sidecar's
samples into the trace format, so a real pod can be replayed by
``simulate``. With ``--follow SECONDS`` it keeps polling (``since=`` the
newest sample) for that long; times are written relative to the first
sample (``t_s``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from memoryguard.core.samples import Sample
from memoryguard.core.traces import write_trace


def fetch(url: str, since: float | None, timeout_s: float = 10.0) -> list[Sample]:
    full = url.rstrip("/") + "/v1/samples" + (f"?since={since!r}" if since is not None else "")
    with urllib.request.urlopen(full, timeout=timeout_s) as resp:
        doc = json.loads(resp.read(64 * 1024 * 1024))
    samples = []
    for raw in doc.get("samples", []) if isinstance(doc, dict) else []:
        try:
            samples.append(Sample.from_wire(raw))
        except (ValueError, AttributeError, TypeError):
            continue
    return samples


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard record", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--url", required=True, help="the sidecar, e.g. http://10.0.0.12:9108")
    p.add_argument("out", metavar="OUT.csv")
    p.add_argument("--follow", type=float, default=0.0, metavar="SECONDS", help="keep polling this long")
    p.add_argument("--poll", type=float, default=15.0, metavar="SECONDS")
    a = p.parse_args(list(argv))
    if not a.url.startswith("http://"):
        p.error("--url must start with http://")
    samples: list[Sample] = []
    deadline = time.monotonic() + a.follow
    try:
        while True:
            since = samples[-1].time_s if samples else None
            new = [s for s in fetch(a.url, since) if since is None or s.time_s > since]
            samples.extend(new)
            print(f"recorded {len(samples)} samples", file=sys.stderr)
            if time.monotonic() + a.poll > deadline:
                break
            time.sleep(a.poll)
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        if not samples:
            print(f"memoryguard record: {a.url}: {exc}", file=sys.stderr)
            return 1
        print(f"memoryguard record: stopped early: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    if not samples:
        print("memoryguard record: the sidecar has no samples yet", file=sys.stderr)
        return 1
    t0 = samples[0].time_s
    rel = [Sample(**{**{f: getattr(s, f) for f in Sample.__dataclass_fields__}, "time_s": round(s.time_s - t0, 3)})
           for s in samples]
    with open(a.out, "w", newline="") as f:
        write_trace(rel, f)
    print(f"wrote {len(rel)} samples to {a.out}", file=sys.stderr)
    return 0
