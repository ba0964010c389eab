"""Polling a pod's sidecar: ``GET http://<pod IP>:<port>/v1/samples?since=``.

Every Ray pod may be hostile (code in a Ray worker shares the sidecar's pod,
uid and process namespace), and one operator serves every tenant, so an
answer costs the operator bounded memory and time whatever it holds:

- the body is read up to ``MAX_BODY`` (512 KiB; a full default window, an
  hour at 5 s, is about 170 KB) and refused past it, and within the poll's
  timeout (a slow drip ends there), by podhttp.py;
- at most ``MAX_SAMPLES`` samples per answer (a sidecar pages its answers
  below that and says ``"more": true``), and across a poll's pages at most
  ``MAX_POLL_SAMPLES`` samples and ``MAX_POLL_BYTES`` read;
- samples older than ``oldest_s`` (what the policy's window can use) are
  skipped before they are parsed, samples from beyond the operator's now
  (``max_future_s``, 10 s) are dropped;
- JSON nested too deep is "not JSON" (the decoder's recursion limit).

Whatever comes back yields a ``Poll`` with the valid samples and an error
string; it never raises. An unreachable sidecar is a visible state, never a
reason to act.

Pod IPs are reused: a sidecar that names its pod (``pod.uid``, from the
downward API, as the injected sidecar does) is believed only for that pod.
A pod that runs the operator's injected sidecar must be named by its
answer (``require_uid``): one that names no pod is refused. A sidecar run by
hand that names no pod is believed (the user put it there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
import urllib.parse
from collections.abc import Callable

from memoryguard_kuberay.core import answer
from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.operator.sidecars import podhttp

log = logging.getLogger(__name__)
MAX_BODY = 512 * 1024
MAX_SAMPLES = C.OPERATOR_MAX_SAMPLES
MAX_PAGES = 16
# What one poll may cost across all its pages (issue 24: 16 full pages of
# 2,000 samples each were 32,000 samples a poll, and 100 such pods took the
# operator to 573 MiB): two of the sidecar's own pages (1,000 samples each).
# A longer history comes over the next polls, each asking from its last sample.
MAX_POLL_SAMPLES = 2000
MAX_POLL_BYTES = 1024 * 1024
# And what a pod may bring between two polls (issue 24: 100 pods answering a
# full page with "more" at every poll took the event loop 5.5 s at a time;
# each poll was within the caps, but every poll was full). A sidecar samples
# once every few seconds: a pod fed at the last poll gets BUDGET_FLOOR
# samples plus BUDGET_PER_S for each second since, in bytes a generous
# BUDGET_SAMPLE_BYTES each; its first poll, or the first after it brought
# nothing, the whole budget (a backlog after an outage comes in full).
BUDGET_FLOOR = 100
BUDGET_PER_S = 2.0
BUDGET_SAMPLE_BYTES = 512


def poll_budget(fed_s_ago: float | None) -> tuple[int, int]:
    """(samples, bytes) a pod may bring in this poll, ``fed_s_ago`` seconds
    (operator clock) after the last poll that brought it samples."""
    n = MAX_POLL_SAMPLES if fed_s_ago is None else BUDGET_FLOOR + int(BUDGET_PER_S * max(0.0, fed_s_ago))
    if n >= MAX_POLL_SAMPLES:
        return MAX_POLL_SAMPLES, MAX_POLL_BYTES
    return n, min(MAX_POLL_BYTES, 4096 + n * BUDGET_SAMPLE_BYTES)
MAX_FUTURE_S = 10.0


class PollFailure(str, enum.Enum):
    """Why a poll brought no samples: the pod's verdict in status and metrics."""

    UNREACHABLE = "SidecarUnreachable"  # nothing came back: refused, timed out
    BAD_ANSWER = "BadAnswer"  # an answer that could not be read: not HTTP, not JSON, too large, cut short
    WRONG_POD = "WrongPod"  # an answer from another pod (a reused IP), or naming none where it must
    STALE = "SamplesStale"  # only samples older than the policy's window
    # Not asked at all, and no fault of the guard's (issue 42, 1 and 2):
    NOT_RUNNING = "PodNotRunning"  # Pending (waiting for a node, a quota), or going: polled once it runs
    NO_SIDECAR = "NoSidecar"  # made before the sidecar was injected: it gets one when it is replaced


# Poll failures that are the pod's state, not a broken guard: they degrade nothing.
NOT_FAULTS = frozenset({PollFailure.NOT_RUNNING, PollFailure.NO_SIDECAR})


@dataclasses.dataclass(frozen=True)
class Poll:
    samples: tuple[Sample, ...]
    error: str | None
    latency_s: float
    source: str | None = None
    rejected: int = 0  # samples dropped as malformed or from the future
    more: bool = False  # the sidecar has more samples after these (it pages its answers)
    # Whether the sidecar reads the pod's memory at all: False when it says
    # its source is "none" (it found no cgroup and no process to read).
    blind: bool = False
    newest_too_old_s: float | None = None  # the newest sample skipped as older than the window
    failure: PollFailure | None = None  # set when error is, and no sample came


