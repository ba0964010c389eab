"""How the operator reaches the Kubernetes API: the in-cluster service
account, else a kubeconfig.

Both are read here, without the official client: importing it (``kubernetes``,
its 700 generated model classes) costs the operator about 29 MiB of its
resident memory, a seventh of its budget (issue 44, 3), and nothing else in
the operator uses it. What this reader does not know (an ``exec`` or
``auth-provider`` user, a user and password) is handed to the official
client's loader, as before, which knows every plugin: those setups pay the
import. Where both read a kubeconfig they agree (tests/operator/test_credentials.py).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A user's fields this reader does not know: the official client reads them.
PLUGIN_FIELDS = ("exec", "auth-provider", "username", "password")


@dataclasses.dataclass(frozen=True)
class Credentials:
    server: str
    token: str | None = None
    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    verify: bool = True


class NoCredentials(RuntimeError):
    """Neither in a pod nor a usable kubeconfig; the message says which file."""


def load_credentials() -> Credentials:
    """In-cluster service account, else $KUBECONFIG / ~/.kube/config."""
    found = in_cluster()
    if found is not None:
        return found
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p] or ["~/.kube/config"]
    where = os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        merged = _merge([Path(p).expanduser() for p in paths])
        return from_kubeconfig(merged)
    except _Plugin:
        return _official_loader(where)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise NoCredentials(f"no Kubernetes credentials: not in a pod, and {where}: "
                            f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None


def in_cluster(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> Credentials | None:
    """The pod's service account (what client-go's rest.InClusterConfig reads), or None outside a pod."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    token_file = sa_dir / "token"
    if not host or not port or not token_file.is_file():
        return None
    host = f"[{host}]" if ":" in host else host
    ca = sa_dir / "ca.crt"
    return Credentials(server=f"https://{host}:{port}", token=token_file.read_text().strip(),
                       ca_path=str(ca) if ca.is_file() else None)


class _Plugin(Exception):
    """The kubeconfig's user needs what only the official client reads."""


def _merge(paths: list[Path]) -> dict[str, Any]:
    """The kubeconfigs merged as kubectl merges them: the first file to name
    a cluster, user or context, or to set the current context, wins.
    Relative file names are taken from the file that holds them."""
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": None}
    read = 0
    for path in paths:
        if not path.is_file() and len(paths) > 1:
            continue  # kubectl skips a missing file of a list
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: not a kubeconfig")
        read += 1
        merged["current-context"] = merged["current-context"] or doc.get("current-context")
        for kind, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(kind) or []:
                if isinstance(entry, dict) and entry.get("name") not in merged[kind]:
                    merged[kind][entry.get("name")] = (dict(entry.get(key) or {}), path.parent)
    if not read:
        raise ValueError("no kubeconfig file")
    return merged


def from_kubeconfig(merged: dict[str, Any]) -> Credentials:
    name = merged["current-context"]
    if not name or name not in merged["contexts"]:
        raise ValueError(f"current-context {name!r} not found in the kubeconfig")
    context, _ = merged["contexts"][name]
    if context.get("cluster") not in merged["clusters"]:
        raise ValueError(f"cluster {context.get('cluster')!r} of context {name!r} not found in the kubeconfig")
    cluster, cdir = merged["clusters"][context["cluster"]]
    user, udir = merged["users"].get(context.get("user"), ({}, cdir))
    if any(user.get(k) for k in PLUGIN_FIELDS):
        raise _Plugin
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (udir / user["tokenFile"]).read_text().strip()
    server = str(cluster["server"])
    return Credentials(server=server, token=token or None,
                       ca_path=_file(cluster, "certificate-authority", cdir),
                       cert_path=_file(user, "client-certificate", udir),
                       key_path=_file(user, "client-key", udir),
                       verify=not cluster.get("insecure-skip-tls-verify", False))


def _file(entry: dict[str, Any], key: str, base: Path) -> str | None:
    """A PEM the kubeconfig names (``key``, relative to its own file) or holds
    (``key-data``, base64): ssl reads files, so what it holds is written to
    a private file, as the official client does, removed at exit."""
    data = entry.get(f"{key}-data")
    if data:
        return _private_file(base64.b64decode(data, validate=False))
    if entry.get(key):
        return str(base / str(entry[key]))
    return None


_private_dir: str | None = None


def _private_file(content: bytes) -> str:
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="memoryguard-creds-")  # mode 0700
        atexit.register(shutil.rmtree, _private_dir, True)
    path = os.path.join(_private_dir, hashlib.sha256(content).hexdigest()[:16])
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
    return path


def _official_loader(where: str) -> Credentials:
    """The official client's kubeconfig loader, for the users this reader
    does not know (an exec plugin: EKS, GKE)."""
    import sys

    if "kubernetes" in sys.modules and sys.modules["kubernetes"] is None:
        del sys.modules["kubernetes"]  # kept out of the operator until now (cli/main.py)
    from kubernetes import client, config

    try:
        # The file named now: the loader's default is $KUBECONFIG as it was when it was imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise NoCredentials(f"no Kubernetes credentials: not in a pod, and {where}: "
                            f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
    c = client.Configuration.get_default_copy()
    header = c.get_api_key_with_prefix("BearerToken") or c.get_api_key_with_prefix("authorization")
    token = header.split(" ", 1)[-1] if header else None
    return Credentials(server=c.host, token=token, ca_path=c.ssl_ca_cert, cert_path=c.cert_file,
                       key_path=c.key_file, verify=bool(c.verify_ssl))


def service_account(token: str | None) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of the ServiceAccount a token was issued for,
    from its claims: a bound token's ``kubernetes.io`` claim, or a legacy
    secret token's ``kubernetes.io/serviceaccount/...`` ones. Not verified
    (the API server verifies the token on every request): only read to name
    the owner of what the operator creates, so that it goes when the
    release's ServiceAccount goes. None for any other credential."""
    parts = (token or "").split(".")
    if len(parts) != 3 or len(parts[1]) > 16384:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict):
        return None
    bound = claims.get("kubernetes.io")
    found: tuple[object, ...]
    if isinstance(bound, dict) and isinstance(bound.get("serviceaccount"), dict):
        sa = bound["serviceaccount"]
        found = (bound.get("namespace"), sa.get("name"), sa.get("uid"))
    else:
        found = tuple(claims.get(f"kubernetes.io/serviceaccount/{k}")
                      for k in ("namespace", "service-account.name", "service-account.uid"))
    if all(isinstance(x, str) and x for x in found):
        return (str(found[0]), str(found[1]), str(found[2]))
    return None
