"""The evidence kept before a rotation, against a real Ray head on loopback
(issue 15): a long-lived actor leaks ObjectRefs held by closures and keeps
a growing structure; the artifact names the leaking call site (file and
line) and the actor's process as the top one by USS; kept in the emulated
API and printed by ``memoryguard-kuberay forensics``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memoryguard_kuberay.core.policy import Action, Decision, Evidence, Reason
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.devkit.emulator.world import write_kubeconfig
from memoryguard_kuberay.operator.api.credentials import Credentials
from memoryguard_kuberay.operator.api.kube import Kube
from memoryguard_kuberay.operator.forensics import collect as forensics

from ..procs import get_json, sidecar_process, wait_until
from ..rayfixture import RAY_ENV, ray_head

pytestmark = pytest.mark.ray


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:  # gone
        return None

CALL_SITES = {"RAY_record_ref_creation_sites": "1"}
SERVICE = textwrap.dedent("""
    import sys, ray, numpy as np
    ray.init(address=sys.argv[1], logging_level="ERROR")

    @ray.remote
    class Session:
        def __init__(self):
            self.on_disconnect = []
            self.history = [np.full(350 * 1024 * 1024, 1, dtype=np.uint8)]  # the biggest process here
        def pid(self):
            import os
            return os.getpid()
        def handle(self, i):
            ref = ray.put(np.full(64 * 1024, i % 251, dtype=np.uint8))  # LEAK-LINE
            self.on_disconnect.append(lambda r=ref: r)
            return len(self.on_disconnect)

    s = Session.remote()
    for i in range(200):
        ray.get(s.handle.remote(i))
    print("PID", ray.get(s.pid.remote()), flush=True)
    sys.stdin.readline()
""")


async def test_the_artifact_names_the_leaking_line_and_the_top_process(tmp_path: Path) -> None:
    script = tmp_path / "leaky_service.py"
    script.write_text(SERVICE)
    line = next(i for i, text in enumerate(SERVICE.splitlines(), 1) if "LEAK-LINE" in text)
    with ray_head(env=CALL_SITES) as head:
        driver = subprocess.Popen([sys.executable, str(script), head.gcs_address], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, **RAY_ENV, **CALL_SITES})
        try:
            assert driver.stdout is not None
            out = driver.stdout.readline().split()
            assert out[:1] == ["PID"], out
            actor_pid = int(out[1])
            args = ["--interval", "1", "--ray-metrics-url", ""]
            with sidecar_process("127.0.0.1", args) as url:
                port = int(url.rsplit(":", 1)[1])
                wait_until(lambda: get_json(url + "/v1/samples")["samples"], 15, what="a sample")
                last = Sample.from_wire(get_json(url + "/v1/samples")["samples"][-1])
                ev = Evidence(used_bytes=last.unreclaimable_bytes, limit_bytes=last.memory_max_bytes,
                              slope_bytes_per_h=4.5 * 2**30, projected_oom_s=5160.0)
                subject = forensics.Subject(
                    namespace="default", guard="leak-guard", guard_uid="u", pod="ray-worker-0", pod_uid="p",
                    cluster="rc", group="workers", ip="127.0.0.1", sidecar_port=port, gcs_address=head.gcs_address,
                    decision=Decision(Action.ROTATE, Reason.PROJECTED_OOM, "growing +4.5 GiB/h, projected OOM in "
                                      "1 h 26 m", ev), last_sample=last)
                doc = await forensics.collect(subject, budget_s=30, with_ray=True)
                # This Ray's processes: the head's session (started in one of its
                # own). The sidecar here reads the whole host, where the other CI
                # lane's servers can be larger (a kube-apiserver at 619 MiB came
                # first once); in a pod it reads the pod's alone.
                ours = [r for r in doc["processes"]["processes"] if _session(r["pid"]) == head.proc.pid]
        finally:
            driver.kill()
            driver.wait()
    assert doc["skipped"] == {}, doc["skipped"]
    top_site = doc["rayObjects"]["callSites"][0]
    assert f"leaky_service.py:handle:{line}" in top_site["callSite"], top_site
    assert top_site["count"] == 200 and top_site["bytes"] >= 200 * 64 * 1024
    assert ours and ours[0]["pid"] == actor_pid, (ours[:3], doc["processes"]["processes"][:3])
    size = forensics.size_of(doc)
    assert size <= forensics.ARTIFACT_MAX_BYTES
    print(f"\nartifact: {size} bytes, collected in {doc['tookSeconds']} s")
    (tmp_path / "artifact.json").write_text(json.dumps(doc, indent=1))
    if os.environ.get("MEMORYGUARD_KEEP_ARTIFACT"):  # how docs/forensics.md got its example
        Path(os.environ["MEMORYGUARD_KEEP_ARTIFACT"]).write_text(json.dumps(doc, indent=1) + "\n")

    # Kept in a ConfigMap, printed by the command a user runs.
    api = EmulatedApi()
    async with api, EmulatorServer(api) as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            name = await forensics.keep(kube, doc, subject, keep_n=20, now=1.0)
        finally:
            await kube.close()
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(kubeconfig, f"http://127.0.0.1:{server.port}")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memoryguard_kuberay", "forensics", "-n", "default", "ray-worker-0",
            env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        printed = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 0, printed
    assert name in printed and f"leaky_service.py:handle:{line}" in printed and str(actor_pid) in printed, printed
