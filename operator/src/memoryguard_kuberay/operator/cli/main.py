"""``memoryguard-kuberay operator``: run the kopf operator.

With ``--shards N`` (the chart's default) any number of replicas share the
guards: each acts on the guards of the shards it holds on Leases
(shards.py), and takes a dead replica's within about 20 s. kopf's own
peering is not that (equal priorities all pause): with ``--shards`` kopf
runs standalone in every replica, as it does with ``--standalone`` (one
replica, tests, the demo).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence

from memoryguard_kuberay.core import helptext
from memoryguard_kuberay.operator.config import env
from memoryguard_kuberay.operator.sharding.shards import MAX_SHARDS, ShardConfig


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="memoryguard-kuberay operator",
                                description=helptext.summary(__doc__))
    p.add_argument("--namespace", "-n", action="append", default=[],
                   help="watch this namespace (repeatable); default: all namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (a single operator, tests, the demo)")
    # Each flag's default is its MEMORYGUARD_* variable (config.ENV).
    p.add_argument("--peering", default=env("PEERING"),
                   help="kopf's peering object, without --standalone or --shards (default memoryguard)")
    p.add_argument("--priority", type=int, default=env("PRIORITY"),
                   help="kopf's peering priority (default 100)")
    p.add_argument("--log-level", default=env("LOG_LEVEL"), type=helptext.log_level,
                   help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    # A string default: argparse converts it as it converts the flag, so a bad
    # SHARDS variable is the same one-line usage error, never a traceback.
    p.add_argument("--shards", type=_shard_count, default=env("SHARDS"),
                   help="split the guards into this many shards held on Leases, shared by every replica "
                        "started so (0: act on every guard alone; default 0)")
    p.add_argument("--lease-namespace", default=env("LEASE_NAMESPACE") or os.environ.get("POD_NAMESPACE") or "default",
                   help="where the shards' Leases are (default: the pod's namespace, else default)")
    p.add_argument("--lease-name", default=env("LEASE_NAME"),
                   help="the Leases' base name (default memoryguard-operator; the chart: the release's name)")
    a = p.parse_args(list(argv))
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _without_official_client()
    fixed_mmap_threshold()
    import kopf

    from memoryguard_kuberay.operator import config, handlers  # noqa: F401  (registers the handlers)
    from memoryguard_kuberay.operator.api.credentials import NoCredentials, load_credentials, service_account

    # One settings object for the process, read and checked before anything
    # starts: a bad variable or no credentials is one line and exit 2.
    try:
        cfg = config.from_env()
        credentials = load_credentials()
        if cfg.metrics_port:
            # Said now, once: in kopf's startup a port in use was retried
            # every 60 s for ever, with a traceback each time.
            _can_listen(cfg.metrics_host, cfg.metrics_port)
        if cfg.admission_port:
            _can_listen(cfg.admission_host, cfg.admission_port)
    except (config.ConfigError, NoCredentials) as exc:
        print(f"memoryguard-kuberay operator: {exc}", file=sys.stderr)
        return 2

    if cfg.admission_port:
        from memoryguard_kuberay.operator import webhook

        webhook.register()  # only with a server: kopf refuses admission handlers without one
    _raise_descriptor_limit()
    namespaces: list[str] = list(a.namespace)
    standalone = a.standalone or bool(a.shards)
    # Who this replica is, in its Leases, in the memoryguard_leader metric and
    # to kopf. Given to kopf, never left to it: kopf's own guess
    # (peering.detect_own_id) reads $POD_ID, else getpass.getuser(), which
    # raises KeyError where the image's uid has no passwd entry (the chart's
    # 10001): the released chart's pod crash-looped at start (issue 58).
    identity = f"{socket.gethostname()}-{os.getpid()}"
    # The release's ServiceAccount owns the Leases, so they go with it
    # (helm uninstall, with or without hooks); another credential owns none.
    sa = service_account(credentials.token)
    owner = (sa[1], sa[2]) if sa and sa[0] == a.lease_namespace else None
    sharding = ShardConfig(namespace=a.lease_namespace, base=a.lease_name, identity=identity,
                           shards=a.shards, owner=owner) if a.shards else None
    try:
        asyncio.run(kopf.operator(
            memo=kopf.Memo(cfg=cfg, credentials=credentials, identity=identity, sharding=sharding,
                            watches=len(namespaces) or 1),  # kopf's, of guards (handlers.login)
            identity=identity,  # type: ignore[arg-type]  # kopf.Identity is NewType(str), not exported
            standalone=standalone, peering_name=None if standalone else a.peering, priority=a.priority,
            namespaces=namespaces, clusterwide=not namespaces,
            liveness_endpoint=env("LIVENESS_ENDPOINT") or None))
        return 0
    except KeyboardInterrupt:
        return 130


def _without_official_client() -> None:
    """kopf imports the official client's generated models when it is
    installed, only to recognise them in what handlers return (the
    operator's return none); 29 MiB of resident memory, a seventh of the
    operator's budget (issue 44, 3). Kept out of this process: ``import
    kubernetes`` raises ImportError here, and credentials.py reads the
    credentials without it (its fallback for exec plugins lets it in)."""
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]


M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept


def fixed_mmap_threshold() -> bool:
    """glibc's threshold for giving a block its own mapping, fixed at its
    default. glibc raises it to the size of any mapped block freed, so after
    one 1.2 MB pod's JSON every later one came from the heap, fragmented
    it and stayed: 300 such pods took the operator from 54 to 165 MiB on the
    real server; with the threshold fixed, to 70 MiB (issue 44, 1).
    (``MALLOC_MMAP_THRESHOLD_`` does the same from outside.) False where
    the C library has no mallopt (not glibc): nothing changed."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def _raise_descriptor_limit() -> None:
    """The soft descriptor limit up to the hard one, as Go's runtime does for
    every Kubernetes controller: a connection kept per guarded pod
    (podhttp.Pool) needs thousands, and a soft limit of 1,024 would leave
    the pool nearly empty."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # kept as it is; the pool keeps what the soft limit allows


def _can_listen(host: str, port: int) -> None:
    from memoryguard_kuberay.core.constants import ENV_PREFIX
    from memoryguard_kuberay.operator.config import ConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(f"{ENV_PREFIX}METRICS_PORT={port}: cannot listen on {host}:{port} ({e.strerror}); "
                              "choose another port, or 0 for no metrics") from None


def _shard_count(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw[:40]!r}: not a whole number") from None
    if not 0 <= n <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{n}: must be within [0, {MAX_SHARDS}]")
    return n

