"""A MemoryGuard's spec, read and validated into typed settings.

``read_guard_spec`` returns a ``GuardSpec`` or raises ``SpecError`` listing
every problem in words a person understands; the handler turns that into a
Degraded condition and a Warning Event and does not retry. What each field
is (type, default, bounds, pattern, rules) is described once, in
``specfields.py`` (the operator's sections) and the core's ``SETTINGS_TABLE``
(the policy's); the CRD is generated from the same tables, so a real API
server refuses most of this at admission, and this reader refuses it again
for servers that did not, plus what a schema cannot say (the installer's
trust limits, rules across the policy and the sampling). Purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
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
    sidecar_port: int = C.SIDECAR_PORT
    timeout_s: float = 5.0


@dataclasses.dataclass(frozen=True)
class Jemalloc:
    mode: Mode = Mode.OFF
    library_path: str = DEFAULT_JEMALLOC_PATH
    malloc_conf: str = DEFAULT_MALLOC_CONF


@dataclasses.dataclass(frozen=True)
class Spilling:
    mode: Mode = Mode.OFF
    threshold_percent: int = 80
    min_spilling_size_bytes: int = 100 * 1024 * 1024
    directories: tuple[str, ...] = ("/tmp/ray-spill",)


@dataclasses.dataclass(frozen=True)
class SidecarInjection:
    inject: bool = False
    image: str = DEFAULT_SIDECAR_IMAGE
    port: int = C.SIDECAR_PORT
    cpu_request: str = "10m"
    memory_request: str = "32Mi"
    memory_limit: str = "64Mi"


@dataclasses.dataclass(frozen=True)
class Pdb:
    enabled: bool = False
    max_unavailable: int = 1


@dataclasses.dataclass(frozen=True)
class Forensics:
    enabled: bool = True
    timeout_s: float = 30.0
    keep: int = 20
    call_sites: Mode = Mode.OFF  # remediation: RAY_record_ref_creation_sites=1


@dataclasses.dataclass(frozen=True)
class ReviewSpec:
    """When a remediation is judged, and whether an ineffective one is undone."""

    after_s: float = 21600.0
    min_pods: int = 2
    revert_ineffective: bool = False


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
    forensics: Forensics = Forensics()
    review: ReviewSpec = ReviewSpec()
    # kuberay.allowRecreate: template changes on an upgradeStrategy Recreate
    # cluster (each one recreates the whole cluster: kuberayrules.py).
    allow_recreate: bool = False


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
    # Everything else: the operator's table.
    v, found = specfields.read(spec, policy)
    problems += found
    sampling = Sampling(interval_s=float(v["sampling.intervalSeconds"]), sidecar_port=int(v["sampling.sidecarPort"]),
                        timeout_s=float(v["sampling.timeoutSeconds"]))
    jemalloc = Jemalloc(mode=Mode(v["remediation.jemalloc.mode"]),
                        library_path=v["remediation.jemalloc.libraryPath"],
                        malloc_conf=v["remediation.jemalloc.mallocConf"])
    if jemalloc.mode != Mode.OFF:
        problems += tr.jemalloc_problems(jemalloc.library_path, trust)
    spilling = Spilling(mode=Mode(v["remediation.spilling.mode"]),
                        threshold_percent=v["remediation.spilling.thresholdPercent"],
                        min_spilling_size_bytes=v["remediation.spilling.minSpillingSizeBytes"],
                        directories=tuple(v["remediation.spilling.directories"]))
    sidecar = SidecarInjection(inject=v["sidecar.inject"], image=v["sidecar.image"] or sidecar_image,
                               port=v["sidecar.port"], cpu_request=v["sidecar.resources.cpuRequest"],
                               memory_request=v["sidecar.resources.memoryRequest"],
                               memory_limit=v["sidecar.resources.memoryLimit"])
    if sidecar.inject:
        problems += tr.sidecar_problems(image=sidecar.image, cpu_request=sidecar.cpu_request,
                                        memory_request=sidecar.memory_request, memory_limit=sidecar.memory_limit,
                                        trust=trust)
        problems += tr.port_problems(sidecar.port, "spec.sidecar.port", trust)
    pdb = Pdb(enabled=v["rotation.podDisruptionBudget.enabled"],
              max_unavailable=v["rotation.podDisruptionBudget.maxUnavailable"])
    if problems:
        raise SpecError(problems)
    selection = Selection(tuple(v["clusterSelector.names"] or ()), dict(v["clusterSelector.matchLabels"] or {}),
                          tuple(v["workerGroups"] or ()))
    forensics = Forensics(enabled=v["forensics.enabled"], timeout_s=float(v["forensics.timeoutSeconds"]),
                          keep=int(v["forensics.keep"]), call_sites=Mode(v["remediation.callSites.mode"]))
    review = ReviewSpec(after_s=float(v["remediation.review.afterSeconds"]),
                        min_pods=int(v["remediation.review.minPods"]),
                        revert_ineffective=v["remediation.review.revert"] == "ineffective")
    return GuardSpec(selection, policy, sampling, jemalloc, spilling, sidecar, pdb,
                     float(v["rotation.replacementTimeoutSeconds"]), float(v["rotation.evictionTimeoutSeconds"]),
                     forensics, review, bool(v["kuberay.allowRecreate"]))
