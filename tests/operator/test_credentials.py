"""The operator's credentials: how it reads a kubeconfig and the pod's
service account (as the official client's loader does: a row against
both), kopf's session made from them, and whose token it runs with (the
release's ServiceAccount, read from the token's claims, owns the Leases the
operator creates, so they go with the release: shards.py, leader.py)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from memoryguard_kuberay.operator.api import credentials
from memoryguard_kuberay.operator.api.credentials import Credentials, service_account


def _jwt(claims: Any) -> str:
    def part(doc: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_a_bound_token_names_its_service_account() -> None:
    # As `kubectl create token` and a projected volume issue them.
    token = _jwt({"aud": ["https://kubernetes.default.svc"], "sub": "system:serviceaccount:mg-system:mg",
                  "kubernetes.io": {"namespace": "mg-system", "serviceaccount": {"name": "mg", "uid": "u-1"},
                                    "pod": {"name": "mg-abc", "uid": "p-1"}}})
    assert service_account(token) == ("mg-system", "mg", "u-1")


def test_a_legacy_secret_token_names_its_service_account() -> None:
    token = _jwt({"iss": "kubernetes/serviceaccount", "kubernetes.io/serviceaccount/namespace": "ns",
                  "kubernetes.io/serviceaccount/service-account.name": "sa",
                  "kubernetes.io/serviceaccount/service-account.uid": "u-2"})
    assert service_account(token) == ("ns", "sa", "u-2")


@pytest.mark.parametrize("token", [None, "", "not-a-jwt", "a.b.c", _jwt(["a list"]), _jwt({"sub": "someone"}),
                                   _jwt({"kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa"}}}),
                                   "x." + "A" * 20000 + ".y"])
def test_any_other_credential_names_none(token: str | None) -> None:
    assert service_account(token) is None


# The reader of kubeconfigs and of the pod's service account (credentials.py),
# against the official client's loader: a row run against both. The official
# client is what the operator read with until it was kept out of the process
# for its memory (cli/main.py); where both read a file they must agree.

def _yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _config(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns"}}]}


def _seen(c: Credentials) -> tuple[Any, ...]:
    """What a connection is made of: the files' contents, wherever each reader put them."""
    def read(p: str | None) -> bytes | None:
        return Path(p).read_bytes() if p else None

    return (c.server.rstrip("/"), c.token, read(c.ca_path), read(c.cert_path), read(c.key_path), c.verify)


def _both(monkeypatch: pytest.MonkeyPatch, kubeconfig: str) -> tuple[Credentials, Credentials]:
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return credentials.load_credentials(), credentials._official_loader(kubeconfig)


CA, CERT, KEY = b"-----BEGIN CERTIFICATE-----\nca\n", b"-----BEGIN CERTIFICATE-----\nme\n", b"-----BEGIN KEY-----\nk\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("case", ["token and CA data", "files beside the kubeconfig", "client cert data, insecure",
                                  "token file", "http, no TLS"])
