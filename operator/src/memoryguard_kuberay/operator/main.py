"""``memoryguard-kuberay operator``: run the kopf operator.

One active replica. ``--leader-elect`` (the chart's default) takes a Lease
first and runs kopf only while holding it (leader.py), so the chart can run
a standby replica that takes over within about 20 s of the active one's
death. kopf's own peering is not leader election (equal priorities all
pause): with ``--leader-elect`` kopf runs standalone, as it does with
``--standalone`` (tests, the demo).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import urllib.parse
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from memoryguard_kuberay.core import helptext


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay operator",
                                description=helptext.summary(__doc__))
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="watch this namespace (repeatable); default: all namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (a single operator, tests, the demo)")
    p.add_argument("--peering", default=os.environ.get("MEMORYGUARD_PEERING", "memoryguard"),
                   help="kopf's peering object, without --standalone or --leader-elect (default memoryguard)")
    p.add_argument("--priority", type=int, default=int(os.environ.get("MEMORYGUARD_PRIORITY", "100")),
                   help="kopf's peering priority (default 100)")
    p.add_argument("--log-level", default=os.environ.get("MEMORYGUARD_LOG_LEVEL", "INFO"),
                   help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    p.add_argument("--leader-elect", action="store_true",
                   default=os.environ.get("MEMORYGUARD_LEADER_ELECTION", "").lower() in ("1", "true", "yes"),
                   help="act only while holding the Lease (one active replica among several)")
    p.add_argument("--lease-namespace", default=os.environ.get("MEMORYGUARD_LEASE_NAMESPACE")
                   or os.environ.get("POD_NAMESPACE") or "default",
                   help="where the Lease is (default: the pod's namespace, else default)")
    p.add_argument("--lease-name", default=os.environ.get("MEMORYGUARD_LEASE_NAME", "memoryguard-operator"),
                   help="the Lease's name (default memoryguard-operator; the chart: the release's name)")
    a = p.parse_args(list(argv))
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import kopf

    from memoryguard_kuberay.operator import config, handlers  # noqa: F401  (registers the handlers)
    from memoryguard_kuberay.operator.kube import NoCredentials, load_credentials

    # One settings object for the process, read and checked before anything
    # starts: a bad variable or no credentials is one line and exit 2.
    try:
        cfg = config.from_env()
        credentials = load_credentials()
    except (config.ConfigError, NoCredentials) as exc:
        print(f"memoryguard-kuberay operator: {exc}", file=sys.stderr)
        return 2

    namespaces: list[str] = list(a.namespace)
    standalone = a.standalone or a.leader_elect
    # Who this replica is, in the Lease and in the memoryguard_leader metric.
    identity = f"{socket.gethostname()}-{os.getpid()}"

    def operator() -> Coroutine[Any, Any, None]:
        return kopf.operator(
            memo=kopf.Memo(cfg=cfg, credentials=credentials, identity=identity),
            standalone=standalone, peering_name=None if standalone else a.peering, priority=a.priority,
            namespaces=namespaces, clusterwide=not namespaces, liveness_endpoint=os.environ.get(
                "MEMORYGUARD_LIVENESS_ENDPOINT") or None)

    try:
        if not a.leader_elect:
            asyncio.run(operator())
            return 0
        return asyncio.run(_while_leading(operator, a.lease_namespace, a.lease_name, identity,
                                          os.environ.get("MEMORYGUARD_LIVENESS_ENDPOINT") or None))
    except KeyboardInterrupt:
        return 130


async def _standby_health(endpoint: str | None) -> asyncio.Server | None:
    """While standing by, the liveness endpoint says so (kopf serves it only
    once it runs): a standby is alive, not stuck. Its readiness (the metrics
    port) stays down, so only the active replica is scraped."""
    if not endpoint:
        return None
    url = urllib.parse.urlsplit(endpoint)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            body = b"standing by for the Lease\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, url.hostname or "0.0.0.0", url.port or 8081)


async def _while_leading(operator: Callable[[], Coroutine[Any, Any, None]], namespace: str, name: str,
                         identity: str, liveness: str | None = None) -> int:
    """Take the Lease, run the operator while holding it; exit 1 the moment
    it is lost (the pod restarts as a standby), give it up on a clean stop."""
    from memoryguard_kuberay.operator.kube import Kube, load_credentials
    from memoryguard_kuberay.operator.leader import LeaderElector, LeaseConfig

    log = logging.getLogger("memoryguard_kuberay.operator.leader")
    kube = Kube(load_credentials(), timeout_s=5.0)
    elector = LeaderElector(kube, LeaseConfig(namespace=namespace, name=name, identity=identity))
    health = await _standby_health(liveness)
    try:
        await elector.acquire()
        if health is not None:
            health.close()
            await health.wait_closed()
            health = None
        log.info("leading as %s (Lease %s/%s)", identity, namespace, name)
        running = asyncio.create_task(operator())
        holding = asyncio.create_task(elector.hold())
        done, _ = await asyncio.wait({running, holding}, return_when=asyncio.FIRST_COMPLETED)
        if holding in done:
            log.error("lost the Lease: stopping now, so that two operators never act at once")
            running.cancel()
            os._exit(1)  # nothing of this process may act after this line
        holding.cancel()
        await elector.release()
        running.result()
        return 0
    finally:
        if health is not None:
            health.close()
        await kube.close()
