"""The evidence kept before a rotation: what the pod held when the policy
decided, which a restart destroys.

Collected within a time budget (``spec.forensics.timeoutSeconds``, 30 s by
default) while the rotation waits to drain; whatever is not in by then is
skipped with the reason, and the rotation goes on:

- the pod's memory at that moment (anon, file, shmem, Plasma used and
  capacity, spilled bytes) and the policy's evidence (trend, projection,
  how long a condition held), from the operator's own window;
- the Ray container's processes by USS and PSS, from the sidecar's
  ``/v1/processes`` (``smaps_rollup``, command lines cut short, never an
  environment), read up to ``PROCESSES_MAX_BYTES``;
- the Ray objects held on that node grouped by call site, top 20, from a
  ``rayprobe`` process (killed at the budget; its output read up to
  ``PROBE_MAX_BYTES``): nothing a hostile pod answers costs the operator
  more than that.

Kept as one JSON artifact (at most ``ARTIFACT_MAX_BYTES``) in a ConfigMap
owned by the guard, labelled with the guard and the pod; the oldest are
deleted past ``spec.forensics.keep``. ``memoryguard-kuberay forensics``
prints them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core.policy import Decision
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.clock import iso
from memoryguard_kuberay.operator.sidecars import podhttp

ARTIFACT_MAX_BYTES = 256 * 1024
PROCESSES_MAX_BYTES = 256 * 1024
PROBE_MAX_BYTES = 256 * 1024
MAX_PROBES = 2  # rayprobe processes at once, across every guard of the operator
MAX_SCAN = 5000  # ConfigMaps looked at when the oldest beyond spec.forensics.keep are deleted
DATA_KEY = "forensics.json"
LABEL_GUARD = C.LABEL_GUARD
LABEL_POD = C.LABEL_POD
LABEL_KIND = C.LABEL_ARTIFACT
KIND = "forensics"
# The probe's command (tests point it at stand-ins that hang or answer garbage).
PROBE: tuple[str, ...] = (sys.executable, "-m", "memoryguard_kuberay.operator.forensics.rayprobe")


@dataclasses.dataclass(frozen=True)
class Subject:
    """The pod whose evidence is taken, and what the policy saw."""

    namespace: str
    guard: str
    guard_uid: str
    pod: str
    pod_uid: str
    cluster: str
    group: str
    ip: str | None
    sidecar_port: int
    gcs_address: str | None
    decision: Decision
    last_sample: Sample | None
    # The ladder's steps before it (cycle/laddering.py): what was asked and
    # what the last judged step did; None where the ladder asked nothing.
    ladder: Mapping[str, Any] | None = None


def memory_now(s: Sample | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"sampleTime": iso(s.time_s), "memoryCurrentBytes": s.memory_current_bytes,
            "memoryMaxBytes": s.memory_max_bytes, "anonBytes": s.anon_bytes, "fileBytes": s.file_bytes,
            "inactiveFileBytes": s.inactive_file_bytes, "shmemBytes": s.shmem_bytes,
            "workingSetBytes": s.working_set_bytes, "inUseBytes": s.unreclaimable_bytes,
            "plasmaUsedBytes": s.plasma_used_bytes, "plasmaCapacityBytes": s.plasma_capacity_bytes,
            "plasmaSpilledBytes": s.plasma_spilled_bytes, "psiFullAvg10": s.psi_full_avg10_pct,
            "oomKills": s.oom_kill_count}


async def sidecar_processes(ip: str, port: int, timeout_s: float) -> dict[str, Any]:
    try:
        answer = await podhttp.get(ip, port, C.PATH_PROCESSES, timeout_s=timeout_s, max_body=PROCESSES_MAX_BYTES)
    except podhttp.PodHttpError as exc:
        raise ValueError(str(exc)) from None
    if answer.status != 200:
        raise ValueError(f"HTTP {answer.status}")
    doc = json.loads(answer.body)
    if not isinstance(doc, dict) or not isinstance(doc.get("processes"), list):
        raise ValueError("not a process table")
    rows = []
    for r in doc["processes"][:50]:
        if not isinstance(r, dict):
            continue
        rows.append({"pid": _int(r.get("pid")), "name": str(r.get("name", ""))[:64], "ussBytes": _int(r.get("uss")),
                     "pssBytes": _int(r.get("pss")), "rssBytes": _int(r.get("rss")),
                     "cmdline": str(r.get("cmdline", ""))[:200]})
    return {"processes": rows, "total": _int(doc.get("total")), "scanned": _int(doc.get("scanned")),
            "stopped": None if doc.get("stopped") is None else str(doc["stopped"])[:200],
            "tookSeconds": doc.get("took_s") if isinstance(doc.get("took_s"), (int, float)) else None}


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 2**63 else None


async def ray_objects(gcs_address: str, node_ip: str, timeout_s: float,
                      slots: asyncio.Semaphore | None = None, pod_name: str = "") -> dict[str, Any]:
    """The objects on the pod's Ray node by call site, from a ``rayprobe``
    process that is killed if it outlives ``timeout_s``. ``slots`` bounds the
    probes running at once across every guard (each imports Ray: about 100
    MiB): however many rotations guards start, a probe that gets no slot
    within the budget is skipped."""
    if slots is None:
        return await _probe(gcs_address, node_ip, timeout_s, pod_name)
    async with slots:
        return await _probe(gcs_address, node_ip, timeout_s, pod_name)


async def _probe(gcs_address: str, node_ip: str, timeout_s: float, pod_name: str = "") -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *PROBE, "--gcs", gcs_address, "--node-ip", node_ip, "--pod-name", pod_name,
        "--timeout", f"{max(1.0, timeout_s - 1):g}", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL)

    async def read_capped() -> bytes:
        assert proc.stdout is not None
        out = bytearray()
        while len(out) <= PROBE_MAX_BYTES:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            out += chunk
        return bytes(out)

    try:
        out = await asyncio.wait_for(read_capped(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
        # What it wrote past the cap is read and dropped: asyncio's wait()
        # returns only once the pipe is closed, and a reader left paused on a
        # full buffer never sees it close (a flooding probe held its slot
        # for the whole budget, as often as the machine was slow to read).
        assert proc.stdout is not None
        while await proc.stdout.read(65536):
            pass
        await proc.wait()
    if len(out) > PROBE_MAX_BYTES:
        raise ValueError(f"the probe's answer is larger than {PROBE_MAX_BYTES // 1024} KiB")
    doc = json.loads(out)
    if not isinstance(doc, dict):
        raise ValueError("the probe answered something that is not an object")
    if doc.get("error"):
        raise ValueError(str(doc["error"])[:300])
    return doc


async def collect(subject: Subject, *, budget_s: float,
                  with_ray: bool, probe_slots: asyncio.Semaphore | None = None) -> dict[str, Any]:
    """The artifact, within ``budget_s``: each part that did not come in
    time, or failed, is named in ``skipped`` with why."""
    t0 = time.monotonic()
    d = subject.decision
    skipped: dict[str, str] = {}

    async def part(name: str, make: Callable[[], Awaitable[Mapping[str, Any]]]) -> dict[str, Any] | None:
        try:
            # Made here, not by the caller: a cancelled collection leaves no coroutine never awaited.
            return dict(await asyncio.wait_for(make(), budget_s))
        except TimeoutError:
            skipped[name] = f"not in within the {budget_s:g} s budget"
        except Exception as e:  # a failed part is a reason, never a failed rotation
            skipped[name] = f"{type(e).__name__}: {str(e)[:200]}"
        return None

    async def nothing() -> dict[str, Any]:
        return {}

    if subject.ip:
        procs_job: Callable[[], Awaitable[Mapping[str, Any]]] = functools.partial(
            sidecar_processes, subject.ip, subject.sidecar_port, budget_s)
    else:
        skipped["processes"] = "the pod has no IP"
        procs_job = nothing
    if with_ray and subject.ip and subject.gcs_address:
        ray_job: Callable[[], Awaitable[Mapping[str, Any]]] = functools.partial(
            ray_objects, subject.gcs_address, subject.ip, budget_s, probe_slots, subject.pod)
    else:
        skipped["rayObjects"] = ("no Ray GCS address for the cluster" if with_ray and subject.ip
                                 else "Ray is not reachable from the operator here (MEMORYGUARD_DRAIN=false)")
        ray_job = nothing
    procs, objects = await asyncio.gather(part("processes", procs_job), part("rayObjects", ray_job))
    artifact = {
        "kind": "MemoryGuardForensics", "version": 1,
        "pod": subject.pod, "podUID": subject.pod_uid, "namespace": subject.namespace, "guard": subject.guard,
        "cluster": subject.cluster, "group": subject.group, "nodeIP": subject.ip,
        "collectedAt": iso(time.time()), "tookSeconds": round(time.monotonic() - t0, 3),
        "decision": {"reason": d.reason.value, "message": d.message[:1000], "evidence": d.evidence.to_dict()},
        "memory": memory_now(subject.last_sample),
        "ladder": dict(subject.ladder) if subject.ladder else None,
        "processes": procs or None,
        "rayObjects": objects or None,
        "skipped": skipped,
    }
    return bounded(artifact)


def size_of(doc: Mapping[str, Any]) -> int:
    return len(json.dumps(doc, separators=(",", ":")))


def bounded(doc: dict[str, Any], limit: int = ARTIFACT_MAX_BYTES) -> dict[str, Any]:
    """Shorter lists (and then shorter strings) until the artifact fits."""
    for keep in (20, 10, 5, 1, 0):
        if size_of(doc) <= limit:
            return doc
        for part, key in (("processes", "processes"), ("rayObjects", "callSites")):
            if isinstance(doc.get(part), dict) and isinstance(doc[part].get(key), list):
                doc[part][key] = doc[part][key][:keep]
                doc[part]["cut"] = True
    doc["decision"]["message"] = doc["decision"]["message"][:200]
    return doc


def configmap_name(pod: str, t: float) -> str:
    return f"memoryguard-forensics-{pod}"[:230] + f"-{int(t)}"


async def keep(kube: Kube, artifact: Mapping[str, Any], subject: Subject, *, keep_n: int, now: float) -> str:
    """Store the artifact in a ConfigMap owned by the guard, then delete the
    guard's oldest beyond ``keep_n``. Returns the ConfigMap's name."""
    name = configmap_name(subject.pod, now)
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": subject.namespace,
                         "labels": {LABEL_GUARD: subject.guard, LABEL_POD: subject.pod[:63], LABEL_KIND: KIND},
                         "annotations": {C.ANN_COLLECTED_AT: str(artifact.get("collectedAt"))},
                         "ownerReferences": [{"apiVersion": C.API_VERSION, "kind": C.KIND,
                                              "name": subject.guard, "uid": subject.guard_uid}]},
            "data": {DATA_KEY: json.dumps(artifact, separators=(",", ":"))}}
    await kube.create_configmap(subject.namespace, body)
    # Anyone who may create ConfigMaps in the namespace can label some as
    # the guard's: only their names and times are read (metadata only, in
    # pages), and at most MAX_SCAN of them per keep.
    others: list[tuple[str, str]] = []  # (creationTimestamp, name) of those kept before this one
    async for items, _rv in kube.configmap_metadata(subject.namespace,
                                                    f"{LABEL_GUARD}={subject.guard},{LABEL_KIND}={KIND}"):
        for item in items:
            meta = item.get("metadata") if isinstance(item, dict) else None
            if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"] != name:
                others.append((str(meta.get("creationTimestamp", "")), meta["name"]))
        if len(others) >= MAX_SCAN:
            break
    others.sort()
    for _created, old in others[:max(0, len(others) - (keep_n - 1))]:
        await kube.delete_configmap(subject.namespace, old)
    return name
