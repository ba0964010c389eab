"""Operator settings from ``MEMORYGUARD_*`` environment variables (the chart
sets them), each with its unit. Per-guard settings live in the MemoryGuard
spec, not here."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import trust as tr
from memoryguard_kuberay.operator.guardspec import DEFAULT_SIDECAR_IMAGE


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080  # 0: no metrics server
    api_timeout_s: float = 30.0
    watch_timeout_s: int = 300  # server-side watch timeout; kopf re-watches
    drain: bool = True  # drain Ray nodes through the GCS before evicting
    drain_rpc_timeout_s: float = 15.0  # wait this long for the GCS to answer a drain, then evict anyway
    time_scale: float = 1.0  # demo and tests only: the operator clock runs this much faster
    epoch: float | None = None  # ... from this unix time
    sidecar_image: str = DEFAULT_SIDECAR_IMAGE  # injected when a guard names no image
    # What guards may put into pods (trust.py): allowed sidecar image
    # repositories (default: sidecar_image's), jemalloc libraries, and the
    # sidecar port the chart's NetworkPolicy covers (None: no policy).
    trust: tr.Trust = dataclasses.field(default_factory=tr.Trust)
    max_guards_per_namespace: int = 50  # newer guards beyond it are refused (guardroster.py)
    per_pod_metrics: bool = False  # a series per pod besides the per-group ones (metrics.py)


class ConfigError(ValueError):
    """A MEMORYGUARD_* variable the operator cannot use; the message names it."""


FLAG_VALUES = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Read and check every variable at once, at start: a bad one is a
    ConfigError naming it (the process exits saying so, and a pod
    crash-loops visibly instead of retrying forever)."""
    e = os.environ if env is None else env

    def get(name: str, default: str) -> str:
        return e.get(C.ENV_PREFIX + name, default)

    def number(name: str, default: str, kind: type, lo: float, hi: float) -> Any:
        raw = get(name, default)
        try:
            value = kind(raw)
        except ValueError:
            what = "whole number" if kind is int else "number"
            raise ConfigError(f"MEMORYGUARD_{name}={raw[:40]!r}: not a {what}") from None
        if not lo <= value <= hi:
            raise ConfigError(f"MEMORYGUARD_{name}={raw[:40]!r}: must be within [{lo:g}, {hi:g}]")
        return value

    def flag(name: str, default: str) -> bool:
        raw = get(name, default).strip().lower()
        if raw not in FLAG_VALUES:
            raise ConfigError(f"MEMORYGUARD_{name}={raw[:40]!r}: must be true or false (or 1/0, yes/no)")
        return FLAG_VALUES[raw]

    epoch = get("EPOCH", "")
    image = get("SIDECAR_IMAGE", DEFAULT_SIDECAR_IMAGE)
    images = tuple(x.strip() for x in get("SIDECAR_IMAGE_ALLOWLIST", "").split(",") if x.strip())
    paths = tuple(x.strip() for x in get("JEMALLOC_PATHS", "").split(",") if x.strip())
    policy_port = get("POLICY_SIDECAR_PORT", "")
    trust = tr.Trust(sidecar_images=images or (tr.repository(image),),
                     jemalloc_paths=paths or tr.DEFAULT_JEMALLOC_PATHS,
                     policy_port=number("POLICY_SIDECAR_PORT", policy_port, int, 1, 65535) if policy_port else None)
    return OperatorConfig(
        metrics_host=get("METRICS_HOST", "0.0.0.0"),
        metrics_port=number("METRICS_PORT", "8080", int, 0, 65535),
        api_timeout_s=number("API_TIMEOUT_SECONDS", "30", float, 0.1, 3600),
        watch_timeout_s=number("WATCH_TIMEOUT_SECONDS", "300", int, 1, 86400),
        drain=flag("DRAIN", "true"),
        drain_rpc_timeout_s=number("DRAIN_RPC_TIMEOUT_SECONDS", "15", float, 0.1, 3600),
        time_scale=number("TIME_SCALE", "1", float, 0.001, 1e6),
        epoch=number("EPOCH", epoch, float, 0, 1e11) if epoch else None,
        sidecar_image=image,
        trust=trust,
        max_guards_per_namespace=number("MAX_GUARDS_PER_NAMESPACE", "50", int, 1, 10000),
        per_pod_metrics=flag("POD_METRICS", "false"),
    )
