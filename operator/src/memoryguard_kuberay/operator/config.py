"""Operator settings from ``MEMORYGUARD_*`` environment variables (the chart
sets them), each with its unit. Per-guard settings live in the MemoryGuard
spec, not here.

``ENV`` is the one table of them: ``OperatorConfig`` takes its defaults from
it, ``from_env`` reads the variables by it, the ``operator`` command's flags
take their defaults from it (``env``), and docs/operations.md's table is
generated from it (``python -m memoryguard_kuberay.operator.config``)."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import trust as tr
from memoryguard_kuberay.operator.guardspec import DEFAULT_SIDECAR_IMAGE


class Kind(str, enum.Enum):
    TEXT = "text"
    INT = "int"
    NUMBER = "number"
    FLAG = "flag"  # true/false, 1/0, yes/no
    LIST = "list"  # comma-separated


@dataclasses.dataclass(frozen=True)
class EnvSetting:
    name: str  # after MEMORYGUARD_
    kind: Kind
    default: str  # as the variable is written; "": unset
    meaning: str  # the docs' words
    low: float = 0
    high: float = 0
    shown: str = ""  # the docs' default, where the written one says nothing ("" unset)
    # OperatorConfig's field ("trust.<field>": its Trust's); "": the default of
    # an ``operator`` command flag, which main.py's argparse reads and checks.
    attr: str = ""


ENV: tuple[EnvSetting, ...] = (
    EnvSetting("METRICS_PORT", Kind.INT, "8080", "Prometheus metrics; port 0 serves none", 0, 65535,
               attr="metrics_port"),
    EnvSetting("METRICS_HOST", Kind.TEXT, "0.0.0.0", "the address the metrics are served on", attr="metrics_host"),
    EnvSetting("SIDECAR_IMAGE", Kind.TEXT, DEFAULT_SIDECAR_IMAGE, "injected when a guard names no image",
               shown="the release's sidecar image", attr="sidecar_image"),
    EnvSetting("SIDECAR_IMAGE_ALLOWLIST", Kind.LIST, "", "comma-separated image repositories a guard may name in "
               "`spec.sidecar.image` (chart: `sidecar.allowedImages`)", shown="the sidecar image's repository",
               attr="trust.sidecar_images"),
    EnvSetting("JEMALLOC_PATHS", Kind.LIST, "", "comma-separated libraries a guard may `LD_PRELOAD` (chart: "
               "`remediation.jemallocPaths`)", shown="the usual jemalloc paths", attr="trust.jemalloc_paths"),
    EnvSetting("POLICY_SIDECAR_PORT", Kind.INT, "", "the sidecar port the chart's NetworkPolicy covers; guards "
               "injecting a sidecar on another port are refused (set by the chart when it renders the policy)",
               1, 65535, attr="trust.policy_port"),
    EnvSetting("ADMISSION_PORT", Kind.INT, "0", "the pod admission webhook's HTTPS port, which injects the sidecar "
               "into every Ray pod a guard selects as it is created (chart: `admission.enabled`, port 9443); 0: no "
               "webhook, the sidecar goes into the RayClusters' pod templates instead", 0, 65535,
               attr="admission_port"),
    EnvSetting("ADMISSION_HOST", Kind.TEXT, "0.0.0.0", "the address the webhook is served on",
               attr="admission_host"),
    EnvSetting("ADMISSION_CERT_DIR", Kind.TEXT, "/etc/memoryguard/admission", "the webhook's `tls.crt` and "
               "`tls.key` (the chart mounts its Secret here), reread when they change", attr="admission_cert_dir"),
    EnvSetting("ADMISSION_INSECURE", Kind.FLAG, "false", "tests only: serve the webhook over plain HTTP (no API "
               "server calls one so)", attr="admission_insecure"),
    EnvSetting("DRAIN", Kind.FLAG, "true", "drain Ray nodes through the GCS before evicting (chart: "
               "`drain.enabled`)", attr="drain"),
    EnvSetting("DRAIN_RPC_TIMEOUT_SECONDS", Kind.NUMBER, "15", "how long a drain waits for the GCS before the pod "
               "is evicted undrained (chart: `drain.rpcTimeoutSeconds`)", 0.1, 3600, attr="drain_rpc_timeout_s"),
    EnvSetting("LOG_LEVEL", Kind.TEXT, "INFO", "DEBUG, INFO, WARNING or ERROR (chart: `logLevel`)"),
    EnvSetting("LIVENESS_ENDPOINT", Kind.TEXT, "", "kopf's liveness probe endpoint (the chart sets "
               "`http://0.0.0.0:8081/healthz`)"),
    EnvSetting("API_TIMEOUT_SECONDS", Kind.NUMBER, "30", "each Kubernetes API call", 0.1, 3600,
               attr="api_timeout_s"),
    EnvSetting("WATCH_TIMEOUT_SECONDS", Kind.INT, "300", "server-side watch timeout (kopf's watches and the pod "
               "cache's re-watch after it)", 1, 86400, attr="watch_timeout_s"),
    EnvSetting("MAX_GUARDS_PER_NAMESPACE", Kind.INT, "50", "a namespace's MemoryGuards beyond this many (its "
               "newest) are refused with `TooManyGuards` in their status (chart value `guardsPerNamespace`)",
               1, 10000, attr="max_guards_per_namespace"),
    EnvSetting("SHARDS", Kind.INT, "0", "`--shards N`: split the guards into N shards held on Leases, shared by "
               "every replica started so (the chart: `shards`, 8); 0 acts on every guard alone"),
    EnvSetting("POD_METRICS", Kind.FLAG, "false", "a `memoryguard_pod_*` series per guarded pod besides the "
               "per-group ones (the chart: `metrics.perPod`)", attr="per_pod_metrics"),
    EnvSetting("LEASE_NAMESPACE", Kind.TEXT, "", "where the shards' Leases are (the chart: the release's "
               "namespace, from the downward API)", shown="`POD_NAMESPACE`, else default"),
    EnvSetting("LEASE_NAME", Kind.TEXT, "memoryguard-operator", "the shards' Leases' base name (the chart: the "
               "release's name, so two releases in one namespace each have their own)"),
    EnvSetting("PEERING", Kind.TEXT, "memoryguard", "kopf's peering object, when run with neither `--standalone` "
               "nor `--shards` (the chart uses the Leases)"),
    EnvSetting("PRIORITY", Kind.INT, "100", "kopf's peering priority (with the peering object above)"),
    EnvSetting("TIME_SCALE", Kind.NUMBER, "1", "tests and the demo only: the operator's clock runs this much "
               "faster", 0.001, 1e6, attr="time_scale"),
    EnvSetting("EPOCH", Kind.NUMBER, "", "tests and the demo only: the operator's clock starts at this unix time",
               0, 1e11, shown="now", attr="epoch"),
    EnvSetting("CLOCK_FILE", Kind.TEXT, "", "the demo only: the clock is the time in this file, which the demo's "
               "world moves on when the operator has caught up (then `TIME_SCALE` is the fastest it may run)",
               attr="clock_file"),
    EnvSetting("CLOCK_WAKE_FILE", Kind.TEXT, "", "the demo only, with `CLOCK_FILE`: where the operator says it is "
               "busy, or until when it is idle", attr="clock_wake_file"),
)
_BY_NAME = {s.name: s for s in ENV}


class ConfigError(ValueError):
    """A MEMORYGUARD_* variable the operator cannot use; the message names it."""


FLAG_VALUES = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def env(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable ``MEMORYGUARD_<name>`` as written, or the table's default."""
    e = os.environ if environ is None else environ
    return e.get(C.ENV_PREFIX + name, _BY_NAME[name].default)


