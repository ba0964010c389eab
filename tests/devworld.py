"""The devkit's emulated world as the tests use it: with KubeRay's own
RayCluster CRD, so its schema is enforced as on a real server. KubeRay's
files come from KubeRay's repository and are not copied into this project:
they are read from ``../shared/kuberay`` beside the checkout, and when that
is absent the tests say so (a warning) and run with a schema-less
RayCluster kind."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from memoryguard_kuberay.devkit.emulator import world as devkit_world

ROOT = Path(__file__).resolve().parents[1]
KUBERAY = ROOT.parent / "shared" / "kuberay"
EXAMPLES = ROOT / "examples" / "traces"


def kuberay_file(name: str) -> Path | None:
    p = KUBERAY / name
    if p.exists():
        return p
    warnings.warn(f"{p} is absent (KubeRay's files are read from beside the checkout, never copied into it): "
                  "the emulated API runs without KubeRay's schema", stacklevel=2)
    return None


@contextlib.asynccontextmanager
async def world(workdir: Path, trace_for: Callable[[dict[str, Any]], Any], **kw: Any) -> AsyncIterator[Any]:
    async with devkit_world.world(workdir, trace_for, kuberay_crd=kuberay_file("ray.io_rayclusters.yaml"),
                                  **kw) as w:
        yield w
