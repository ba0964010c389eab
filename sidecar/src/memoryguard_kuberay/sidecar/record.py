"""``memoryguard-kuberay record --url http://POD:9108 OUT.csv``: fetch a sidecar's
samples into the trace format, so a real pod can be replayed by
``simulate``. With ``--follow SECONDS`` it keeps polling (``since=`` the
newest sample) for that long; times are written relative to the first
sample (``t_s``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from memoryguard_kuberay.core import answer, helptext
from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.traces import write_trace

MAX_ANSWER = 16 * 2**20  # a sidecar's page is about 240 KB
MAX_PAGES = 1000


class AnswerError(ValueError):
    """The sidecar's answer is not one (not JSON, too deep, too large)."""


def fetch_page(url: str, since: float | None, timeout_s: float = 10.0) -> tuple[list[Sample], bool]:
    """One answer: (samples, whether the sidecar has more after them).
    Every sample is kept, whatever its time: a recording is what the pod
    said."""
    full = url.rstrip("/") + C.PATH_SAMPLES + (f"?since={since!r}" if since is not None else "")
    with urllib.request.urlopen(full, timeout=timeout_s) as resp:
        body = resp.read(MAX_ANSWER + 1)
    a = answer.read(body, max_body=MAX_ANSWER, max_samples=None)
    if a.refused is not None:
        raise AnswerError(a.problem)
    return list(a.samples), a.more


def fetch(url: str, since: float | None, timeout_s: float = 10.0) -> list[Sample]:
    """Every sample after ``since``, following the sidecar's pages."""
    out: list[Sample] = []
    for _ in range(MAX_PAGES):
        page, more = fetch_page(url, since, timeout_s)
        page = [s for s in page if since is None or s.time_s > since]
        out.extend(page)
        if not more or not page:
            break
        since = page[-1].time_s
    return out


def _url_problem(url: str) -> str | None:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as exc:
        return f"--url {url!r} is not a URL: {exc}"
    if parts.scheme != "http" or not parts.hostname:
        return f"--url {url!r} must be http://HOST:PORT"
    return None


def _out_problem(path: str) -> str | None:
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        return f"{path}: is a directory"
    if not os.path.isdir(folder):
        return f"{path}: folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{path}: not writable"
    return None


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay record",
                                description=helptext.summary(__doc__))
    p.add_argument("--url", required=True, help="the sidecar, e.g. http://10.0.0.12:9108")
    p.add_argument("out", metavar="OUT.csv", help="the trace to write (its folder must be writable)")
    p.add_argument("--follow", type=float, default=0.0, metavar="SECONDS",
                   help="keep polling for this long, then write what came (default 0: one fetch)")
    p.add_argument("--poll", type=float, default=None, metavar="SECONDS",
                   help="seconds between polls while following (default 15, or less to fit --follow)")
    a = p.parse_args(list(argv))
    problem = _url_problem(a.url) or _out_problem(a.out)  # checked before fetching: nothing fetched is lost
    if problem:
        print(f"memoryguard-kuberay record: {problem}", file=sys.stderr)
        return 2
    if a.follow < 0 or (a.poll is not None and a.poll <= 0):
        print("memoryguard-kuberay record: --follow must be 0 or more and --poll positive", file=sys.stderr)
        return 2
    # A follow shorter than the poll interval still polls more than once:
    # the interval shrinks to fit (record --follow 6 fetched once before).
    poll = a.poll if a.poll is not None else min(15.0, max(1.0, a.follow / 3)) if a.follow else 15.0
    samples: list[Sample] = []
    deadline = time.monotonic() + a.follow
    try:
        while True:
            since = samples[-1].time_s if samples else None
            new = [s for s in fetch(a.url, since) if since is None or s.time_s > since]
            samples.extend(new)
            left = deadline - time.monotonic()
            print(f"recorded {len(samples)} samples" + (f", following {left:.0f} s more" if left > 0 else ""),
                  file=sys.stderr)
            if left <= 0:
                break
            time.sleep(min(poll, left))
    except (urllib.error.URLError, OSError, AnswerError, ValueError) as exc:
        if not samples:
            print(f"memoryguard-kuberay record: {a.url}: {exc}", file=sys.stderr)
            return 1
        print(f"memoryguard-kuberay record: stopped early: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    if not samples:
        print("memoryguard-kuberay record: the sidecar has no samples yet", file=sys.stderr)
        return 1
    t0 = samples[0].time_s
    rel = [Sample(**{**{f: getattr(s, f) for f in Sample.__dataclass_fields__}, "time_s": round(s.time_s - t0, 3)})
           for s in samples]
    try:
        with open(a.out, "w", newline="") as f:
            write_trace(rel, f)
    except OSError as exc:
        print(f"memoryguard-kuberay record: {a.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(rel)} samples to {a.out}", file=sys.stderr)
    return 0
