"""Polling a pod's sidecar: ``GET http://<pod IP>:<port>/v1/samples?since=``.

Whatever comes back (garbage, truncated JSON, a huge body, samples out of
order or from a clock far off, an answer from another pod) yields a ``Poll``
with the samples that are valid and an error string; it never raises. An
unreachable sidecar is a visible state, never a reason to act.

Pod IPs are reused: a sidecar that names its pod (``pod.uid``, from the
downward API, as the injected sidecar does) is believed only for that pod,
so one pod's leak can never be pinned on another that got its old IP. A
sidecar that names no pod (run by hand, an older version) is believed.
"""

from __future__ import annotations

import dataclasses
import json
import time

import aiohttp

from memoryguard.core.samples import Sample

MAX_BODY = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Poll:
    samples: tuple[Sample, ...]
    error: str | None
    latency_s: float
    source: str | None = None
    rejected: int = 0  # samples dropped as malformed or from the future


async def poll(session: aiohttp.ClientSession, ip: str, port: int, since: float | None, *, timeout_s: float,
               now_s: float, pod_uid: str | None = None, max_future_s: float = 120.0) -> Poll:
    url = f"http://{ip}:{port}/v1/samples"
    params = {"since": repr(since)} if since is not None else None
    t0 = time.monotonic()
    try:
        async with session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            if r.status != 200:
                return Poll((), f"HTTP {r.status}", time.monotonic() - t0)
            # Read to the end, bounded: ``content.read(n)`` alone returns
            # whatever has arrived so far, which for a large answer is a part.
            chunks: list[bytes] = []
            size = 0
            async for chunk in r.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > MAX_BODY:
                    return Poll((), "response too large", time.monotonic() - t0)
                chunks.append(chunk)
            body = b"".join(chunks)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return Poll((), f"unreachable: {type(exc).__name__} {exc}".strip(), time.monotonic() - t0)
    return parse(body, latency_s=time.monotonic() - t0, now_s=now_s, pod_uid=pod_uid, max_future_s=max_future_s)


def parse(body: bytes, *, latency_s: float, now_s: float, pod_uid: str | None = None,
          max_future_s: float = 120.0) -> Poll:
    """The sidecar's answer, whatever it is, as a Poll. Never raises."""
    if len(body) > MAX_BODY:
        return Poll((), "response too large", latency_s)
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Poll((), "response is not JSON", latency_s)
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        return Poll((), "response has no samples list", latency_s)
    who = doc.get("pod")
    if pod_uid and isinstance(who, dict) and who.get("uid") and who.get("uid") != pod_uid:
        return Poll((), f"answer from another pod ({str(who.get('name') or who.get('uid'))[:80]}); "
                        "the IP was reused, samples dropped", latency_s)
    out: list[Sample] = []
    rejected = 0
    for raw in doc["samples"]:
        try:
            s = Sample.from_wire(raw) if isinstance(raw, dict) else None
        except ValueError:
            s = None
        # A sample from beyond the operator's now is from a clock that is off:
        # taking it would make every later sample look out of order.
        if s is None or s.time_s > now_s + max_future_s:
            rejected += 1
            continue
        out.append(s)
    out.sort(key=lambda s: s.time_s)
    src = doc.get("source")
    return Poll(tuple(out), None if not rejected else f"{rejected} sample(s) rejected", latency_s,
                src if isinstance(src, str) else None, rejected)