def test_a_kubeconfig_is_read_as_the_official_client_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               case: str) -> None:
    (tmp_path / "pki").mkdir()
    for name, data in (("ca.crt", CA), ("me.crt", CERT), ("me.key", KEY)):
        (tmp_path / "pki" / name).write_bytes(data)
    # No newline at its end: the official client would send it in the header;
    # client-go trims it, and so does this reader (the next test).
    (tmp_path / "token").write_text("from-a-file")
    cluster, user = {
        "token and CA data": ({"server": "https://127.0.0.1:6443", "certificate-authority-data": _b64(CA)},
                              {"token": "abc.def"}),
        "files beside the kubeconfig": ({"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
                                        {"client-certificate": "pki/me.crt", "client-key": "pki/me.key"}),
        "client cert data, insecure": ({"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
                                       {"client-certificate-data": _b64(CERT), "client-key-data": _b64(KEY)}),
        "token file": ({"server": "https://127.0.0.1:6443", "certificate-authority-data": _b64(CA)},
                       {"tokenFile": str(tmp_path / "token")}),
        "http, no TLS": ({"server": "http://127.0.0.1:8080"}, {"token": "t"}),
    }[case]
    ours, official = _both(monkeypatch, str(_yaml(tmp_path / "config", _config(cluster, user))))
    assert _seen(ours) == _seen(official)
    assert ours.token or ours.cert_path  # a credential was read, not two Nones agreeing


def test_a_token_files_newline_is_trimmed_as_client_go_trims_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("from-a-file\n")
    monkeypatch.setenv("KUBECONFIG", str(_yaml(tmp_path / "config", _config(
        {"server": "https://127.0.0.1:6443"}, {"tokenFile": str(tmp_path / "token")}))))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert credentials.load_credentials().token == "from-a-file"


def test_kubeconfigs_are_merged_as_the_official_client_merges_them(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The first file to name an entry or the current context wins.
    first = _config({"server": "https://127.0.0.1:1"}, {"token": "first"})
    first.pop("current-context")
    second = _config({"server": "https://127.0.0.1:2"}, {"token": "second"})
    second["current-context"] = "c"
    paths = [str(_yaml(tmp_path / "a", first)), str(_yaml(tmp_path / "b", second))]
    ours, official = _both(monkeypatch, os.pathsep.join(paths))
    assert _seen(ours) == _seen(official)
    assert ours.server == "https://127.0.0.1:1" and ours.token == "first"


def test_an_exec_plugin_is_read_by_the_official_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # EKS, GKE: what this reader does not know goes to the official loader.
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1\", "
                      "\"kind\": \"ExecCredential\", \"status\": {\"token\": \"from-exec\"}}'\n")
    plugin.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                     "interactiveMode": "Never"}}
    path = _yaml(tmp_path / "config", _config({"server": "https://127.0.0.1:6443",
                                               "certificate-authority-data": _b64(CA)}, user))
    ours, official = _both(monkeypatch, str(path))
    assert ours.token == "from-exec" and _seen(ours) == _seen(official)


def test_the_pods_service_account_is_read_as_the_official_client_reads_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client
    from kubernetes.config.incluster_config import InClusterConfigLoader

    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(CA)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    ours = credentials.in_cluster(tmp_path)
    c = client.Configuration()
    InClusterConfigLoader(token_filename=str(tmp_path / "token"),
                          cert_filename=str(tmp_path / "ca.crt")).load_and_set(c)
    header = c.get_api_key_with_prefix("BearerToken") or c.get_api_key_with_prefix("authorization")
    assert ours is not None
    assert (ours.server, ours.token, ours.ca_path) == (c.host, header.split()[-1], c.ssl_ca_cert)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert credentials.in_cluster(tmp_path) is None  # outside a pod


def test_no_kubeconfig_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(credentials.NoCredentials, match="missing"):
        credentials.load_credentials()
    monkeypatch.setenv("KUBECONFIG", str(_yaml(tmp_path / "empty", {"kind": "Config"})))
    with pytest.raises(credentials.NoCredentials, match="current-context"):
        credentials.load_credentials()
    doc = _config({"server": "https://127.0.0.1:6443"}, {"token": "t"})
    doc["clusters"] = []
    monkeypatch.setenv("KUBECONFIG", str(_yaml(tmp_path / "no-cluster", doc)))
    with pytest.raises(credentials.NoCredentials, match="cluster 'k' of context 'c' not found"):
        credentials.load_credentials()


async def test_kopfs_own_session_has_a_connection_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # kopf's default has none: 1,000 guards at start opened 935 connections.
    import kopf

    from memoryguard_kuberay.operator import handlers
    from memoryguard_kuberay.operator.api.kube import REQUEST_CONNECTIONS

    monkeypatch.setenv("KUBECONFIG", str(_yaml(tmp_path / "config", _config(
        {"server": "http://127.0.0.1:6443"}, {"token": "tok"}))))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    got = await handlers.login(memo=kopf.Memo(watches=5))
    try:
        assert got.server == "http://127.0.0.1:6443"
        assert got.aiohttp_session.connector is not None
        assert got.aiohttp_session.connector.limit == REQUEST_CONNECTIONS + 5 + handlers.KOPF_OTHER_WATCHES
        assert got.aiohttp_session.headers["Authorization"] == "Bearer tok"
    finally:
        await got.aiohttp_session.close()
