"""The devkit's emulated world as the tests use it: with KubeRay's own
RayCluster CRD, so its schema is enforced as on a real server. KubeRay's
files come from KubeRay's repository and are not copied into this project:
they are read from ``../shared/kuberay`` beside the checkout, and when that
is absent the tests say so (a warning) and run with a schema-less
RayCluster kind."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from memoryguard_kuberay.devkit.emulator import world as devkit_world
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer

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


@contextlib.contextmanager
def served_in_a_thread(api: EmulatedApi, beside: Callable[[asyncio.Event], Awaitable[None]] | None = None
                       ) -> Iterator[str]:
    """The emulated API served on loopback from a thread of its own (for
    tests that speak to it over HTTP, as to a real server); yields its URL.
    ``beside``: a coroutine run in that loop too (a controller), told to
    stop by its event before the server goes."""
    ready, stop = threading.Event(), threading.Event()
    box: dict[str, str] = {}

    async def main() -> None:
        quit = asyncio.Event()
        async with api, EmulatorServer(api, host="127.0.0.1") as server:
            box["url"] = f"http://127.0.0.1:{server.port}"
            task = asyncio.create_task(beside(quit)) if beside is not None else None
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            quit.set()
            if task is not None:
                await task

    t = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    t.start()
    assert ready.wait(30), "the emulated API did not start"
    try:
        yield box["url"]
    finally:
        stop.set()
        t.join(15)


@contextlib.asynccontextmanager
async def world(workdir: Path, trace_for: Callable[[dict[str, Any]], Any], **kw: Any) -> AsyncIterator[Any]:
    async with devkit_world.world(workdir, trace_for, kuberay_crd=kuberay_file("ray.io_rayclusters.yaml"),
                                  **kw) as w:
        yield w
