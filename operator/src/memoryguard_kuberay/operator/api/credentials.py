"""How the operator reaches the Kubernetes API: the in-cluster service
account, else a kubeconfig, read by the official client's loader."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os


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
    """In-cluster service account, else $KUBECONFIG / ~/.kube/config, read
    by the official client's loader (which knows every auth plugin)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise NoCredentials(f"no Kubernetes credentials: not in a pod, and {where}: "
                                f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
    c = client.Configuration.get_default_copy()
    token = (c.api_key or {}).get("authorization") or (c.api_key or {}).get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token[7:]
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