def parse(s: EnvSetting, raw: str) -> Any:
    """``raw`` read as ``s`` says (None where unset and without a default);
    a ConfigError naming the variable and what it takes."""
    where = f"{C.ENV_PREFIX}{s.name}={raw[:40]!r}"
    if s.kind is Kind.TEXT:
        return raw
    if s.kind is Kind.LIST:
        return tuple(x.strip() for x in raw.split(",") if x.strip())
    if s.kind is Kind.FLAG:
        flag = raw.strip().lower()
        if flag not in FLAG_VALUES:
            raise ConfigError(f"{C.ENV_PREFIX}{s.name}={flag[:40]!r}: must be true or false (or 1/0, yes/no)")
        return FLAG_VALUES[flag]
    if raw == "":
        return None
    try:
        value = int(raw) if s.kind is Kind.INT else float(raw)
    except ValueError:
        raise ConfigError(f"{where}: not a {'whole number' if s.kind is Kind.INT else 'number'}") from None
    if not s.low <= value <= s.high:
        raise ConfigError(f"{where}: must be within [{s.low:g}, {s.high:g}]")
    return value


def _default(name: str) -> Any:
    s = _BY_NAME[name]
    return parse(s, s.default)


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    metrics_host: str = _default("METRICS_HOST")
    metrics_port: int = _default("METRICS_PORT")  # 0: no metrics server
    api_timeout_s: float = _default("API_TIMEOUT_SECONDS")
    watch_timeout_s: int = _default("WATCH_TIMEOUT_SECONDS")  # server-side watch timeout; kopf re-watches
    drain: bool = _default("DRAIN")  # drain Ray nodes through the GCS before evicting
    drain_rpc_timeout_s: float = _default("DRAIN_RPC_TIMEOUT_SECONDS")  # then evict anyway
    time_scale: float = _default("TIME_SCALE")  # demo and tests only: the operator clock runs this much faster
    epoch: float | None = _default("EPOCH")  # ... from this unix time
    clock_file: str = _default("CLOCK_FILE")  # demo only: the time is this file's (core/sharedclock.py)
    clock_wake_file: str = _default("CLOCK_WAKE_FILE")  # ... and the operator says here when it is idle
    sidecar_image: str = _default("SIDECAR_IMAGE")  # injected when a guard names no image
    # What guards may put into pods (trust.py): allowed sidecar image
    # repositories (default: sidecar_image's), jemalloc libraries, and the
    # sidecar port the chart's NetworkPolicy covers (None: no policy).
    trust: tr.Trust = dataclasses.field(default_factory=tr.Trust)
    max_guards_per_namespace: int = _default("MAX_GUARDS_PER_NAMESPACE")  # newer ones are refused (guardroster.py)
    per_pod_metrics: bool = _default("POD_METRICS")  # a series per pod besides the per-group ones (metrics.py)
    admission_port: int = _default("ADMISSION_PORT")  # 0: no webhook, the sidecar by template patches
    admission_host: str = _default("ADMISSION_HOST")
    admission_cert_dir: str = _default("ADMISSION_CERT_DIR")
    admission_insecure: bool = _default("ADMISSION_INSECURE")


def from_env(environ: Mapping[str, str] | None = None) -> OperatorConfig:
    """Read and check every variable at once, at start: a bad one is a
    ConfigError naming it (the process exits saying so, and a pod
    crash-loops visibly instead of retrying forever)."""
    read = {s.attr: parse(s, env(s.name, environ)) for s in ENV if s.attr}
    trust = tr.Trust(sidecar_images=read.pop("trust.sidecar_images") or (tr.repository(read["sidecar_image"]),),
                     jemalloc_paths=read.pop("trust.jemalloc_paths") or tr.DEFAULT_JEMALLOC_PATHS,
                     policy_port=read.pop("trust.policy_port"))
    return OperatorConfig(trust=trust, **read)


def docs_table() -> str:
    """docs/operations.md's table of the variables."""
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `{C.ENV_PREFIX}{s.name}` | {s.shown or s.default or 'unset'} | {s.meaning} |" for s in ENV]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(docs_table())
