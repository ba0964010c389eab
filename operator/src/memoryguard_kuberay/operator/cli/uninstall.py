"""``memoryguard-kuberay uninstall``: delete every MemoryGuard this release guards
and wait until they are gone. The chart runs it as a ``pre-delete`` hook,
while the operator still runs, so each guard's finalizer takes its rotation
marks off the pods, its sidecar out of the RayCluster templates and its
PodDisruptionBudgets away. Without it, ``helm uninstall`` removes the
operator, keeps the CRD (helm never deletes a chart's ``crds/``) and leaves
every guard stuck on a finalizer nobody will remove.

Exit 0 when every guard is gone; 1 (naming the guards left) when the wait
runs out, so helm reports the hook as failed and the operator stays for a
second try. Uses only ``API_USE_UNINSTALL`` (list and delete MemoryGuards).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence

from memoryguard_kuberay.core import helptext
from memoryguard_kuberay.operator.api.credentials import NoCredentials
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube, with_kube

log = logging.getLogger("memoryguard.uninstall")


async def delete_guards(kube: Kube, namespaces: Sequence[str], *, timeout_s: float, poll_s: float = 1.0,
                        dry_run: bool = False) -> list[str]:
    """Delete the guards of ``namespaces`` (all, when empty) and wait for
    them to go; returns the ones still there at the deadline. ``dry_run``:
    only list them (returned), delete nothing."""

    async def listed() -> list[tuple[str, str]]:
        items = []
        scopes: list[str | None] = list(namespaces) or [None]  # None: every namespace
        for ns in scopes:
            found = await kube.list_guards(ns) if ns else await kube.list_all_guards()
            items += [(g["metadata"]["namespace"], g["metadata"]["name"]) for g in found]
        return sorted(items)

    guards = await listed()
    if dry_run:
        return [f"{ns}/{name}" for ns, name in guards]
    for ns, name in guards:
        await kube.delete_guard(ns, name)
        log.info("deleted MemoryGuard %s/%s; waiting for its finalizer", ns, name)
    deadline = time.monotonic() + timeout_s
    left = guards
    while left and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        left = await listed()
    return [f"{ns}/{name}" for ns, name in left]


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay uninstall",
                                description=helptext.summary(__doc__))
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="only the guards of this namespace (repeatable); default: every namespace")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the guards to go (default 300)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the guards it would delete (with their kept evidence and what they injected) and "
                        "delete nothing")
    a = p.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")

    try:
        left = with_kube(lambda kube: delete_guards(kube, a.namespace, timeout_s=a.timeout, dry_run=a.dry_run))
    except NoCredentials as e:
        print(f"memoryguard-kuberay uninstall: {e}", file=sys.stderr)
        return 2
    except ApiError as e:
        print(f"memoryguard-kuberay uninstall: {e}", file=sys.stderr)
        return 1
    if a.dry_run:
        scope = ", ".join(a.namespace) or "every namespace"
        print(f"memoryguard-kuberay uninstall: dry run: would delete {len(left)} MemoryGuard(s) in {scope}"
              + (": " + ", ".join(left) if left else ""), file=sys.stderr)
        return 0
    if left:
        print(f"memoryguard-kuberay uninstall: still there after {a.timeout:.0f} s (is the operator running?): "
              f"{', '.join(left)}", file=sys.stderr)
        return 1
    print("memoryguard-kuberay uninstall: every MemoryGuard is gone", file=sys.stderr)
    return 0
