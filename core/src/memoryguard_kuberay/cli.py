"""The ``memoryguard-kuberay`` command: one entry point, one subcommand per job.

Subcommands import what they need when they run, so the sidecar image (which
has no kopf, kubernetes or ray) can run ``memoryguard-kuberay sidecar``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from memoryguard_kuberay.core import helptext


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay", description=helptext.summary(__doc__))
    p.add_argument("--version", action="version", version=f"memoryguard-kuberay {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of the commands below; COMMAND --help says more")

    s = sub.add_parser("simulate", help="replay memory traces through the policy, offline")
    s.add_argument("traces", nargs="*", metavar="TRACE.csv",
                   help="trace files or directories (default: the project's example traces)")
    s.add_argument("--guard", metavar="FILE.yaml", help="a MemoryGuard manifest whose spec sets the policy")
    s.add_argument("--json", action="store_true", help="print one JSON document")
    s.add_argument("--plot", metavar="OUT.png", help="draw each trace with the trend and the decisions")
    s.add_argument("--heatmap", metavar="OUT.png", help="draw the traces (rows) over time, coloured by the "
                                                        "projected time to OOM")
    s.add_argument("--step-effects", metavar="FILE.yaml",
                   help="what the ladder's reclaim and shed would free, per trace (its name, or *): a share 0-1 "
                        "of the memory in use it gained since its first sample, e.g. {'*': {reclaim: 0.9}}")
    s.add_argument("--before", nargs="+", metavar="TRACE.csv",
                   help="with --after: traces of a group's pods before a remediation; prints the review the "
                        "operator would give it (effective, no effect, worse)")
    s.add_argument("--after", nargs="+", metavar="TRACE.csv", help="with --before: traces of its pods on the "
                                                                    "remediated template")

    b = sub.add_parser("bench", help="score the policy and a static baseline on labelled traces")
    b.add_argument("directory", nargs="?", metavar="DIR",
                   help="traces and labels.json (default: the project's example traces, examples/traces)")
    b.add_argument("--labels", metavar="labels.json", help="what really happened to each trace "
                                                          "(default: DIR/labels.json)")
    b.add_argument("--guard", metavar="FILE.yaml", help="a MemoryGuard manifest whose spec sets the policy "
                                                        "(default: the policy's defaults)")
    b.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    b.add_argument("--no-cost", action="store_true", help="skip the policy cost measurement")
    b.add_argument("--safety-seconds", type=float, default=600.0,
                   help="a leak counts as caught this long before its OOM at least (default 600: time to drain)")

    g = sub.add_parser("gen-traces", help="write synthetic traces and labels.json")
    g.add_argument("out_dir", metavar="DIR", help="where to write the traces and labels.json (made if missing)")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--random", type=_positive_int, metavar="N",
                       help="N pods (1 or more) from wide random ranges (default: the examples)")
    which.add_argument("--field", type=_positive_int, metavar="N",
                       help="N pods of each of the shapes real nodes produce (issue 39), each a leak and its "
                            "healthy twin: a full store with no spill figure, a serving pod's day, memory.high, "
                            "no memory limit")
    g.add_argument("--seed", type=int, default=7, help="random seed (default 7: the examples)")

    # Listed for --help; their own parsers take their arguments (see main).
    sub.add_parser("sidecar", help="run the sidecar (reads the Ray container's memory, serves samples)")
    sub.add_parser("record", help="record a sidecar's samples into a trace CSV")
    sub.add_parser("operator", help="run the operator")
    sub.add_parser("uninstall", help="delete every MemoryGuard and wait for the operator to clean up (helm hook)")
    sub.add_parser("forensics", help="print the evidence kept before a pod was rotated ([-n NS] POD, or --guard G)")
    sub.add_parser("top", help="a live view of a cluster's guarded pods, nearest harm first ([-n NS]..., --once)")
    sub.add_parser("demo", help="the whole system on an emulated cluster, accelerated (the [demo] extra)")
    return p


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("memoryguard-kuberay-core")
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"


# Subcommands with parsers of their own: everything after the name is theirs.
PASSTHROUGH = ("sidecar", "record", "operator", "uninstall", "forensics", "top", "demo")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASSTHROUGH:
        return _passthrough(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    from memoryguard_kuberay.core import commands

    try:
        if args.command == "simulate":
            if args.before or args.after:
                if not (args.before and args.after) or args.traces or args.plot or args.heatmap:
                    raise commands.UsageError("simulate: --before and --after go together, without other traces, "
                                              "--plot or --heatmap")
                return commands.compare(args.before, args.after, guard=args.guard, as_json=args.json)
            return commands.simulate(args.traces, guard=args.guard, as_json=args.json, plot=args.plot,
                                     heatmap=args.heatmap, step_effects=args.step_effects)
        if args.command == "bench":
            return _bench(args)
        if args.command == "gen-traces":
            return commands.gen_traces(args.out_dir, random_n=args.random, field_n=args.field, seed=args.seed)
    except commands.UsageError as exc:
        print(f"memoryguard-kuberay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _passthrough(command: str, rest: list[str]) -> int:
    try:
        if command == "sidecar":
            from memoryguard_kuberay.sidecar import main as sidecar_main

            return sidecar_main.main(rest)
        if command == "record":
            from memoryguard_kuberay.sidecar import record

            return record.main(rest)
        if command == "demo":
            return _demo(rest)
        if command == "uninstall":
            from memoryguard_kuberay.operator.cli import uninstall

            return uninstall.main(rest)
        if command == "forensics":
            from memoryguard_kuberay.operator.forensics import cli as forensics_cli

            return forensics_cli.main(rest)
        if command == "top":
            from memoryguard_kuberay.operator.cli import top

            return top.main(rest)
        from memoryguard_kuberay.operator.cli import main as operator_main

        return operator_main.main(rest)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        # Only the core is installed: say which extra brings the command.
        if not (exc.name or "").startswith(("memoryguard_kuberay.", "kopf", "kubernetes", "aiohttp", "psutil",
                                            "prometheus_client", "ray", "rich")):
            raise
        extra = {"sidecar": "sidecar", "record": "sidecar", "demo": "demo"}.get(command, "operator")
        print(f"memoryguard-kuberay {command} needs the [{extra}] extra: pip install 'memoryguard-kuberay[{extra}]' "
              f"({exc.name} is not installed)", file=sys.stderr)
        return 2


def _demo(rest: list[str]) -> int:
    """The demo drives the devkit (an emulated API and a KubeRay stand-in),
    which comes with the ``[demo]`` extra."""
    try:
        from memoryguard_kuberay.devkit import demo
    except ImportError as exc:
        print(f"memoryguard-kuberay demo needs the devkit: pip install 'memoryguard-kuberay[demo]' ({exc})",
              file=sys.stderr)
        return 2
    return int(demo.main(rest))


def _bench(args: argparse.Namespace) -> int:
    from memoryguard_kuberay import policy_cost
    from memoryguard_kuberay.core import commands

    directory = args.directory or str(commands.examples_dir())
    result = commands.bench(directory, labels_path=args.labels, guard=args.guard, as_json=args.json,
                            safety_s=args.safety_seconds)
    if not args.no_cost:
        cost = policy_cost.measure(commands.load_traces([directory], unreadable={}),
                                   commands.load_guard_settings(args.guard))
        result["cost"] = cost
        if not args.json:
            print(f"policy cost: {cost['samples']} samples in {cost['cpu_s']} s CPU: "
                  f"{cost['samples_per_s']} samples/s, {cost['us_per_sample']} us/sample")
    if args.json:
        print(json.dumps(result, indent=1))
    return 1 if result.get("unreadable") else 0  # the others scored, each bad file said
