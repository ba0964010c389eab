"""Real pods on a real kubelet (issue 28): a real Ray worker leaking in a
real pod, rotated before the kernel kills it.

The kit's kubelet and containerd run the pods for real (tests/realpods/
kubelet.py); the images are the project's Dockerfiles carried out here
(images.py); the real KubeRay (v1.7.0) and kube-scheduler make, bind,
replace and delete the pods (tests/realk8s/kuberaykit.py); the operator
runs as the chart runs it with the chart's ServiceAccount token (on the
host: the kit's pods reach each other and the host only with
``hostNetwork``, so the Ray pods use it, each Ray node on ports of its own).

The kit has no cluster DNS, so what KubeRay reaches by the head Service's
name cannot work here, and is set as a user on a host network would:
the workers' ``rayStartParams`` name the head's address, and KubeRay's
``wait-gcs-ready`` init container and its probes (``wget`` to Ray's
default agent port, which hostNetwork pods cannot all hold) are turned off
in KubeRay's own settings (``ENABLE_INIT_CONTAINER_INJECTION``,
``ENABLE_PROBES_INJECTION``). Everything else is KubeRay's: the ``ray start``
command it writes from ``rayStartParams``, its labels and env, and its
reconciling of pods (an evicted worker replaced once the old pod is gone).

One RayCluster: a head, a guarded worker group (``guarded``: the injected
sidecar beside Ray) and an unguarded one (``control``: no sidecar), whose
workers leak alike from one driver: the kernel OOM-kills the control
worker at its real limit, and the lead of the guarded worker's eviction
over that kill is printed. Then the ladder's cases a reclaim brings back
(issue 41), each in a guarded worker of its own (the replacement, then a
pod KubeRay makes for a deleted one): garbage in reference cycles that
hold ObjectRefs, and the example cache actor, each reading its pod's
pressure file. One guarded worker at a time: on the host's network every
pod's sidecar binds the host's port, and the operator takes only the
chart's. The tests run in file order on one cluster.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from memoryguard_kuberay.core import pressure
from memoryguard_kuberay.operator.rayclusters import injection

from ..devworld import ROOT
from ..procs import http_get, quiet_ports, stop
from ..realk8s import kuberaykit
from ..realk8s.controlplane import k8s_tools
from ..realk8s.operatorproc import operator_command
from . import images
from . import kubelet as kit
from .recorder import PodRecorder

pytestmark = pytest.mark.realpods

NS, RELEASE_NS, RELEASE, SA = "ray-real", "mg-system", "mg", "mg-memoryguard"
KUBERAY_VERSION = "v1.7.0"
# KubeRay's operator settings this tier needs (see the module's docstring: no cluster DNS).
KUBERAY_ENV = {"ENABLE_INIT_CONTAINER_INJECTION": "false", "ENABLE_PROBES_INJECTION": "false"}
MIB = 1024**2
WORKER_LIMIT = "1Gi"
# The true leak: slow enough that its first projection is outside the
# policy's rotation horizon (3 minutes) and inside the ladder's reclaim
# horizon (10), so the ladder asks a reclaim before the policy rotates it
# (at 3 MiB/s the first projection was already inside the 3 minutes).
LEAK_MIB_PER_S = 2.0
# The ladder's cases grow slower: their projected OOM (about 10 minutes away)
# is within the reclaim horizon and far outside the policy's rotation (3).
LADDER_MIB_PER_S = 1.0
LADDER_CASES = ("garbage", "cache")
GUARDS = f"/apis/memoryguard.io/v1alpha1/namespaces/{NS}/memoryguards"
# The policy's test profile (examples/guards/test-profile.yaml): windows short
# enough for a leak that reaches its limit in minutes, the ladder's times
# scaled to them; never a production setting.
TEST_GUARD = yaml.safe_load((ROOT / "examples" / "guards" / "test-profile.yaml").read_text())["spec"]

LEAKER = textwrap.dedent("""
    import sys, time, ray
    ray.init(address="auto", logging_level="ERROR")
    rate, until = float(sys.argv[1]), time.time() + float(sys.argv[2])

    @ray.remote(num_cpus=0, max_restarts=0)
    class Leaker:
        # The two leaks the field reports: a structure that only grows, and
        # ObjectRefs kept (their objects never released).
        def __init__(self):
            self.heap, self.refs = [], []

        def grow(self, mib):
            b = bytearray(int(mib * 2**20))
            b[::4096] = b"\\x01" * ((len(b) + 4095) // 4096)  # touched: resident, not a lazy zero page
            self.heap.append(b)
            self.refs.append(ray.put(bytes(128 * 1024)))
            return sum(map(len, self.heap))

    live = {g: Leaker.options(resources={g: 1}, name=f"leaker-{g}", lifetime="detached").remote()
            for g in ("guarded", "control")}
    print("started", time.time(), flush=True)
    while live and time.time() < until:
        t = time.time()
        for g, a in list(live.items()):
            try:
                held = ray.get(a.grow.remote(rate), timeout=30)
                print("held", g, held, flush=True)
            except Exception as e:
                print("died", g, time.time(), type(e).__name__, flush=True)
                del live[g]
        time.sleep(max(0.0, 1.0 - (time.time() - t)))
    print("done", time.time(), flush=True)
""")

# The ladder's cases, one a run (argv: the case, MiB a second, seconds to
# run), on the guarded worker (its Ray resource): each answers the pod's
# pressure file and says what it did ("did" lines, with the time it said it).
LADDER = textwrap.dedent("""
    import gc, json, sys, time, ray
    ray.init(address="auto", logging_level="ERROR")
    case, rate, until = sys.argv[1], float(sys.argv[2]), time.time() + float(sys.argv[3])

    @ray.remote
    class Garbage:
        # (a) What it drops is held in reference cycles, an ObjectRef in each:
        # only a collection frees it (the collector off between runs, as on a
        # busy worker). reclaim_ray (Ray's global GC) on Reclaim or Shed.
        def __init__(self):
            from memoryguard_kuberay.pressure import on_pressure, reclaim_ray
            gc.disable()
            self.did = []
            def answer(p):
                if p.step in ("Reclaim", "Shed"):
                    t0 = time.time()
                    reclaim_ray()
                    self.did.append({"t": t0, "step": p.step, "did": "reclaim_ray",
                                     "took_s": round(time.time() - t0, 3)})
            on_pressure(answer, interval_s=1.0)

        def grow(self, mib):
            b = bytearray(int(mib * 2**20))
            b[::4096] = b"\\x01" * ((len(b) + 4095) // 4096)  # touched: resident, not a lazy zero page
            d = {"heap": b, "ref": ray.put(bytes(128 * 1024))}
            d["self"] = d

        def what_it_did(self):
            return self.did

    # (b) examples/ladder/cache_actor.py as it stands (in the Ray image, on
    # its PYTHONPATH): a new 4 MiB key every 4 MiB of the rate, dropped on Reclaim.
    from cache_actor import CachingModel

    cls = Garbage if case == "garbage" else CachingModel
    a = cls.options(resources={"guarded": 1}, num_cpus=0, max_restarts=0).remote()
    print("started", case, time.time(), flush=True)
    tick, said = 0, None
    while time.time() < until:
        t = time.time()
        tick += 1
        try:
            if case == "garbage":
                ray.get(a.grow.remote(rate), timeout=30)
            elif int(tick * rate / 4) > int((tick - 1) * rate / 4):
                ray.get(a.predict.remote(f"k{tick}"), timeout=30)
            print("held", case, flush=True)
            did = ray.get(a.what_it_did.remote(), timeout=30)
        except Exception as e:
            print("died", case, time.time(), type(e).__name__, flush=True)
            break
        if did != said:
            said = did
            print("did", case, time.time(), json.dumps(did), flush=True)
        time.sleep(max(0.0, 1.0 - (time.time() - t)))
    print("done", time.time(), flush=True)
""")


class Cluster:
    def __init__(self, kl: kit.Kubelet, kuberay: kuberaykit.KubeRay, recorder: PodRecorder,
                 operator: subprocess.Popen[bytes], log: Path, workdir: Path, ports: dict[str, int],
                 free: Iterator[int]) -> None:
        self.kl, self.api, self.kuberay, self.recorder, self.operator, self.log, self.workdir, self.ports = (
            kl, kl.admin(), kuberay, recorder, operator, log, workdir, ports)
        self.free = free  # the run's quiet ports not yet given out
        self.facts: dict[str, Any] = {}

    def wait_for(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; recorder errors: "
                             f"{self.recorder.errors[-3:]}\n--- KubeRay's log ---\n{self.kuberay.log()}"
                             f"\n--- operator log ---\n{self.log.read_text(errors='replace')[-6000:]}")

    def pods(self, group: str, *, live: bool = True) -> list[dict[str, Any]]:
        return [p for p in self.recorder.pods() if p["metadata"]["labels"].get("ray.io/group") == group
                and not (live and p["metadata"].get("deletionTimestamp"))]

    def running(self, group: str) -> dict[str, Any] | None:
        return next((p for p in self.pods(group) if all(
            c.get("ready") for c in (p.get("status") or {}).get("containerStatuses") or [{}])
            and (p.get("status") or {}).get("phase") == "Running"), None)

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = self.api.ok("GET", f"/api/v1/namespaces/{NS}/events")["items"]
        return [e for e in items if e.get("reason") == reason]

    def driver(self, script: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """``script`` run by Ray's Python in the head pod (``kubectl exec``),
        its output in ``log``."""
        head = self.running("headgroup")
        assert head, "the head pod is not Running"
        with open(log, "wb") as out:
            driver = subprocess.Popen([str(self.kl.tools / "kubectl"), "exec", "-i", head["metadata"]["name"], "-n",
                                       NS, "-c", "ray-head", "--", "python", "-", *args],
                                      stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                      env={"KUBECONFIG": str(self.kl.kubeconfig), "PATH": "/usr/bin:/bin",
                                           "HOME": str(self.workdir)})
        assert driver.stdin is not None
        driver.stdin.write(script.encode())
        driver.stdin.close()
        return driver


WORKER_PORTS = 41  # a node's range for its Ray worker processes' ports


def _start_params(kind: str, ip: str, gcs: int, resources: dict[str, int], ports: dict[str, int],
                  free: Iterator[int]) -> dict[str, str]:
    """A node's ``rayStartParams`` (KubeRay writes ``ray start`` from them),
    with ports of its own, taken from ``free``: every Ray node of the
    cluster shares the host's network here."""
    own = [next(free) for _ in range(5 + WORKER_PORTS)]
    low = own[5]
    params = {"disable-usage-stats": "true", "node-ip-address": ip, "num-cpus": "1",
              # Under hostNetwork the pod's IP is the host's (and Ray registers a
              # node started at 127.0.0.1 under the host's outward address): the
              # operator finds the pod's Ray node by its name instead (raynodes.py).
              # $(MY_POD_NAME): the kubelet expands it in the args KubeRay writes.
              "node-name": "$(MY_POD_NAME)", "object-store-memory": "80000000",
              "metrics-export-port": str(ports["metrics"]), "node-manager-port": str(own[0]),
              "object-manager-port": str(own[1]), "dashboard-agent-listen-port": str(own[2]),
              "dashboard-agent-grpc-port": str(own[3]), "runtime-env-agent-port": str(own[4]),
              "min-worker-port": str(low), "max-worker-port": str(low + WORKER_PORTS - 1)}
    if resources:  # a shell word: KubeRay's command is run by bash
        params["resources"] = "'" + json.dumps(resources) + "'"
    if kind == "head":
        return {**params, "port": str(gcs), "include-dashboard": "false"}
    return {**params, "address": f"127.0.0.1:{gcs}"}  # no cluster DNS for the head Service's name


def _template(name: str, image: str, memory: str, ports: dict[str, int]) -> dict[str, Any]:
    # RAY_memory_monitor_refresh_ms=0: Ray's own memory monitor is off, so the
    # harm a leak comes to is the kernel's OOM kill at the container's limit
    # (with it on, seen here: Ray kills the leaking actor's worker at 95% of
    # the limit first, the container living on).
    env = [{"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "RAY_memory_monitor_refresh_ms", "value": "0"}]
    # Every port KubeRay would add by name, declared: under hostNetwork each is a
    # host port, and KubeRay's defaults (8080, 8265, 10001) would collide.
    return {"spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 30, "containers": [{
        "name": name, "image": image, "imagePullPolicy": "Never", "env": env,
        "ports": [{"name": k, "containerPort": v} for k, v in ports.items()],
        "resources": {"requests": {"cpu": "100m", "memory": memory}, "limits": {"memory": memory}}}]}}


def _raycluster(ray_image: str, gcs: int, free: Iterator[int]) -> dict[str, Any]:
    # Each node's Ray metrics on a port of its own (not KubeRay's 8080, which
    # another run on this host may hold): the injected sidecar reads the
    # guarded group's where its rayStartParams put them.
    head_ports = {"gcs-server": gcs, "metrics": next(free), "dashboard": next(free), "client": next(free)}
    guarded_ports, control_ports = {"metrics": next(free)}, {"metrics": next(free)}
    # 127.0.0.2: the control's Ray node is not found by the guarded pod's IP
    # (a drain looks Ray nodes up by pod IP; hostNetwork pods of one host share it).
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "real-rc", "namespace": NS},
            "spec": {"rayVersion": images.ray_version(),
                     "headGroupSpec": {
                         "rayStartParams": _start_params("head", "127.0.0.1", gcs, {}, head_ports, free),
                         "template": _template("ray-head", ray_image, "2Gi", head_ports)},
                     "workerGroupSpecs": [
                         {"groupName": "guarded", "replicas": 1, "minReplicas": 0, "maxReplicas": 1,
                          "rayStartParams": _start_params("worker", "127.0.0.1", gcs, {"guarded": 1}, guarded_ports,
                                                          free),
                          "template": _template("ray-worker", ray_image, WORKER_LIMIT, guarded_ports)},
                         {"groupName": "control", "replicas": 1, "minReplicas": 0, "maxReplicas": 1,
                          "rayStartParams": _start_params("worker", "127.0.0.2", gcs, {"control": 1}, control_ports,
                                                          free),
                          "template": _template("ray-worker", ray_image, WORKER_LIMIT, control_ports)}]}}


