"""A MemoryGuard's spec, read and validated into typed settings.

``read_guard_spec`` returns a ``GuardSpec`` or raises ``SpecError`` listing
every problem in words a person understands; the handler turns that into a
Degraded condition and a Warning Event and does not retry. What each field
is (type, default, bounds, pattern, rules) is described once, in
``specfields.py`` (the operator's sections, which the typed sections here are
built from, defaults included) and the core's ``POLICY_FIELDS`` (the
policy's); the CRD is generated from the same tables, so a real API
server refuses most of this at admission, and this reader refuses it again
for servers that did not, plus what a schema cannot say (the installer's
trust limits, rules across the policy and the sampling). Purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from memoryguard_kuberay.core import specfields
from memoryguard_kuberay.core import trust as tr
from memoryguard_kuberay.core.settings import PolicySettings, SettingsError
from memoryguard_kuberay.core.specfields import (  # re-exported: the names callers know
    DEFAULT_JEMALLOC_PATH,
    DEFAULT_MALLOC_CONF,
    DEFAULT_SIDECAR_IMAGE,
    Mode,
)

__all__ = ["DEFAULT_JEMALLOC_PATH", "DEFAULT_MALLOC_CONF", "DEFAULT_SIDECAR_IMAGE", "GuardSpec", "Mode", "SpecError",
           "read_guard_spec"]


T = TypeVar("T")


class SpecError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _spec(path: str, held: Callable[[Any], Any] = lambda v: v) -> Any:
    """A typed section's attribute that holds the spec field at ``path``:
    its default is the table's (``specfields.FIELDS``), as ``held`` holds it,
    and ``_section`` fills it from what was read. Nothing here repeats a
    default or a name of the table."""
    meta = {"path": path, "held": held}
    default = held(specfields.default(path))
    if isinstance(default, dict):  # a dataclass takes a mutable default only from a factory
        return dataclasses.field(default_factory=lambda: held(specfields.default(path)), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _section(cls: type[T], values: Mapping[str, Any], **given: Any) -> T:
    """``cls`` built from the values read (by dotted path), plus ``given``."""
    return cls(**{f.name: f.metadata["held"](values[f.metadata["path"]])
                  for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                  if "path" in f.metadata and f.name not in given}, **given)


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v or ())


@dataclasses.dataclass(frozen=True)
class Selection:
    cluster_names: tuple[str, ...] = _spec("clusterSelector.names", _tuple)
    cluster_labels: Mapping[str, str] = _spec("clusterSelector.matchLabels", lambda v: dict(v or {}))
    worker_groups: tuple[str, ...] = _spec("workerGroups", _tuple)  # empty: every group


@dataclasses.dataclass(frozen=True)
class Sampling:
    interval_s: float = _spec("sampling.intervalSeconds", float)
    sidecar_port: int = _spec("sampling.sidecarPort", int)
    timeout_s: float = _spec("sampling.timeoutSeconds", float)


@dataclasses.dataclass(frozen=True)
class Jemalloc:
    mode: Mode = _spec("remediation.jemalloc.mode", Mode)  # noqa: RUF009 (a field; Mode is immutable)
    library_path: str = _spec("remediation.jemalloc.libraryPath")
    malloc_conf: str = _spec("remediation.jemalloc.mallocConf")


@dataclasses.dataclass(frozen=True)
class Spilling:
    mode: Mode = _spec("remediation.spilling.mode", Mode)  # noqa: RUF009 (a field; Mode is immutable)
    threshold_percent: int = _spec("remediation.spilling.thresholdPercent")
    min_spilling_size_bytes: int = _spec("remediation.spilling.minSpillingSizeBytes")
    directories: tuple[str, ...] = _spec("remediation.spilling.directories", _tuple)


@dataclasses.dataclass(frozen=True)
class SidecarInjection:
    inject: bool = _spec("sidecar.inject")
    # The table has no default image: the chart's own (read_guard_spec's
    # sidecar_image) is the default; this one is the offline tools'.
    image: str = DEFAULT_SIDECAR_IMAGE
    port: int = _spec("sidecar.port")
    cpu_request: str = _spec("sidecar.resources.cpuRequest")
    memory_request: str = _spec("sidecar.resources.memoryRequest")
    memory_limit: str = _spec("sidecar.resources.memoryLimit")


@dataclasses.dataclass(frozen=True)
class Pdb:
    enabled: bool = _spec("rotation.podDisruptionBudget.enabled")
    max_unavailable: int = _spec("rotation.podDisruptionBudget.maxUnavailable")


@dataclasses.dataclass(frozen=True)
class Forensics:
    enabled: bool = _spec("forensics.enabled")
    timeout_s: float = _spec("forensics.timeoutSeconds", float)
    keep: int = _spec("forensics.keep", int)
    # remediation: RAY_record_ref_creation_sites=1
    call_sites: Mode = _spec("remediation.callSites.mode", Mode)  # noqa: RUF009 (a field; Mode is immutable)


@dataclasses.dataclass(frozen=True)
class ReviewSpec:
    """When a remediation is judged, and whether an ineffective one is undone."""

    after_s: float = _spec("remediation.review.afterSeconds", float)
    min_pods: int = _spec("remediation.review.minPods", int)
    revert_ineffective: bool = _spec("remediation.review.revert", lambda v: v == "ineffective")


@dataclasses.dataclass(frozen=True)
class GuardSpec:
    selection: Selection
    policy: PolicySettings
    sampling: Sampling
    jemalloc: Jemalloc
    spilling: Spilling
    sidecar: SidecarInjection
    pdb: Pdb
    replacement_timeout_s: float = _spec("rotation.replacementTimeoutSeconds", float)
    eviction_timeout_s: float = _spec("rotation.evictionTimeoutSeconds", float)
    forensics: Forensics = Forensics()
    review: ReviewSpec = ReviewSpec()
    # kuberay.allowRecreate: template changes on an upgradeStrategy Recreate
    # cluster (each one recreates the whole cluster: kuberayrules.py).
    allow_recreate: bool = _spec("kuberay.allowRecreate", bool)


def read_guard_spec(spec: Mapping[str, Any] | None, *, sidecar_image: str = DEFAULT_SIDECAR_IMAGE,
                    trust: tr.Trust | None = None) -> GuardSpec:
    """``sidecar_image``: the image to inject when the spec names none (the
    chart passes the one it was installed with). ``trust``: the installer's
    limits on what a guard may put into pods (see trust.py); None where no
    operator acts on the spec (offline tools)."""
    spec = spec or {}
    problems: list[str] = []
    try:
        # Policy, rotation budgets, includeHead and dryRun: the core's table.
        policy = PolicySettings.from_spec(specfields.policy_part(spec))
    except SettingsError as e:
        problems.extend(e.problems)
        policy = PolicySettings()
    # Everything else: the operator's table, into its typed sections.
    v, found = specfields.read(spec, policy)
    problems += found
    jemalloc = _section(Jemalloc, v)
    if jemalloc.mode != Mode.OFF:
        problems += tr.jemalloc_problems(jemalloc.library_path, trust)
    sidecar = _section(SidecarInjection, v, image=v["sidecar.image"] or sidecar_image)
    if sidecar.inject:
        problems += tr.sidecar_problems(image=sidecar.image, cpu_request=sidecar.cpu_request,
                                        memory_request=sidecar.memory_request, memory_limit=sidecar.memory_limit,
                                        trust=trust)
        problems += tr.port_problems(sidecar.port, "spec.sidecar.port", trust)
    if problems:
        raise SpecError(problems)
    return _section(GuardSpec, v, selection=_section(Selection, v), policy=policy, sampling=_section(Sampling, v),
                    jemalloc=jemalloc, spilling=_section(Spilling, v), sidecar=sidecar, pdb=_section(Pdb, v),
                    forensics=_section(Forensics, v), review=_section(ReviewSpec, v))
