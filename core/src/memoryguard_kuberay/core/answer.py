"""The sidecar's ``/v1/samples`` answer, both ways, in one place: the
sidecar writes it with ``envelope``, and every reader (the operator's poll,
``record``, the devkit's proxies) reads it with ``read``.

The answer is ``{"source", "samples": [...], "more"?: true, "pod"?: {"uid",
"name"}}``: at most ``PAGE_SAMPLES`` samples (the oldest after ``since=``),
``more`` when others follow (the reader asks again from the last one), and
the pod it is from where the sidecar knows it (the operator drops an answer
from another pod: a reused IP). ``read`` never raises, whatever the body,
and its cost is bounded by what its caller allows. Purely computational.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.constants import PAGE_SAMPLES
from memoryguard_kuberay.core.samples import Sample

SOURCE_NONE = "none"  # a sidecar that found no cgroup and no process to read


def envelope(samples: list[dict[str, Any]], *, source: str, more: bool, pod_uid: str | None = None,
             pod_name: str | None = None) -> dict[str, Any]:
    """The answer a sidecar serves: ``samples`` as ``Sample.to_wire`` wrote
    them, at most ``PAGE_SAMPLES``."""
    assert len(samples) <= PAGE_SAMPLES, "a sidecar pages its answers"
    doc: dict[str, Any] = {"source": source, "samples": samples}
    if more:
        doc["more"] = True
    if pod_uid or pod_name:
        doc["pod"] = {"uid": pod_uid, "name": pod_name}
    return doc


class Refusal(str, enum.Enum):
    """Why a whole answer was dropped."""

    NOT_AN_ANSWER = "not an answer"  # too large, not JSON, no samples list, too many samples
    WRONG_POD = "wrong pod"  # from another pod, or from no pod where the injected sidecar always names it


@dataclasses.dataclass(frozen=True)
class Answer:
    samples: tuple[Sample, ...]  # sorted by time
    problem: str | None = None  # in words; with ``refused`` set, the whole answer was dropped
    refused: Refusal | None = None
    source: str | None = None
    more: bool = False
    rejected: int = 0  # samples dropped as malformed or from the future
    newest_too_old_s: float | None = None  # the newest sample skipped as older than ``oldest_s``

    @property
    def blind(self) -> bool:
        """The sidecar reads nothing of the pod's memory."""
        return self.source == SOURCE_NONE


def _refused(problem: str, why: Refusal = Refusal.NOT_AN_ANSWER) -> Answer:
    return Answer((), problem, why)


def _time_of(raw: Mapping[str, Any]) -> float | None:
    t = raw.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        t = float(t)
    except OverflowError:  # an int of hundreds of digits
        return None
    return t if math.isfinite(t) else None


def read(body: bytes, *, max_body: int, max_samples: int | None, now_s: float = math.inf,
         max_future_s: float = 0.0, oldest_s: float | None = None, pod_uid: str | None = None,
         require_uid: bool = False) -> Answer:
    """``body`` read as an answer. Refused whole when it is over
    ``max_body`` bytes, not JSON, has no samples list, has more than
    ``max_samples``, or is from another pod than ``pod_uid`` (or names none
    where ``require_uid``). Samples older than ``oldest_s`` are skipped
    before they are parsed; samples past ``now_s + max_future_s`` (a clock
    that is off: taking them would make every later sample look out of
    order) and malformed ones are counted in ``rejected``."""
    if len(body) > max_body:
        return _refused(f"response too large (over {max_body} bytes)")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _refused("response is not JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        return _refused("response has no samples list")
    raw_samples: list[Any] = doc["samples"]
    if max_samples is not None and len(raw_samples) > max_samples:
        return _refused(f"answer with {len(raw_samples)} samples (at most {max_samples}); dropped")
    who = doc.get("pod")
    uid = who.get("uid") if isinstance(who, dict) else None
    if pod_uid and uid and uid != pod_uid:
        name = who.get("name") if isinstance(who, dict) else None
        return _refused(f"answer from another pod ({str(name or uid)[:80]}); the IP was reused, samples dropped",
                        Refusal.WRONG_POD)
    if require_uid and not uid:
        return _refused("answer names no pod, but this pod runs the injected sidecar, which always does; "
                        "samples dropped", Refusal.WRONG_POD)
    out: list[Sample] = []
    rejected = 0
    too_old: float | None = None
    for raw in raw_samples:
        t = _time_of(raw) if isinstance(raw, dict) else None
        if t is not None and oldest_s is not None and t < oldest_s:
            too_old = t if too_old is None else max(too_old, t)
            continue  # older than the reader can use: skipped before it is parsed
        if t is None or t > now_s + max_future_s:
            rejected += 1
            continue
        try:
            out.append(Sample.from_wire(raw))
        except ValueError:
            rejected += 1
    out.sort(key=lambda s: s.time_s)
    src = doc.get("source")
    return Answer(tuple(out), f"{rejected} sample(s) rejected" if rejected else None, None,
                  src[:80] if isinstance(src, str) else None, doc.get("more") is True, rejected, too_old)