def _guard(port: int, sidecar_image: str) -> dict[str, Any]:
    return {"apiVersion": "memoryguard.io/v1alpha1", "kind": "MemoryGuard",
            "metadata": {"name": "real-guard", "namespace": NS},
            "spec": {"clusterSelector": {"names": ["real-rc"]}, "workerGroups": ["guarded"],
                     "sampling": {"intervalSeconds": 5, "sidecarPort": port, "timeoutSeconds": 3},
                     "sidecar": {"inject": True, "port": port, "image": sidecar_image},
                     "forensics": {"enabled": True, "timeoutSeconds": 20},
                     "rotation": {"drainTimeoutSeconds": 60},
                     "policy": TEST_GUARD["policy"], "ladder": TEST_GUARD["ladder"]}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = kit.requirements()
    if why:
        pytest.skip(why)
    why = kuberaykit.present(KUBERAY_VERSION)
    if why:
        pytest.skip(why)
    tools = k8s_tools()
    workdir = tmp_path_factory.mktemp("realpods")
    with kit.lock():
        home = Path(tempfile.mkdtemp(prefix="memoryguard-kubelet-"))
        try:
            kl = kit.start(home, tools)
        except kit.Unavailable as e:
            pytest.skip(str(e))
        try:
            t0 = time.monotonic()
            refs = images.ensure(["sidecar", "operator", "ray"], kubelet_home=home, workdir=workdir)
            print(f"\nreal pods: kubelet up in {kl.up_seconds:.0f} s, images ready in {time.monotonic() - t0:.0f} s")
            yield from _installed(kl, refs, workdir)
        finally:
            kl.down(purge=True)  # its home is this run's own temporary dir


def _installed(kl: kit.Kubelet, refs: dict[str, str], workdir: Path) -> Iterator[Cluster]:
    api = kl.admin()
    for ns in (NS, RELEASE_NS):
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    # KubeRay's CRDs of its version come with it (kuberay-up.sh installs them).
    kuberay = kuberaykit.KubeRay(kl, KUBERAY_VERSION, [NS], workdir / "kuberay", env=KUBERAY_ENV)
    try:
        kl.wait_established("rayclusters.ray.io")
        print(f"real pods: KubeRay {KUBERAY_VERSION} and the scheduler up in {kuberay.up_s:.0f} s")
        yield from _guarded(kl, kuberay, refs, workdir)
    finally:
        kuberay.stop()


def _guarded(kl: kit.Kubelet, kuberay: kuberaykit.KubeRay, refs: dict[str, str], workdir: Path) -> Iterator[Cluster]:
    # Every port a pod's server binds is chosen here, minutes before the
    # kubelet starts it: all below the ephemeral range (procs.quiet_ports).
    free = iter(quiet_ports(3 * (5 + WORKER_PORTS) + 8))
    port = next(free)
    sidecar_repo, sidecar_tag = refs["sidecar"].rsplit(":", 1)
    op_repo, op_tag = refs["operator"].rsplit(":", 1)
    kl.helm("install", RELEASE, str(ROOT / "charts" / "memoryguard"), "-n", RELEASE_NS,
            "--set", f"watchNamespaces={{{NS}}}", "--set", f"sidecar.sidecarPort={port}",
            "--set", f"sidecar.image.repository={sidecar_repo}", "--set", f"sidecar.image.tag={sidecar_tag}",
            "--set", f"image.repository={op_repo}", "--set", f"image.tag={op_tag}")
    # The chart's Deployment cannot run here as it is (its pod would need the
    # host's network to reach the Ray pods, and a Service to reach the API):
    # scaled to 0 (the chart's schema wants at least 1), it is run as a local
    # process from its own args and env, with its ServiceAccount's token.
    kl.kubectl("scale", "deployment", SA, "-n", RELEASE_NS, "--replicas=0")
    kubeconfig = kl.service_account_kubeconfig(SA, RELEASE_NS, workdir / "operator.kubeconfig")
    cmd, env = operator_command(kl, kubeconfig, namespace=RELEASE_NS, deployment=SA, extra_env={
        "MEMORYGUARD_DRAIN": "true", "MEMORYGUARD_WATCH_TIMEOUT_SECONDS": "60"})
    log = workdir / "operator.log"
    ports = {"sidecar": port, "gcs": next(free)}
    with PodRecorder(kl, NS) as recorder, open(log, "wb") as out:
        operator = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
        try:
            yield Cluster(kl, kuberay, recorder, operator, log, workdir, ports, free)
        finally:
            stop(operator, timeout=20)
            (workdir / "pods-as-run.yaml").write_text(yaml.safe_dump_all(
                [{"metadata": {k: p["metadata"].get(k) for k in ("name", "labels", "annotations")},
                  "spec": p.get("spec"), "statusHistory": [s for _, s in recorder.history.get(
                      p["metadata"]["name"], [])]} for p in recorder.seen.values()]))
            print(f"real pods: the pod specs as the kubelet ran them, with their statuses: "
                  f"{workdir / 'pods-as-run.yaml'}")


def _samples(port: int) -> dict[str, Any] | None:
    """The sidecar's answer on the host's loopback (the pod's network), once it has samples."""
    try:
        status, body = http_get(f"http://127.0.0.1:{port}/v1/samples")
    except OSError:
        return None
    doc = json.loads(body) if status == 200 else {}
    return doc if doc.get("samples") else None


def test_the_injected_sidecar_reads_the_ray_containers_real_cgroup(cluster: Cluster) -> None:
    c = cluster
    c.api.ok("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", _raycluster(
        images.project_ref("ray"), c.ports["gcs"], c.free))
    # Strict: a field the CRD does not know is refused, not pruned in silence.
    c.api.ok("POST", GUARDS, _guard(c.ports["sidecar"], images.project_ref("sidecar")),
             params={"fieldValidation": "Strict"})
    # The operator patches the guarded group's template; KubeRay makes pods
    # from templates as they are when it makes them (it never replaces a pod
    # for a template change): the first guarded pod may predate the patch, and
    # is replaced by deleting it (as a user would).
    c.wait_for(lambda: _has_sidecar(c.api.ok(
        "GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/real-rc")["spec"]["workerGroupSpecs"][0]
        ["template"]["spec"]), 60, "the sidecar injected into the guarded group's template")
    for p in c.pods("guarded"):
        if not _has_sidecar(p["spec"]):
            c.api.ok("DELETE", f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}")
    pod = c.wait_for(lambda: (p := c.running("guarded")) and _has_sidecar(p["spec"]) and p, 180,
                     "the guarded worker Running")
    # On this 1.36 kubelet the sidecar is a native sidecar (an init container
    # with restartPolicy Always): it outlives a pod whose policy is Never.
    native = next(k for k in pod["spec"].get("initContainers") or [] if k["name"] == injection.SIDECAR_NAME)
    assert native.get("restartPolicy") == "Always", native
    assert c.wait_for(lambda: c.running("control") and c.running("headgroup"), 180, "head and control Running")
    # Its first samples read nothing ("none"): Ray's processes are not up yet;
    # then the container's memory climbs past 100 MiB as raylet and its workers
    # start (a first reading caught at 99.5 MiB once), so wait for Ray's own size.
    doc = c.wait_for(lambda: (d := _samples(c.ports["sidecar"])) and d["source"] != "none"
                     and (d["samples"][-1].get("memory_current") or 0) > 100 * MIB and d, 90,
                     "the sidecar's samples of Ray's memory (over 100 MiB: Ray up)")
    print(f"real pods: the sidecar's source: {doc['source']}; last sample: {doc['samples'][-1]}")
    assert doc["source"].startswith("cgroup-v1:/proc/") and "/root/sys/fs/cgroup/memory" in doc["source"], doc["source"]
    last = doc["samples"][-1]
    assert last["memory_max"] == 1024 * MIB and last["memory_current"] and last["memory_current"] > 100 * MIB
    # Not root, no service-account token, its probes never made the pod NotReady.
    name = pod["metadata"]["name"]
    ids = c.kl.kubectl("exec", name, "-n", NS, "-c", injection.SIDECAR_NAME, "--", "id").stdout
    ray_ids = c.kl.kubectl("exec", name, "-n", NS, "-c", "ray-worker", "--", "id").stdout
    assert "uid=1000" in ids and "uid=0" not in ids, ids
    token = c.kl.kubectl("exec", name, "-n", NS, "-c", injection.SIDECAR_NAME, "--", "ls", "-A",
                         "/var/run/secrets/kubernetes.io/serviceaccount").stdout
    assert token.strip() == "", token
    c.facts.update(sidecar_id=ids.strip(), ray_id=ray_ids.strip(), source=doc["source"])
    # The object store, read from the raylet's metrics on KubeRay's port
    # (ray[default], as Ray's images have it): its capacity is this node's
    # --object-store-memory.
    store = c.wait_for(lambda: (d := _samples(c.ports["sidecar"])) and d["samples"][-1].get("plasma_capacity")
                       and d["samples"][-1], 90, "the sidecar's object-store figures from the raylet")
    print(f"real pods: the object store as the sidecar reads it: used {store['plasma_used']} of "
          f"{store['plasma_capacity']} bytes, spilled {store['plasma_spilled']}")
    assert store["plasma_capacity"] == pytest.approx(80_000_000, rel=0.05), store
    assert store["plasma_used"] is not None and store["plasma_used"] < store["plasma_capacity"]


def _has_sidecar(spec: dict[str, Any]) -> bool:
    """The injected sidecar, as a container or as a native sidecar."""
    return any(k["name"] == injection.SIDECAR_NAME for key in ("containers", "initContainers")
               for k in spec.get(key) or [])


def _statuses(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(s.get("containerStatuses") or []), *(s.get("initContainerStatuses") or [])]


def _oom_kills(pod: dict[str, Any], container: str) -> int | None:
    """The kernel's OOM kills in the container's memory cgroup (cgroup v1,
    ``memory.oom_control``), read on the host: the container lives on when
    the kernel kills only its largest process (the leaking actor's), so its
    status never says OOMKilled; this counter does."""
    cid = next((c.get("containerID", "").split("//")[-1] for c in (pod.get("status") or {}).get(
        "containerStatuses") or [] if c["name"] == container), "")
    if not cid:
        return None
    for path in Path("/sys/fs/cgroup/memory/kubepods").rglob(f"{cid}/memory.oom_control"):
        for line in path.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


def test_a_real_leak_is_rotated_before_the_kernel_kills_it(cluster: Cluster) -> None:
    c = cluster
    head = c.running("headgroup")
    guarded, control = c.running("guarded"), c.running("control")
    assert head and guarded and control
    g_name, c_name = guarded["metadata"]["name"], control["metadata"]["name"]
    assert _oom_kills(control, "ray-worker") == 0
    driver_log = c.workdir / "driver.log"
    guarded_oom: list[int] = []  # the guarded container's OOM kills, as its sidecar reads them
    store_used: list[int] = []  # its object store's bytes in use, as its sidecar reads them
    driver = c.driver(LEAKER, [str(LEAK_MIB_PER_S), "900"], driver_log)
    try:
        try:
            c.wait_for(lambda: b"held guarded" in driver_log.read_bytes() and b"held control" in
                       driver_log.read_bytes(), 120, f"both actors leaking ({driver_log})")
        except AssertionError as e:  # Ray's own word on why first: the driver's log
            raise AssertionError(f"--- the driver's log ---\n{driver_log.read_text(errors='replace')[-4000:]}"
                                 f"\n{e}") from None
        started = time.time()

        def evicted() -> list[dict[str, Any]]:
            doc = _samples(c.ports["sidecar"])
            if doc:
                guarded_oom.extend(s["oom_kill"] for s in doc["samples"][-3:] if s["oom_kill"] is not None)
                store_used.extend(s["plasma_used"] for s in doc["samples"][-3:] if s["plasma_used"] is not None)
            return [e for e in c.events("WorkerEvicted") if e["involvedObject"].get("kind") == "MemoryGuard"]

        events = c.wait_for(evicted, 900, "the guarded worker evicted")
        evicted_at = time.time()
        assert g_name in events[0]["message"], events[0]["message"]
        assert _oom_kills(control, "ray-worker") == 0, "the kernel killed the control before the eviction"
        c.wait_for(lambda: (_oom_kills(control, "ray-worker") or 0) > 0, 600,
                   f"the kernel's OOM kill in the unguarded control worker {c_name}")
        oom_at = time.time()
        # The driver's word for it, informative only: kubectl exec merges the
        # remote stdout and stderr, and Ray's own lines may share a line with it.
        deadline = time.monotonic() + 60
        while not (died := re.findall(r"control ([0-9]{10}\.[0-9]+)", driver_log.read_text(errors="replace"))) \
                and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        stop(driver, timeout=10)
    lead = oom_at - evicted_at
    print(f"real pods: leak of {LEAK_MIB_PER_S:g} MiB/s started; guarded worker {g_name} evicted after "
          f"{evicted_at - started:.0f} s; the kernel OOM-killed the unguarded control {c_name}'s actor after "
          f"{oom_at - started:.0f} s"
          + (f" (its driver saw it die after {float(died[0]) - started:.0f} s)" if died else "")
          + f": lead {lead:.0f} s")
    c.facts.update(lead_s=lead)
    # (c) of issue 41: what the ladder asked of the true leak before the policy rotated it.
    _ladder(c, g_name, started, evicted_at)
    # The guarded pod was never OOM-killed: not in its statuses, not in its cgroup's counter.
    assert guarded_oom and max(guarded_oom) == 0, guarded_oom
    # The leaking actor's ObjectRefs (128 KiB a second, never released) fill
    # the real store, and the sidecar saw it grow.
    assert store_used and max(store_used) - min(store_used) >= 4 * MIB, (min(store_used), max(store_used))
    print(f"real pods: the guarded worker's object store grew from {min(store_used) / MIB:.1f} to "
          f"{max(store_used) / MIB:.1f} MiB while it leaked")
    for _, s in c.recorder.history.get(g_name, []):
        for cs in s.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}
            assert term.get("reason") != "OOMKilled", (g_name, cs)
    assert lead > 0
    # Drained, evicted through the Eviction API by the chart's ServiceAccount, replaced.
    evictions = [e for e in c.kl.audit() if e.get("objectRef", {}).get("subresource") == "eviction"
                 and e["user"]["username"] == f"system:serviceaccount:{RELEASE_NS}:{SA}"]
    assert [(e["objectRef"]["name"], e["responseStatus"]["code"]) for e in evictions
            if e["responseStatus"]["code"] == 201] == [(g_name, 201)]
    drained = [e for e in c.events("WorkerDrained") if g_name in e["message"]]
    assert drained, [e["message"] for e in c.events("WorkerDrainFailed")]
    c.wait_for(lambda: c.events("WorkerRotated"), 300, "the rotation completed (a replacement Ready)")
    kept = c.wait_for(lambda: c.events("ForensicsKept"), 60, "the evidence kept")
    print(f"real pods: {drained[0]['message']}; {kept[0]['message']}")


