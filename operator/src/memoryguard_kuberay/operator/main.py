"""``memoryguard-kuberay operator``: run the kopf operator.

One active replica: kopf's peering pauses lower-priority operators, and equal
priorities all freeze, so the chart runs one replica with a priority (and
``Recreate`` updates). ``--standalone`` skips peering (tests, the demo).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay operator",
                                description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="watch this namespace (repeatable); default: all namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (a single operator, tests, the demo)")
    p.add_argument("--peering", default=os.environ.get("MEMORYGUARD_PEERING", "memoryguard"))
    p.add_argument("--priority", type=int, default=int(os.environ.get("MEMORYGUARD_PRIORITY", "100")))
    p.add_argument("--log-level", default=os.environ.get("MEMORYGUARD_LOG_LEVEL", "INFO"))
    a = p.parse_args(list(argv))
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import kopf

    from memoryguard_kuberay.operator import handlers  # noqa: F401  (registers the handlers)

    namespaces: list[str] = list(a.namespace)
    try:
        asyncio.run(kopf.operator(
            standalone=a.standalone, peering_name=None if a.standalone else a.peering, priority=a.priority,
            namespaces=namespaces, clusterwide=not namespaces, liveness_endpoint=os.environ.get(
                "MEMORYGUARD_LIVENESS_ENDPOINT") or None))
    except KeyboardInterrupt:
        return 130
    return 0
