"""``memoryguard-kuberay forensics [-n NS] POD`` (or ``--guard G``): print the
evidence the operator kept before rotating a pod, readably.

Reads the ConfigMaps the operator wrote (label ``memoryguard.io/artifact=
forensics``) with the caller's own credentials (kubeconfig or in-cluster):
listing ConfigMaps in the namespace is all it needs. ``--json`` prints the
artifact as stored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from memoryguard_kuberay.core.units import fmt_bytes
from memoryguard_kuberay.operator import forensics as fx
from memoryguard_kuberay.operator.kube import ApiError, Kube, NoCredentials, load_credentials


def render(doc: Mapping[str, Any], *, configmap: str, out: IO[str]) -> None:
    w = out.write
    w(f"Evidence kept before rotating {doc.get('pod')} (namespace {doc.get('namespace')}, guard {doc.get('guard')}, "
      f"RayCluster {doc.get('cluster')}, group {doc.get('group')})\n")
    w(f"  collected {doc.get('collectedAt')} in {doc.get('tookSeconds')} s; kept in ConfigMap {configmap}\n")
    d = doc.get("decision") or {}
    w(f"  decision: {d.get('reason')}: {d.get('message')}\n")
    m = doc.get("memory")
    if m:
        w(f"  memory: in use {fmt_bytes(m.get('inUseBytes'))} of {fmt_bytes(m.get('memoryMaxBytes'))} (anon "
          f"{fmt_bytes(m.get('anonBytes'))}, shmem {fmt_bytes(m.get('shmemBytes'))}; page cache "
          f"{fmt_bytes(m.get('fileBytes'))}); object store {fmt_bytes(m.get('plasmaUsedBytes'))} of "
          f"{fmt_bytes(m.get('plasmaCapacityBytes'))}, spilled {fmt_bytes(m.get('plasmaSpilledBytes'))}\n")
    procs = doc.get("processes") or {}
    rows = procs.get("processes") or []
    if rows:
        w(f"  processes by unique memory (top {len(rows)} of {procs.get('total')}):\n")
        w(f"    {'PID':>7}  {'USS':>10}  {'PSS':>10}  {'RSS':>10}  COMMAND\n")
        for r in rows:
            w(f"    {r.get('pid') or '?':>7}  {fmt_bytes(r.get('ussBytes')):>10}  {fmt_bytes(r.get('pssBytes')):>10}  "
              f"{fmt_bytes(r.get('rssBytes')):>10}  {r.get('cmdline') or r.get('name')}\n")
    objects = doc.get("rayObjects") or {}
    sites = objects.get("callSites") or []
    if objects:
        w(f"  Ray objects on the node: {objects.get('objects')} ({fmt_bytes(objects.get('bytes'))}) from "
          f"{objects.get('callSitesTotal')} call site(s){', list cut short' if objects.get('truncated') else ''}:\n")
        w(f"    {'COUNT':>7}  {'BYTES':>10}  CALL SITE\n")
        for c in sites:
            w(f"    {c.get('count'):>7}  {fmt_bytes(c.get('bytes')):>10}  {c.get('callSite')}\n")
    for part, why in (doc.get("skipped") or {}).items():
        w(f"  {part}: skipped ({why})\n")


async def find(kube: Kube, namespace: str, *, pod: str | None, guard: str | None) -> list[tuple[str, dict[str, Any]]]:
    """(ConfigMap name, artifact), newest first."""
    selector = f"{fx.LABEL_KIND}={fx.KIND}"
    if pod:
        selector += f",{fx.LABEL_POD}={pod[:63]}"
    if guard:
        selector += f",{fx.LABEL_GUARD}={guard}"
    items = await kube.list_configmaps(namespace, selector)
    items.sort(key=lambda c: (str(c["metadata"].get("creationTimestamp", "")), c["metadata"]["name"]), reverse=True)
    out = []
    for c in items:
        try:
            doc = json.loads((c.get("data") or {}).get(fx.DATA_KEY, ""))
        except ValueError:
            continue
        if isinstance(doc, dict) and (not pod or doc.get("pod") == pod):
            out.append((str(c["metadata"]["name"]), doc))
    return out


def main(argv: Sequence[str], out: IO[str] = sys.stdout) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay forensics",
                                description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("pod", nargs="?", help="the rotated pod (its latest evidence)")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("--guard", help="every artifact this guard kept, newest first")
    p.add_argument("--json", action="store_true", help="the artifact(s) as stored")
    a = p.parse_args(list(argv))
    if not a.pod and not a.guard:
        p.error("name a POD or --guard")

    async def run() -> list[tuple[str, dict[str, Any]]]:
        kube = Kube(load_credentials(), timeout_s=30.0)
        try:
            return await find(kube, a.namespace, pod=a.pod, guard=a.guard)
        finally:
            await kube.close()

    try:
        found = asyncio.run(run())
    except NoCredentials as e:
        print(f"memoryguard-kuberay forensics: {e}", file=sys.stderr)
        return 2
    except (ApiError, OSError) as e:
        print(f"memoryguard-kuberay forensics: {e}", file=sys.stderr)
        return 1
    if not found:
        what = f"pod {a.pod}" if a.pod else f"guard {a.guard}"
        print(f"memoryguard-kuberay forensics: no evidence kept for {what} in namespace {a.namespace}",
              file=sys.stderr)
        return 1
    shown = found[:1] if a.pod else found
    if a.json:
        json.dump([doc for _, doc in shown] if a.guard else shown[0][1], out, indent=1)
        out.write("\n")
        return 0
    for i, (name, doc) in enumerate(shown):
        if i:
            out.write("\n")
        render(doc, configmap=name, out=out)
    return 0