async def poll(ip: str, port: int, since: float | None, *, timeout_s: float,
               now: Callable[[], float], pod_uid: str | None = None, require_uid: bool = False,
               oldest_s: float | None = None, max_future_s: float = MAX_FUTURE_S, max_pages: int = MAX_PAGES,
               budget: tuple[int, int] = (MAX_POLL_SAMPLES, MAX_POLL_BYTES),
               pool: podhttp.Pool | None = None) -> Poll:
    """Poll (on a connection kept in ``pool``, when given), following
    ``more`` for at most ``max_pages`` answers, all within ``timeout_s``
    together and within ``budget`` (samples, bytes; an answer over it is
    refused unread). Samples older than ``oldest_s`` are not asked for.
    ``now`` (the operator's clock) is read when an answer is in: a sample
    can be no later than that. Never raises: whatever the pod sends, a Poll."""
    t0 = time.monotonic()
    try:
        return await _poll(ip, port, since, t0=t0, timeout_s=timeout_s, now=now, pod_uid=pod_uid,
                           require_uid=require_uid, oldest_s=oldest_s, max_future_s=max_future_s,
                           max_pages=max_pages, budget=budget,
                           # not `pool or ...`: a Pool with no idle connection has len 0, and is falsy
                           pool=podhttp.Pool(max_idle=0) if pool is None else pool)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a shape of answer no check above foresaw: this pod's verdict, never the cycle's
        log.warning("poll of %s:%s: unexpected %s reading its answer", ip, port, type(exc).__name__, exc_info=True)
        return Poll((), f"answer could not be read ({type(exc).__name__})", time.monotonic() - t0,
                    failure=PollFailure.BAD_ANSWER)


async def _poll(ip: str, port: int, since: float | None, *, t0: float, timeout_s: float, now: Callable[[], float],
                pod_uid: str | None, require_uid: bool, oldest_s: float | None, max_future_s: float,
                max_pages: int, budget: tuple[int, int], pool: podhttp.Pool) -> Poll:
    max_samples, max_bytes = min(budget[0], MAX_POLL_SAMPLES), min(budget[1], MAX_POLL_BYTES)
    if oldest_s is not None and (since is None or since < oldest_s):
        since = oldest_s
    samples: list[Sample] = []
    last = Poll((), None, 0.0)
    rejected = 0
    read = 0
    for _ in range(max_pages):
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0 or read >= max_bytes or len(samples) >= max_samples:
            break  # the rest, if any, comes with the next poll (it asks from the last sample on)
        last, n = await _one(pool, ip, port, since, timeout_s=left, now=now, pod_uid=pod_uid, require_uid=require_uid,
                             max_future_s=max_future_s, oldest_s=oldest_s,
                             max_body=min(MAX_BODY, max_bytes - read))
        read += n
        samples.extend(last.samples[:max_samples - len(samples)])
        rejected += last.rejected
        if not last.more or not last.samples:
            break
        since = samples[-1].time_s
    error = last.error if not samples else (f"{rejected} sample(s) rejected" if rejected else None)
    failure = None if samples else last.failure or (PollFailure.BAD_ANSWER if error else None)
    if not samples and last.newest_too_old_s is not None and oldest_s is not None:
        error = (f"samples are stale: the newest is {now() - last.newest_too_old_s:.0f} s old, older than the "
                 "policy's window (is the sidecar's clock behind?)")
        failure = PollFailure.STALE
    return Poll(tuple(samples), error, time.monotonic() - t0, last.source, rejected, last.more, last.blind,
                last.newest_too_old_s, failure)


async def _one(pool: podhttp.Pool, ip: str, port: int, since: float | None, *, timeout_s: float,
               now: Callable[[], float], pod_uid: str | None, require_uid: bool, max_future_s: float,
               oldest_s: float | None, max_body: int) -> tuple[Poll, int]:
    """One page: the Poll and the bytes its body took."""
    target = C.PATH_SAMPLES if since is None else f"{C.PATH_SAMPLES}?since={urllib.parse.quote(repr(since))}"
    t0 = time.monotonic()
    try:
        answer = await pool.get(ip, port, target, timeout_s=timeout_s, max_body=max_body, owner=pod_uid or "")
    except podhttp.PodHttpError as exc:
        return Poll((), str(exc), time.monotonic() - t0,
                    failure=PollFailure.UNREACHABLE if exc.unreachable else PollFailure.BAD_ANSWER), max_body
    if answer.status != 200:
        return Poll((), f"HTTP {answer.status}", time.monotonic() - t0,
                    failure=PollFailure.BAD_ANSWER), len(answer.body)
    return parse(answer.body, latency_s=time.monotonic() - t0, now_s=now(), pod_uid=pod_uid,
                 require_uid=require_uid, max_future_s=max_future_s, oldest_s=oldest_s), len(answer.body)


def parse(body: bytes, *, latency_s: float, now_s: float, pod_uid: str | None = None, require_uid: bool = False,
          max_future_s: float = MAX_FUTURE_S, oldest_s: float | None = None) -> Poll:
    """The sidecar's answer, whatever it is, as a Poll (read by the core's
    one reader of it, ``answer.read``). Never raises; its cost is bounded by
    MAX_BODY and MAX_SAMPLES."""
    a = answer.read(body, max_body=MAX_BODY, max_samples=MAX_SAMPLES, now_s=now_s, max_future_s=max_future_s,
                    oldest_s=oldest_s, pod_uid=pod_uid, require_uid=require_uid)
    if a.refused is not None:
        failure = PollFailure.WRONG_POD if a.refused is answer.Refusal.WRONG_POD else PollFailure.BAD_ANSWER
        return Poll((), a.problem, latency_s, failure=failure)
    return Poll(a.samples, a.problem, latency_s, a.source, a.rejected, more=a.more, blind=a.blind,
                newest_too_old_s=a.newest_too_old_s)
