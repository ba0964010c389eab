"""``memoryguard-kuberay top [-n NS]...``: a live view of a real cluster's
guarded pods, nearest harm first (topview.py), read from the MemoryGuards'
status with the caller's own credentials (kubeconfig or in-cluster): listing
MemoryGuards is all it needs. Refreshed every ``--interval`` seconds until
Ctrl-C; ``--once`` prints one screen and exits (scripts, CI); ``--save``
writes that screen as a terminal capture too (.svg, .html or .txt);
``--heatmap`` draws, when it stops, every worker group over the time it
watched, coloured by the nearest projected OOM (``--for`` stops it)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from rich.console import Console
from rich.live import Live

from memoryguard_kuberay.core import commands, heatmap, helptext
from memoryguard_kuberay.operator.api.credentials import NoCredentials, load_credentials
from memoryguard_kuberay.operator.api.errors import ApiError
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.cli import topview


async def read_guards(kube: Kube, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    if not namespaces:
        return await kube.list_all_guards()
    found: list[dict[str, Any]] = []
    for ns in namespaces:
        found += await kube.list_guards(ns)
    return found


def _title(namespaces: Sequence[str], server: str) -> str:
    where = ", ".join(namespaces) if namespaces else "all namespaces"
    return f"MemoryGuard top: {where} on {server}, {time.strftime('%H:%M:%S')} (nearest harm first)"


def main(argv: Sequence[str], out: IO[str] = sys.stdout) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay top", description=helptext.summary(__doc__))
    p.add_argument("-n", "--namespace", action="append", default=[],
                   help="a namespace to show (repeatable; default: every namespace you may list MemoryGuards in)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes (default 5)")
    p.add_argument("--once", action="store_true", help="print one screen and exit")
    p.add_argument("--limit", type=int, default=40, help="pods shown at most (default 40)")
    p.add_argument("--save", metavar="FILE", help="with --once: also write the screen to FILE (.svg, .html, .txt)")
    p.add_argument("--heatmap", metavar="FILE.png", help="when it stops (Ctrl-C or --for), draw each worker group "
                                                         "over the time watched, by projected time to OOM")
    p.add_argument("--for", dest="for_s", type=float, metavar="SECONDS", help="stop after this long (default: at "
                                                                            "Ctrl-C)")
    a = p.parse_args(list(argv))
    if a.interval <= 0 or a.limit < 1 or (a.for_s is not None and a.for_s <= 0):
        p.error("--interval and --for must be above 0 and --limit at least 1")
    if a.heatmap:
        try:
            commands.check_picture(a.heatmap)
        except commands.UsageError as e:
            p.error(f"--heatmap {e}")
    if a.save and not a.once:
        p.error("--save needs --once")
    if a.save and not a.save.endswith((".svg", ".html", ".txt")):
        p.error(f"--save {a.save}: name a .svg, .html or .txt file")
    try:
        credentials = load_credentials()
    except NoCredentials as e:
        print(f"memoryguard-kuberay top: {e}", file=sys.stderr)
        return 2
    console = Console(file=out, record=bool(a.save), width=None if out.isatty() else _piped_width())
    history: dict[str, list[tuple[float, float | None]]] = {}
    try:
        return asyncio.run(_run(a, credentials, console, history))
    except KeyboardInterrupt:
        return 0
    finally:
        if a.heatmap and history:
            heatmap.draw(history, a.heatmap, title="worker groups by projected time to OOM (memoryguard-kuberay "
                                                   "top)", time_unit_s=60.0, time_label="minutes watched")
            print(f"heat map written to {a.heatmap}", file=sys.stderr)


def _piped_width() -> int:
    """Piped, the width COLUMNS says (as a terminal would), else 160."""
    raw = os.environ.get("COLUMNS", "")
    return max(40, min(int(raw), 1000)) if raw.isdigit() else 160


def _record(history: dict[str, list[tuple[float, float | None]]], guards: Sequence[dict[str, Any]]) -> None:
    now = time.time()
    for row, eta in topview.group_risk(guards).items():
        history.setdefault(row, []).append((now, eta))


async def _run(a: argparse.Namespace, credentials: Any, console: Console,
               history: dict[str, list[tuple[float, float | None]]]) -> int:
    kube = Kube(credentials, timeout_s=30.0)
    stop_at = None if a.for_s is None else time.monotonic() + a.for_s
    try:
        if a.once:
            try:
                guards = await read_guards(kube, a.namespace)
            except (ApiError, OSError) as e:
                print(f"memoryguard-kuberay top: {e}", file=sys.stderr)
                return 1
            _record(history, guards)
            console.print(topview.screen(guards, title=_title(a.namespace, credentials.server), limit=a.limit,
                                         now=time.time()))
            if a.save:
                if a.save.endswith(".svg"):
                    console.save_svg(a.save, title="memoryguard-kuberay top")
                elif a.save.endswith(".html"):
                    console.save_html(a.save)
                else:
                    console.save_text(a.save)
            return 0
        last: list[dict[str, Any]] = []  # shown again, said so, while the API does not answer
        with Live(console=console, auto_refresh=False, screen=console.is_terminal) as live:
            while stop_at is None or time.monotonic() < stop_at:
                note = ""
                try:
                    last = await read_guards(kube, a.namespace)
                    _record(history, last)
                except (ApiError, OSError) as e:
                    note = f"could not read the guards: {e}; showing the last answer, trying again"
                live.update(topview.screen(last, title=_title(a.namespace, credentials.server), note=note,
                                           limit=a.limit, now=time.time()), refresh=True)
                await asyncio.sleep(a.interval if stop_at is None else max(0.0, min(a.interval,
                                                                                     stop_at - time.monotonic())))
        return 0
    finally:
        await kube.close()
