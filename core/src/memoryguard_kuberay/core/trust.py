"""What a MemoryGuard's author may put into other people's pods. Purely
computational.

A guard is a namespaced object: whoever may create one in a namespace
decides what runs in the Ray pods there (an injected container, an
``LD_PRELOAD``, a spilling directory). The operator serves every tenant, so
it holds guards to limits its installer set (``Trust``, from the chart) and
to limits nobody should lift (these tables):

- the sidecar image must be one of the allowed repositories (default: the
  chart's own sidecar image);
- the sidecar's resources must be quantities, request <= limit, within caps;
- its port must not be one Ray or the kubelet listens on, and (when the
  chart's NetworkPolicy protects the sidecars) must be the port that policy
  covers;
- ``LD_PRELOAD`` may name only an allowed jemalloc library;
- spilling directories: absolute, no ``..``, no system directory.

The reserved ports and system directories are rules of the spec's table
(``specfields.py``: CEL in the CRD, so a real API server refuses such a
guard at admission, and the same check in the reader); the allow-lists are
the operator's, so only it can check them (``guardspec.py`` calls these).
"""

from __future__ import annotations

import dataclasses
import re

# Ports a sidecar must never take in a Ray pod: Ray's own (KubeRay's
# defaults) and the kubelet's. Port -> who listens there.
RESERVED_PORTS: dict[int, str] = {
    6379: "Ray GCS", 8265: "Ray dashboard", 10001: "Ray client server", 8080: "Ray metrics export (KubeRay)",
    8000: "Ray Serve", 52365: "Ray dashboard agent", 44217: "Ray autoscaler metrics",
    44227: "Ray dashboard metrics", 10250: "kubelet", 10255: "kubelet (read-only)", 10256: "kube-proxy health",
}
# Spilling there would write into (or over) the system: refused.
# /var/lib holds the container runtime's and the kubelet's state (docker,
# containerd, kubelet), /var/log the node's logs: a hostPath spill there
# fills or overwrites the node's own files.
SYSTEM_DIRS = ("etc", "dev", "proc", "sys", "bin", "sbin", "usr", "lib", "lib32", "lib64", "boot", "root", "run",
               "var/run", "var/lib", "var/log", "var/cache", "var/spool", "var/lock", "dev/shm")
SYSTEM_DIR_REGEX = "^/(" + "|".join(re.escape(d) for d in SYSTEM_DIRS) + ")(/|$)|^/+$"
PARENT_REGEX = r"(^|/)\.\.(/|$)"
DEFAULT_JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2",
)
MAX_SIDECAR_MEMORY_BYTES = 512 * 2**20
MAX_SIDECAR_CPU = 1.0
_UNITS = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


@dataclasses.dataclass(frozen=True)
class Trust:
    """The installer's limits (chart values, through the operator's env)."""

    sidecar_images: tuple[str, ...] = ()  # allowed image repositories (no tag, no digest)
    jemalloc_paths: tuple[str, ...] = DEFAULT_JEMALLOC_PATHS
    policy_port: int | None = None  # the sidecar port the chart's NetworkPolicy covers, if it renders one


def repository(image: str) -> str:
    """``registry/path/name`` of an image reference, without tag or digest."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def quantity(text: str) -> float | None:
    m = _QUANTITY.match(text)
    return float(m.group(1)) * _UNITS[m.group(2) or ""] if m else None


def port_problems(port: int, where: str, trust: Trust | None) -> list[str]:
    """The installer's limit on the sidecar's port (the reserved ports are
    a rule of the spec's table, specfields.py)."""
    out = []
    if trust is not None and trust.policy_port is not None and port != trust.policy_port:
        out.append(f"{where}: port {port} is not the port the chart's NetworkPolicy protects "
                   f"({trust.policy_port}); use it, or install the chart with sidecar.sidecarPort={port}")
    return out


def sidecar_problems(*, image: str, cpu_request: str, memory_request: str, memory_limit: str,
                     trust: Trust | None) -> list[str]:
    out = []
    if trust is not None and trust.sidecar_images and repository(image) not in trust.sidecar_images:
        out.append(f"spec.sidecar.image {image!r} is not from an allowed repository "
                   f"({', '.join(trust.sidecar_images)}; the chart's sidecar.allowedImages)")
    cpu, req, lim = quantity(cpu_request), quantity(memory_request), quantity(memory_limit)
    if cpu is not None and cpu > MAX_SIDECAR_CPU:
        out.append(f"spec.sidecar.resources.cpuRequest {cpu_request} is above {MAX_SIDECAR_CPU:g} CPU")
    if lim is not None and lim > MAX_SIDECAR_MEMORY_BYTES:
        out.append(f"spec.sidecar.resources.memoryLimit {memory_limit} is above 512Mi")
    if req is not None and lim is not None and req > lim:
        out.append(f"spec.sidecar.resources.memoryRequest {memory_request} is above its limit {memory_limit}")
    return out


def jemalloc_problems(path: str, trust: Trust | None) -> list[str]:
    if trust is not None and path not in trust.jemalloc_paths:
        return [f"spec.remediation.jemalloc.libraryPath {path!r} is not an allowed jemalloc library "
                f"({', '.join(trust.jemalloc_paths)}; the chart's remediation.jemallocPaths)"]
    return []
