"""``memoryguard-kuberay forensics [-n NS] POD`` (or ``--guard G``): print the
evidence the operator kept before rotating a pod, readably.

Reads the ConfigMaps the operator wrote (label ``memoryguard.io/artifact=
forensics``) with the caller's own credentials (kubeconfig or in-cluster):
listing ConfigMaps in the namespace is all it needs. ``--json`` prints the
artifact as stored. ``--diff`` prints what grew between two artifacts
(forensics_diff.py): the two newest of ``--guard`` (of one group), or two
named ones (ConfigMap names, or files saved with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from memoryguard_kuberay.core import helptext
from memoryguard_kuberay.core.units import fmt_bytes
from memoryguard_kuberay.operator.api.credentials import NoCredentials
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube, with_kube
from memoryguard_kuberay.operator.forensics import collect as fx
from memoryguard_kuberay.operator.forensics import diff as forensics_diff


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


def newest_first(configmaps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kept artifacts, the newest first (by creation, then name: one
    second's artifacts keep the order their names were made in)."""
    return sorted(configmaps, key=lambda c: (str(c["metadata"].get("creationTimestamp", "")),
                                             c["metadata"]["name"]), reverse=True)


async def find(kube: Kube, namespace: str, *, pod: str | None, guard: str | None) -> list[tuple[str, dict[str, Any]]]:
    """(ConfigMap name, artifact), newest first."""
    selector = f"{fx.LABEL_KIND}={fx.KIND}"
    if pod:
        selector += f",{fx.LABEL_POD}={pod[:63]}"
    if guard:
        selector += f",{fx.LABEL_GUARD}={guard}"
    out = []
    for c in newest_first(await kube.list_configmaps(namespace, selector)):
        try:
            doc = json.loads((c.get("data") or {}).get(fx.DATA_KEY, ""))
        except ValueError:
            continue
        if isinstance(doc, dict) and (not pod or doc.get("pod") == pod):
            out.append((str(c["metadata"]["name"]), doc))
    return out


def main(argv: Sequence[str], out: IO[str] = sys.stdout) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay forensics",
                                description=helptext.summary(__doc__))
    p.add_argument("pod", nargs="?", help="the rotated pod (its latest evidence)")
    p.add_argument("-n", "--namespace", default="default", help="where the pod and its guard are (default default)")
    p.add_argument("--guard", help="every artifact this guard kept, newest first")
    p.add_argument("--json", action="store_true", help="the artifact(s) as stored")
    p.add_argument("--diff", nargs="*", metavar="ARTIFACT",
                   help="what grew: between the two newest artifacts of --guard (of one group: --group), or "
                        "between two named ones, older first (ConfigMap names in -n, or files saved with --json)")
    p.add_argument("--group", help="with --diff --guard: the worker group (default: the newest artifact's)")
    a = p.parse_args(list(argv))
    if a.diff is not None:
        return _diff_main(p, a, out)
    if not a.pod and not a.guard:
        p.error("name a POD or --guard")

    try:
        found = with_kube(lambda kube: find(kube, a.namespace, pod=a.pod, guard=a.guard))
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


def _load_named(name: str, kube_found: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """A file saved with --json, else a ConfigMap of the listing."""
    if os.path.exists(name):
        with open(name, encoding="utf-8") as f:
            doc = json.load(f)
        return doc[0] if isinstance(doc, list) and doc else doc if isinstance(doc, dict) else None
    return kube_found.get(name)


def _diff_main(p: argparse.ArgumentParser, a: argparse.Namespace, out: IO[str]) -> int:
    if len(a.diff) not in (0, 2) or (not a.diff and not a.guard):
        p.error("--diff takes two artifacts (older first), or none with --guard")
    need_api = not a.diff or not all(os.path.exists(n) for n in a.diff)
    found: list[tuple[str, dict[str, Any]]] = []
    if need_api:
        try:
            found = with_kube(lambda kube: find(kube, a.namespace, pod=None, guard=a.guard))
        except NoCredentials as e:
            print(f"memoryguard-kuberay forensics: {e}", file=sys.stderr)
            return 2
        except (ApiError, OSError) as e:
            print(f"memoryguard-kuberay forensics: {e}", file=sys.stderr)
            return 1
    if a.diff:
        by_name = dict(found)
        try:
            docs = [_load_named(n, by_name) for n in a.diff]
        except (OSError, ValueError) as e:
            print(f"memoryguard-kuberay forensics: {e}", file=sys.stderr)
            return 1
        missing = [n for n, d in zip(a.diff, docs) if d is None]
        if missing:
            print(f"memoryguard-kuberay forensics: no artifact {', '.join(missing)} (a file, or a ConfigMap of "
                  f"namespace {a.namespace})", file=sys.stderr)
            return 1
        names = list(a.diff)
    else:
        group = a.group or (found[0][1].get("group") if found else None)
        pair = [(n, d) for n, d in found if d.get("group") == group][:2]
        if len(pair) < 2:
            print(f"memoryguard-kuberay forensics: guard {a.guard} kept {len(pair)} artifact(s) of group {group} "
                  f"in namespace {a.namespace}; --diff needs two", file=sys.stderr)
            return 1
        (new_name, new), (old_name, old) = pair  # found is newest first
        docs, names = [old, new], [old_name, new_name]
    forensics_diff.render(forensics_diff.diff(docs[0], docs[1]), out, names=names)  # type: ignore[arg-type]
    return 0
