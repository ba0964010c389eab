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

Deleting a guard deletes the evidence it kept before its rotations (its
ConfigMaps are owned by it): that is said before each deletion, with how
to keep them (issue 61, 7: an uninstall run to investigate a leak lost it
without a word). ``--dry-run`` prints, on standard output, each guard, its
kept evidence and what it applied to the RayClusters.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.core import helptext
from memoryguard_kuberay.operator.api.credentials import NoCredentials
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube, with_kube
from memoryguard_kuberay.operator.forensics.collect import KIND as EVIDENCE

log = logging.getLogger("memoryguard.uninstall")


def goes_with(guard: Mapping[str, Any], evidence: Sequence[str] | None = None) -> list[str]:
    """What deleting ``guard`` takes with it or takes back, in words:
    ``evidence`` the names of its kept ConfigMaps where they could be
    listed, else what its status says of the latest."""
    meta, status = guard.get("metadata") or {}, guard.get("status") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    latest = (status.get("forensics") or {}).get("latest") if isinstance(status.get("forensics"), Mapping) else None
    kept = list(evidence) if evidence is not None else [str(latest)] if latest else []
    out = []
    if kept:
        out.append(f"{ns}/{name}: its kept evidence goes with it (owned by the guard): {', '.join(kept[:20])}"
                   + ("" if evidence is not None else " (the latest)") + f"; to keep it first: kubectl get "
                   f"configmap -n {ns} -l {C.LABEL_GUARD}={name},{C.LABEL_ARTIFACT}={EVIDENCE} -o yaml > evidence.yaml")
    applied = sorted(k for k in (status.get("remediations") or {}) if isinstance(k, str))
    if applied:
        out.append(f"{ns}/{name}: its finalizer takes back what it applied: {', '.join(applied[:20])}")
    return out


async def _evidence(kube: Kube, guard: Mapping[str, Any]) -> list[str] | None:
    """The names of the guard's kept ConfigMaps (their metadata only);
    None where they cannot be listed (the chart's hook may not)."""
    meta = guard.get("metadata") or {}
    names: list[str] = []
    selector = f"{C.LABEL_GUARD}={meta.get('name', '')},{C.LABEL_ARTIFACT}={EVIDENCE}"
    try:
        async for page, _ in kube.configmap_metadata(str(meta.get("namespace", "")), selector):
            names += [str((c.get("metadata") or {}).get("name", "")) for c in page if isinstance(c, Mapping)]
    except ApiError:
        return None
    return sorted(names)


async def delete_guards(kube: Kube, namespaces: Sequence[str], *, timeout_s: float, poll_s: float = 1.0,
                        dry_run: bool = False, said: list[str] | None = None) -> list[str]:
    """Delete the guards of ``namespaces`` (all, when empty) and wait for
    them to go; returns the ones still there at the deadline. ``dry_run``:
    only list them (returned), delete nothing. ``said``: what goes with
    each guard (goes_with) is added to it."""

    async def listed() -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = []
        scopes: list[str | None] = list(namespaces) or [None]  # None: every namespace
        for ns in scopes:
            items += await kube.list_guards(ns) if ns else await kube.list_all_guards()
        return sorted(items, key=_key)

    guards = await listed()
    for g in guards:
        lines = goes_with(g, await _evidence(kube, g) if dry_run else None)
        if said is not None:
            said += lines
        if not dry_run:
            for line in lines:
                log.warning("%s", line)
            ns, name = _key(g)
            await kube.delete_guard(ns, name)
            log.info("deleted MemoryGuard %s/%s; waiting for its finalizer", ns, name)
    if dry_run:
        return ["/".join(_key(g)) for g in guards]
    deadline = time.monotonic() + timeout_s
    left = guards
    while left and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        left = await listed()
    return ["/".join(_key(g)) for g in left]


def _key(guard: Mapping[str, Any]) -> tuple[str, str]:
    meta = guard.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


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

    said: list[str] = []
    try:
        left = with_kube(lambda kube: delete_guards(kube, a.namespace, timeout_s=a.timeout, dry_run=a.dry_run,
                                                    said=said))
    except NoCredentials as e:
        print(f"memoryguard-kuberay uninstall: {e}", file=sys.stderr)
        return 2
    except ApiError as e:
        print(f"memoryguard-kuberay uninstall: {e}", file=sys.stderr)
        return 1
    if a.dry_run:
        scope = ", ".join(a.namespace) or "every namespace"
        # What was asked for, on standard output (it went to stderr, issue 61, 7).
        print(f"memoryguard-kuberay uninstall: dry run: would delete {len(left)} MemoryGuard(s) in {scope}"
              + (": " + ", ".join(left) if left else ""))
        for line in said:
            print(f"  {line}")
        return 0
    if left:
        print(f"memoryguard-kuberay uninstall: still there after {a.timeout:.0f} s (is the operator running?): "
              f"{', '.join(left)}", file=sys.stderr)
        return 1
    print("memoryguard-kuberay uninstall: every MemoryGuard is gone", file=sys.stderr)
    return 0
