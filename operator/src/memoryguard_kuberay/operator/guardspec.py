"""A MemoryGuard's spec, read and validated into typed settings.

``read_guard_spec`` returns a ``GuardSpec`` or raises ``SpecError`` listing
every problem in words a person understands; the handler turns that into a
Degraded condition and a Warning Event and does not retry. The CRD's schema
rejects most of this at admission; this check is for what a schema cannot
say and for API servers that did not enforce it. Purely computational.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core.settings import PolicySettings, SettingsError
from memoryguard_kuberay.operator import trust as tr


class Mode:
    OFF = "off"
    RECOMMEND = "recommend"
    AUTO = "auto"
    ALL = (OFF, RECOMMEND, AUTO)


DEFAULT_JEMALLOC_PATH = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
DEFAULT_MALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"
DEFAULT_SIDECAR_IMAGE = "ghcr.io/memoryguard/memoryguard-sidecar:0.1.0"
# Values that end up in pod templates are checked against these before any
# patch: no shell, no newlines, nothing that could smuggle another variable.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]{1,255}$")
_SAFE_MALLOC_CONF = re.compile(r"^[a-z_]+:[A-Za-z0-9_.-]+(,[a-z_]+:[A-Za-z0-9_.-]+){0,15}$")
_SAFE_IMAGE = re.compile(r"^[a-z0-9]([a-z0-9._/:@-]{0,254})$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kubernetes label keys and values: checked before they are joined into a
# selector string (a key like "a!" would otherwise select everything).
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")


class SpecError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class Selection:
    cluster_names: tuple[str, ...]
    cluster_labels: Mapping[str, str]
    worker_groups: tuple[str, ...]  # empty: every group


@dataclasses.dataclass(frozen=True)
class Sampling:
    interval_s: float = 15.0
    sidecar_port: int = 9108
    timeout_s: float = 5.0


@dataclasses.dataclass(frozen=True)
class Jemalloc:
    mode: str = Mode.OFF
    library_path: str = DEFAULT_JEMALLOC_PATH
    malloc_conf: str = DEFAULT_MALLOC_CONF


@dataclasses.dataclass(frozen=True)
class Spilling:
    mode: str = Mode.OFF
    threshold_percent: int = 80
    min_spilling_size_bytes: int = 100 * 1024 * 1024
    directories: tuple[str, ...] = ("/tmp/ray-spill",)


@dataclasses.dataclass(frozen=True)
class SidecarInjection:
    inject: bool = False
    image: str = DEFAULT_SIDECAR_IMAGE
    port: int = 9108
    cpu_request: str = "10m"
    memory_request: str = "32Mi"
    memory_limit: str = "64Mi"


@dataclasses.dataclass(frozen=True)
class Pdb:
    enabled: bool = False
    max_unavailable: int = 1


@dataclasses.dataclass(frozen=True)
class GuardSpec:
    selection: Selection
    policy: PolicySettings
    sampling: Sampling
    jemalloc: Jemalloc
    spilling: Spilling
    sidecar: SidecarInjection
    pdb: Pdb
    replacement_timeout_s: float = 900.0
    eviction_timeout_s: float = 600.0


def _obj(spec: Mapping[str, Any], key: str, problems: list[str]) -> Mapping[str, Any]:
    v = spec.get(key)
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        problems.append(f"spec.{key} must be an object")
        return {}
    return v


def _num(section: Mapping[str, Any], key: str, where: str, lo: float, hi: float, default: float,
         problems: list[str], *, integer: bool = True) -> float:
    v = section.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
        problems.append(f"{where}.{key} must be a {'whole ' if integer else ''}number, got {v!r}")
        return default
    if not lo <= v <= hi:
        problems.append(f"{where}.{key}: {v} is outside [{lo:g}, {hi:g}]")
        return default
    return v


def read_guard_spec(spec: Mapping[str, Any] | None, *, sidecar_image: str = DEFAULT_SIDECAR_IMAGE,
                    trust: tr.Trust | None = None) -> GuardSpec:
    """``sidecar_image``: the image to inject when the spec names none (the
    chart passes the one it was installed with). ``trust``: the installer's
    limits on what a guard may put into pods (see trust.py); None where no
    operator acts on the spec (offline tools)."""
    spec = spec or {}
    problems: list[str] = []
    # Policy, rotation budgets, includeHead and dryRun: the core's table.
    core_spec = {k: spec[k] for k in ("policy", "includeHead", "dryRun") if k in spec}
    rotation = dict(_obj(spec, "rotation", problems))
    pdb_raw = rotation.pop("podDisruptionBudget", None) or {}
    replacement_timeout = rotation.pop("replacementTimeoutSeconds", 900)
    eviction_timeout = rotation.pop("evictionTimeoutSeconds", 600)
    core_spec["rotation"] = rotation
    try:
        policy = PolicySettings.from_spec(core_spec)
    except SettingsError as e:
        problems.extend(e.problems)
        policy = PolicySettings()

    sel = _obj(spec, "clusterSelector", problems)
    names = sel.get("names") or []
    labels = sel.get("matchLabels") or {}
    if not isinstance(names, list) or not all(isinstance(n, str) and _DNS_LABEL.match(n) for n in names):
        problems.append("spec.clusterSelector.names must be a list of RayCluster names")
        names = []
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        problems.append("spec.clusterSelector.matchLabels must map label keys to strings")
        labels = {}
    bad = sorted(f"{k}={v}" for k, v in labels.items()
                 if not (isinstance(k, str) and len(k) <= 317 and LABEL_KEY.match(k) and LABEL_VALUE.match(v)))
    if bad:
        problems.append(f"spec.clusterSelector.matchLabels: not a label key or value: {', '.join(bad)[:200]}")
        labels = {}
    if not names and not labels:
        problems.append("spec.clusterSelector needs names or matchLabels: a guard must say which RayClusters "
                        "it guards")
    groups = spec.get("workerGroups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        problems.append("spec.workerGroups must be a list of worker group names")
        groups = []

    smp = _obj(spec, "sampling", problems)
    sampling = Sampling(
        interval_s=_num(smp, "intervalSeconds", "spec.sampling", 1, 3600, 15, problems),
        sidecar_port=int(_num(smp, "sidecarPort", "spec.sampling", 1, 65535, 9108, problems)),
        timeout_s=_num(smp, "timeoutSeconds", "spec.sampling", 0.1, 60, 5, problems, integer=False),
    )
    if sampling.interval_s >= policy.stale_after_s:
        problems.append("spec.sampling.intervalSeconds must be shorter than spec.policy.staleAfterSeconds, "
                        "or every sample would be stale")

    rem = _obj(spec, "remediation", problems)
    jm = rem.get("jemalloc") or {}
    sp = rem.get("spilling") or {}
    for where, section in (("jemalloc", jm), ("spilling", sp)):
        mode = section.get("mode", Mode.OFF)
        if mode not in Mode.ALL:
            problems.append(f"spec.remediation.{where}.mode must be one of off, recommend, auto; got {mode!r}")
    jemalloc = Jemalloc(mode=jm.get("mode", Mode.OFF) if jm.get("mode", Mode.OFF) in Mode.ALL else Mode.OFF,
                        library_path=jm.get("libraryPath", DEFAULT_JEMALLOC_PATH),
                        malloc_conf=jm.get("mallocConf", DEFAULT_MALLOC_CONF))
    if not isinstance(jemalloc.library_path, str) or not _SAFE_PATH.match(jemalloc.library_path):
        problems.append("spec.remediation.jemalloc.libraryPath must be an absolute path of letters, digits, "
                        "'.', '_', '-', '+' and '/'")
    if not isinstance(jemalloc.malloc_conf, str) or not _SAFE_MALLOC_CONF.match(jemalloc.malloc_conf):
        problems.append("spec.remediation.jemalloc.mallocConf must look like 'key:value,key:value'")
    if isinstance(jemalloc.library_path, str) and jemalloc.mode != Mode.OFF:
        problems += tr.jemalloc_problems(jemalloc.library_path, trust)
    dirs = sp.get("directories", ["/tmp/ray-spill"])
    if not isinstance(dirs, list) or not dirs or not all(isinstance(d, str) and _SAFE_PATH.match(d) for d in dirs):
        problems.append("spec.remediation.spilling.directories must be a non-empty list of absolute paths")
        dirs = ["/tmp/ray-spill"]
    spilling = Spilling(
        mode=sp.get("mode", Mode.OFF) if sp.get("mode", Mode.OFF) in Mode.ALL else Mode.OFF,
        threshold_percent=int(_num(sp, "thresholdPercent", "spec.remediation.spilling", 1, 100, 80, problems)),
        min_spilling_size_bytes=int(_num(sp, "minSpillingSizeBytes", "spec.remediation.spilling", 0, 2**40,
                                         100 * 1024 * 1024, problems)),
        directories=tuple(dirs),
    )
    problems += tr.directory_problems(spilling.directories, "spec.remediation.spilling.directories")

    sc = _obj(spec, "sidecar", problems)
    if not isinstance(sc.get("inject", False), bool):
        problems.append(f"spec.sidecar.inject must be true or false, got {str(sc.get('inject'))[:20]!r}")
    res = sc.get("resources") or {}
    sidecar = SidecarInjection(
        inject=sc.get("inject") is True,
        image=sc.get("image") or sidecar_image,
        port=int(_num(sc, "port", "spec.sidecar", 1024, 65535, 9108, problems)),
        cpu_request=str(res.get("cpuRequest", "10m")),
        memory_request=str(res.get("memoryRequest", "32Mi")),
        memory_limit=str(res.get("memoryLimit", "64Mi")),
    )
    if not isinstance(sidecar.image, str) or not _SAFE_IMAGE.match(sidecar.image):
        problems.append("spec.sidecar.image is not a valid image reference")
    for q in (sidecar.cpu_request, sidecar.memory_request, sidecar.memory_limit):
        if not _QUANTITY.match(q):
            problems.append(f"spec.sidecar.resources: {q!r} is not a quantity")
    if sidecar.inject:
        problems += tr.sidecar_problems(image=str(sidecar.image), cpu_request=sidecar.cpu_request,
                                        memory_request=sidecar.memory_request, memory_limit=sidecar.memory_limit,
                                        trust=trust)
        problems += tr.port_problems(sidecar.port, "spec.sidecar.port", trust)
    problems += tr.port_problems(sampling.sidecar_port, "spec.sampling.sidecarPort", None)
    if sidecar.inject and sidecar.port != sampling.sidecar_port:
        problems.append("spec.sidecar.port and spec.sampling.sidecarPort must agree when the sidecar is injected")

    pdb = Pdb(enabled=bool(pdb_raw.get("enabled", False)),
              max_unavailable=int(_num(pdb_raw, "maxUnavailable", "spec.rotation.podDisruptionBudget", 1, 100, 1,
                                       problems)))
    timeout = _num({"replacementTimeoutSeconds": replacement_timeout}, "replacementTimeoutSeconds",
                   "spec.rotation", 30, 86400, 900, problems)
    evict_timeout = _num({"evictionTimeoutSeconds": eviction_timeout}, "evictionTimeoutSeconds",
                         "spec.rotation", 30, 86400, 600, problems)
    if problems:
        raise SpecError(problems)
    return GuardSpec(Selection(tuple(names), dict(labels), tuple(groups)), policy, sampling, jemalloc, spilling,
                     sidecar, pdb, float(timeout), float(evict_timeout))