def _ladder(c: Cluster, name: str, since: float, until: float) -> list[tuple[float, pressure.Pressure]]:
    """What the ladder asked of pod ``name`` (its annotation's values, as the
    recorder saw them, with when), printed with each step's judged effect
    and the time at each level from ``since`` to ``until``."""
    asked = [(at, a) for at, value in c.recorder.pressure.get(name, []) if (a := pressure.parse(value))]
    for at, a in asked:
        print(f"real pods: {name} at {at - since:+.0f} s: level {a.level}, step {a.step}"
              + (f", judged {a.effect}" if a.effect else ""))
    for message in dict.fromkeys(e["message"] for e in c.events("PressureStepJudged")):
        if message.startswith(f"{name}: "):
            print(f"real pods: judged: {message}")
    levels: dict[str, float] = {}
    marks = [(since, "Normal"), *((at, a.level) for at, a in asked if since <= at <= until), (until, "")]
    for (at, level), (nxt, _) in itertools.pairwise(marks):
        levels[level] = levels.get(level, 0.0) + nxt - at
    print(f"real pods: {name}: time at each level: " + ", ".join(f"{k} {v:.0f} s" for k, v in levels.items() if v))
    return asked


def test_the_ladder_brings_garbage_and_a_cache_back_without_a_rotation(cluster: Cluster) -> None:
    """(a) and (b) of issue 41 in real pods: a guarded worker whose growth
    is garbage in reference cycles holding ObjectRefs, then one whose actor
    (examples/ladder/cache_actor.py) holds a cache it can drop. Each reads
    its pod's pressure file (the downward API volume the injected template
    carries, which the real kubelet refreshes) with ``on_pressure``, and is
    brought back by the reclaim alone: judged effective, not evicted, not
    OOM-killed. Each case in a pod of its own: the first in the true leak's
    replacement, the next in the pod KubeRay makes for it once deleted."""
    c = cluster
    done: list[str] = []
    for case in LADDER_CASES:
        pod = c.wait_for(lambda: len(c.pods("guarded", live=False)) == 1 and (p := c.running("guarded"))
                         and _has_sidecar(p["spec"]) and p["metadata"]["name"] not in done and p, 300,
                         f"a new guarded worker Running for the {case} case")
        name = pod["metadata"]["name"]
        c.wait_for(lambda: (d := _samples(c.ports["sidecar"])) and (d["samples"][-1].get("memory_current") or 0)
                   > 100 * MIB, 120, f"the sidecar of {name} reading Ray's memory")
        log = c.workdir / f"ladder-{case}.log"
        driver = c.driver(LADDER, [case, str(LADDER_MIB_PER_S), "900"], log)
        try:
            c.wait_for(lambda case=case, log=log: f"held {case}" in log.read_text(errors="replace"), 120,
                       f"the {case} growing ({log})")
            started = time.time()

            def judged(name: str = name) -> list[str]:
                return [e["message"] for e in c.events("PressureStepJudged") if e["message"].startswith(f"{name}: ")]

            c.wait_for(lambda: any(m.endswith(": effective") for m in judged()), 600,
                       f"a step judged effective in {name} ({case}); judged so far: {judged()}")
            now = time.time()
            said = log.read_text(errors="replace")
        finally:
            stop(driver, timeout=10)
        asked = _ladder(c, name, started, now)
        did = [(float(line.split(" ", 3)[2]), json.loads(line.split(" ", 3)[3])) for line in said.splitlines()
               if line.startswith(f"did {case} ")]
        print(f"real pods: the {case} workload said: {did[-1][1] if did else 'nothing'}")
        assert did and did[-1][1], f"the {case} workload never answered a step:\n{said[-3000:]}"
        reclaim_at = next(at for at, a in asked if a.step == "Reclaim")
        # When it answered: the garbage's actor keeps the time; the cache's
        # answer is seen by the driver within a second.
        answered = did[-1][1][0]["t"] if case == "garbage" else next(at for at, said in did if said)
        print(f"real pods: {name}: the workload answered {answered - reclaim_at:.0f} s after the reclaim was "
              f"written to the pod (the kubelet showed it in the file)")
        c.facts[f"ladder_{case}"] = {"pod": name, "file_s": answered - reclaim_at, "judged": judged()}
        assert all(a.step != "Replace" for _, a in asked), asked
        assert not [e["message"] for e in c.events("WorkerEvicted") if name in e["message"]]
        assert (p := c.running("guarded")) and p["metadata"]["name"] == name, f"{name} is gone"
        assert _oom_kills(p, "ray-worker") == 0, f"the kernel OOM-killed in {name}"
        done.append(name)
        if case != LADDER_CASES[-1]:  # the next case in a pod of its own, as a user deletes one
            c.api.ok("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")


def test_no_ray_pod_was_ever_not_ready_while_running(cluster: Cluster) -> None:
    """The injected sidecar has a liveness probe and no readiness probe: its
    health never decides whether a Ray pod serves."""
    c = cluster
    for name, history in c.recorder.history.items():
        pod = c.recorder.seen[name]
        if not _has_sidecar(pod["spec"]):
            continue
        was_ready = False
        for _, s in history:
            ready = any(k.get("type") == "Ready" and k.get("status") == "True" for k in s.get("conditions") or [])
            sidecar = next((k for k in _statuses(s) if k["name"] == injection.SIDECAR_NAME), {})
            assert sidecar.get("restartCount", 0) == 0, (name, sidecar)
            if was_ready and not ready and s.get("phase") == "Running":
                ray = next((k for k in s.get("containerStatuses") or [] if k["name"] != injection.SIDECAR_NAME), {})
                # Only the Ray container's own end (drained, evicted) may take Ready away.
                assert "terminated" in (ray.get("state") or {}) or pod["metadata"].get("deletionTimestamp"), (name, s)
            was_ready = was_ready or ready
