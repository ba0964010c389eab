"""The CRD's admission on a real kube-apiserver (issue 22, 2): every spec of
the shared table (tests/spectable.py) sent with ``dryRun=All`` and
``fieldValidation=Strict`` (as kubectl sends it); the server and the
operator's reader agree on each, or the row says why they may not."""

from __future__ import annotations

from typing import Any

from memoryguard_kuberay.core import constants as C
from memoryguard_kuberay.operator.guardspec import SpecError, read_guard_spec

from .. import spectable
from ..devworld import ROOT
from .controlplane import ControlPlane

PATH = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/mg-admission/{C.PLURAL}"


def _reader(spec: dict[str, Any], trusted: bool) -> bool:
    try:
        read_guard_spec(spec, trust=spectable.CHART_TRUST if trusted else None)
    except SpecError:
        return False
    return True


def test_the_server_and_the_reader_agree_on_every_row(real: ControlPlane) -> None:
    api = real.admin()
    real.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "memoryguard.io_memoryguards.yaml"))
    real.wait_established(f"{C.PLURAL}.{C.GROUP}")
    if api.get("/api/v1/namespaces/mg-admission") is None:
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "mg-admission"}})
    disagree, counted = [], {"accepted": 0, "refused": 0, "operator only": 0,
                                                 "server only": 0}
    for row in spectable.ROWS:
        body = {"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": C.KIND,
                "metadata": {"name": "probe"}, "spec": row.spec}
        status, doc, _ = api.call("POST", PATH, body, params={"dryRun": "All", "fieldValidation": "Strict"})
        assert status in (201, 400, 422), (row.id, status, doc)
        server = status == 201
        if row.server_refuses:
            ok = not server  # whatever the reader says
            counted["server only"] += 1
        elif row.why:
            # Limits only the operator can judge: the server admits, the operator refuses.
            ok = server and not _reader(row.spec, trusted=True)
            counted["operator only"] += 1
        else:
            ok = server == _reader(row.spec, trusted=False)
            counted["accepted" if server else "refused"] += 1
        if not ok:
            disagree.append((row.id, status, (doc or {}).get("message", "")[:300] if isinstance(doc, dict) else doc))
    print(f"\nadmission table on the real server: {len(spectable.ROWS)} rows, {counted}")
    assert disagree == [], "\n".join(map(str, disagree))
    assert counted["accepted"] > 20 and counted["refused"] > 50  # the table probes both sides


def test_a_planted_remedy_configmap_is_replaced_whole_never_merged(real: ControlPlane) -> None:
    """Issue 63, 3, on the real apiserver: a ConfigMap planted first under the
    name the remediation will use, by someone who may write ConfigMaps only,
    kept its LD_AUDIT and PYTHONPATH (the operator merged its labels and data
    in), and the Ray container's envFrom then read them. Now it is replaced
    whole: data, labels and owner exactly the operator's. Names of
    clusters and groups that read alike once joined no longer meet."""
    import asyncio

    from memoryguard_kuberay.operator.api.credentials import Credentials
    from memoryguard_kuberay.operator.api.kube import Kube
    from memoryguard_kuberay.operator.rayclusters import patches

    ns = "mg-planted"
    api = real.admin()
    api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert patches.remedy_configmap("ray", "gpu-workers", "jemalloc") != patches.remedy_configmap(
        "ray-gpu", "workers", "jemalloc")
    name = patches.remedy_configmap("ray", "gpu-workers", "jemalloc")
    api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": name, "labels": {"planted": "1"}},
                                                           "data": {"LD_AUDIT": "/tmp/x.so", "PYTHONPATH": "/tmp"}})
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray", "namespace": ns, "uid": "u-1"}}
    env = {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "MALLOC_CONF": "background_thread:true"}
    body = patches.remedy_configmap_body(rc, name, "jemalloc", env)

    async def put() -> None:
        kube = Kube(Credentials(server=real.server, token=api.token, ca_path=str(real.ca)), timeout_s=10)
        try:
            await kube.put_configmap(ns, body)
        finally:
            await kube.close()

    asyncio.run(put())
    held = api.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    assert held["data"] == env, held["data"]
    assert held["metadata"]["labels"] == body["metadata"]["labels"], held["metadata"]
    assert [o["uid"] for o in held["metadata"]["ownerReferences"]] == ["u-1"]
