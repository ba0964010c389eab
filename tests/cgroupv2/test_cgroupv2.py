"""The sidecar on a real cgroup v2 kernel (issue 40), and the same test on
the v1 layout of that kernel.

One VM per layout (the kit's Debian 6.1 kernel under QEMU, runc pods made
by its podlib), each running the cases below in a Kubernetes-shaped pod:
the project's sidecar, installed from its wheels and run with the uid, gid,
capabilities and no-new-privileges ``injection.inject_patch`` renders for the
case's Ray container, beside a Ray-like process that leaks (or not) under
``memory.max`` (and ``memory.high``). The guest records what the sidecar
served and what the files said; the tests here judge it:

* every served field against the files read at the same moment;
* the kernel's OOM kill seen in the samples (one rise of ``oom_kill``,
  whatever it counts), the last sample before it kept, the restarted
  container found again;
* the policy (the test profile), fed the served answers through the
  operator's own parser, rotates the leak before the kernel kills it;
* under ``memory.high``: its value, the throttling counted, PSI ``full``;
* the Ray container as 1000:100, as root, and as a uid set in the pod spec:
  what the sidecar reads, or a message naming the real cause.

Skipped, saying why, where the kit cannot run (no root, no kit, no image and
none buildable)."""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryguard_kuberay.core.commands import load_guard_settings
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.simulate import replay
from memoryguard_kuberay.operator.guardspec import SidecarInjection
from memoryguard_kuberay.operator.rayclusters import injection
from memoryguard_kuberay.operator.sidecars import sidecar_client

from ..devworld import ROOT
from . import kit

pytestmark = pytest.mark.cgroupv2

MIB = 1 << 20
TEST_PROFILE = ROOT / "examples" / "guards" / "test-profile.yaml"
BOOT = "import sys; from memoryguard_kuberay.cli import main; sys.exit(main(sys.argv[1:]))"
# Around the kill and the restart the files change faster than the reads
# follow (the kernel reclaims and kills within a sample; a new cgroup fills as
# the new process loads): samples this close are judged by the OOM test.
KILL_MARGIN_S = 3.0
AT_LIMIT = 0.99  # memory.current this close to memory.max: the cgroup is at its limit
# memory.stat is not exact: the kernel (6.1, mm/memcontrol.c) batches each
# CPU's counter updates and flushes them into what a reader sees only once
# the pending updates pass MEMCG_CHARGE_BATCH (64 pages) x the online CPUs
# ("we accept (limited) percpu fuzz"), or every 2 s. Two reads of memory.stat
# a moment apart can thus each be off by up to twice that: 64 pages x 2 vCPUs
# x 2. memory.current, memory.max and memory.events are exact counters.
VCPUS = 2  # the kit's default (kit.py passes no -c)
STAT_FUZZ = 2 * 64 * VCPUS * 4096
# Above memory.high the kernel charges an allocation first and reclaims the
# excess on the way back to user space (mem_cgroup_handle_over_high), so
# memory.current rises by one allocation (guest/leak.py's 1 MiB) plus each
# CPU's precharged stock (64 pages) and falls again between two of the
# test's reads: a served value up to that far above them is true.
OVER_HIGH = (1 << 20) + 64 * VCPUS * 4096
# memory.current counts the kernel's own part of the cgroup besides anon and
# file (page tables, slab, each CPU's precharged stock), and that part jumps
# by a MiB or more and back within a fraction of a second: across four runs
# of these cases, memory.current minus anon and file read 0.9-1.2 MiB at the
# median and up to 3.2 MiB above it in one read; a served sample caught it
# 2.0 MiB up between two reads 0.67 s apart that both missed it (the CI run
# of 05704b0). A value this far beyond the reads on either side is true.
CURRENT_TRANSIENT = 4 << 20


def injected_sidecar(pod_security: dict[str, Any] | None) -> dict[str, Any]:
    """The sidecar container the operator injects beside a Ray container
    whose pod says ``pod_security`` (as a RayCluster template would)."""
    spec: dict[str, Any] = {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.40.0",
                                            "resources": {"limits": {"memory": "256Mi"}}}]}
    if pod_security:
        spec["securityContext"] = pod_security
    rc = {"spec": {"workerGroupSpecs": [{"groupName": "workers", "template": {"spec": spec}}]}}
    ops = injection.inject_patch(rc, SidecarInjection(inject=True))
    return next(op["value"] for op in ops if isinstance(op.get("value"), dict)
                and op["value"].get("name") == injection.SIDECAR_NAME)


def guest_sidecar(pod_security: dict[str, Any] | None) -> dict[str, Any]:
    c = injected_sidecar(pod_security)
    ctx = c["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    return {"uid": ctx["runAsUser"], "gid": ctx["runAsGroup"], "caps": [],
            "nnp": ctx["allowPrivilegeEscalation"] is False,
            # The rendered args, sampling each second instead of every 5 s (the
            # guest's Python is about ten times slower than a node's), no raylet.
            "args": ["python3", "-c", BOOT, *c["args"], "--interval", "1", "--ray-metrics-url", ""]}


def case(name: str, *, ray: tuple[int, int] = (1000, 100), pod_security: dict[str, Any] | None = None,
         mem_max: int = 256 * MIB, rate: float = 0.0, **more: Any) -> dict[str, Any]:
    security = pod_security if pod_security is not None else {"runAsUser": ray[0], "runAsGroup": ray[1]}
    return {"name": name, "ray_uid": ray[0], "ray_gid": ray[1], "mem_max": mem_max, "rate": rate, "cache_mib": 24,
            "sidecar": guest_sidecar(security), "timeout_s": 120, **more}


# A leak of 1.2 MiB/s to a 256 MiB limit reaches the kill in about three
# minutes: long enough for the test profile's two minutes of history.
# The two long leaks run at once, each its own pod (``together``): they wait
# on their rates, and one after another they took about 430 of the VM's
# 630 s (220 and 212 s of watching, each with its pod's start and end). The
# memory.high case runs alone: held at memory.high the kernel reclaims as
# it throttles, and with three pods' probes sharing the guest's CPU its
# reads were far enough apart to miss a 1.8 MiB dip of anon the sidecar
# served (a CI run of 2026-12-07: 1 value off of 1,156).
V2_CASES = [
    case("leak-max", rate=1.2, restart=True, timeout_s=330, together="leaks"),
    # Issue 59, 1: the kernel's memory leaking (socket buffers nobody reads), anon flat.
    case("leak-sock", rate=1.2, program="sockleak.py", restart=True, timeout_s=330, together="leaks"),
    case("leak-high", rate=4.0, mem_high=160 * MIB, after_high_s=30, timeout_s=150),
    case("ray-1000-100", watch_s=20),
    case("ray-root", ray=(0, 0), pod_security={"runAsUser": 0, "runAsGroup": 0}, watch_s=20),
    case("ray-arbitrary", ray=(1234, 5678), watch_s=20),
]
V1_CASES = [
    case("leak-max", rate=4.0, restart=True, timeout_s=150),
    case("ray-1000-100", watch_s=20),
]
PORT = SidecarInjection().port

V2_FILES = {  # served field: (file, key or None)
    "memory_current": ("memory.current", None), "memory_max": ("memory.max", None),
    "memory_high": ("memory.high", None), "anon": ("memory.stat", "anon"), "file": ("memory.stat", "file"),
    "inactive_file": ("memory.stat", "inactive_file"), "shmem": ("memory.stat", "shmem"),
    "oom_kill": ("memory.events", "oom_kill"), "events_high": ("memory.events", "high"),
    "events_max": ("memory.events", "max"), "psi_some_avg10": ("memory.pressure", "some_avg10"),
    "psi_full_avg10": ("memory.pressure", "full_avg10"),
    "slab_unreclaimable": ("memory.stat", "slab_unreclaimable"), "sock": ("memory.stat", "sock"),
    "kernel_stack": ("memory.stat", "kernel_stack"), "pagetables": ("memory.stat", "pagetables"),
    "percpu": ("memory.stat", "percpu"),
}
V1_FILES = {
    "memory_current": ("memory.usage_in_bytes", None), "memory_max": ("memory.limit_in_bytes", None),
    "anon": ("memory.stat", "total_rss"), "file": ("memory.stat", "total_cache"),
    "inactive_file": ("memory.stat", "total_inactive_file"), "shmem": ("memory.stat", "total_shmem"),
    "oom_kill": ("memory.oom_control", "oom_kill"),
}


class Run:
    def __init__(self, layout: str, share: Path, rc: int, wall_s: float, output: str) -> None:
        self.layout, self.share, self.rc, self.wall_s, self.output = layout, share, rc, wall_s, output

    def record(self, name: str) -> dict[str, Any]:
        path = self.share / "out" / f"{name}.json"
        assert path.is_file(), f"no record of {name} ({self.layout}); the guest said:\n{self.output}"
        return kit.record(self.share, name)


@pytest.fixture(scope="module")
def site() -> Iterator[Path]:
    why = kit.unavailable()
    if why:
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="mg-cg2-site-") as tmp:
        kit.install_sidecar(Path(tmp) / "site", Path(tmp) / "wheels")
        yield Path(tmp) / "site"


def _run(layout: str, cases: list[dict[str, Any]], site: Path, tmp: Path) -> Run:
    timeout = int(sum(c["timeout_s"] for c in cases) + 60 * len(cases) + 60)
    rc, wall, out = kit.run_guest(tmp, site, cases, layout=layout, port=PORT, timeout_s=timeout)
    print(f"\n[cgroupv2] the {layout} VM ran {len(cases)} cases in {wall:.0f} s (exit {rc})")
    return Run(layout, tmp, rc, wall, out)


@pytest.fixture(scope="module")
def v2(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run("v2", V2_CASES, site, tmp_path_factory.mktemp("cg2-v2"))


@pytest.fixture(scope="module")
def v1(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run("v1", V1_CASES, site, tmp_path_factory.mktemp("cg2-v1"))


def answers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in rec["answers"] if a["status"] == 200]


def served(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every sample the sidecar served, in order, once."""
    out: dict[float, dict[str, Any]] = {}
    for a in answers(rec):
        for s in json.loads(a["body"])["samples"]:
            out[s["time"]] = s
    return [out[t] for t in sorted(out)]


def file_value(read: dict[str, Any], file: str, key: str | None) -> float | None:
    raw = read.get(file)
    if key is not None:
        return raw.get(key) if isinstance(raw, dict) else None
    if raw == "max":
        return math.inf
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def bracket(reads: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]] | None:
    """The reads from the last one begun at or before ``start`` to the first
    begun at or after ``end``: what the files said on both sides of a moment
    in between. None when the reads do not reach both sides (the test's own
    loop waited on an answer or a restart there)."""
    before = [i for i, r in enumerate(reads) if r["t"] <= start]
    after = [i for i, r in enumerate(reads) if r["t"] >= end]
    if not before or not after:
        return None
    return reads[before[-1]:after[0] + 1]


def compare(rec: dict[str, Any], files: dict[str, tuple[str, str | None]]) -> tuple[int, list[str]]:
    """(values compared, mismatches): each served value must lie within what
    the files said in the reads on both sides of the sidecar's read. The
    sidecar stamps a sample before it reads the files and stamps the next
    only after, so its read fell between the sample's time and the next
    sample's: the reads bracketing that span saw the value, or one step of
    the file beyond (at the limit, memory.current moves by a MiB or two
    between reads a third of a second apart while the kernel reclaims), and
    for memory.current at its limit, up to the limit, and above memory.high,
    by one allocation more (``OVER_HIGH``); memory.stat's fields by the
    kernel's per-CPU fuzz besides (``STAT_FUZZ``), memory.current by the
    kernel's own part's jumps (``CURRENT_TRANSIENT``). Samples whose span holds
    the container's kill or restart are judged by the OOM test instead: the
    files change there faster than reads follow, and the cgroup is replaced."""
    n, bad = 0, []
    reads = sorted(rec["reads"], key=lambda r: r["t"])
    changes = [t for e, t in rec["events"] if e in ("ray stopped", "ray restarted")]
    samples = [s for s in served(rec) if s.get("memory_current") is not None]
    for s, following in itertools.pairwise(samples):
        near = bracket(reads, s["time"], following["time"])
        if near is None or any(near[0]["t"] - KILL_MARGIN_S <= t <= near[-1]["t"] + KILL_MARGIN_S
                               for t in changes):
            continue
        for field, (file, key) in files.items():
            values = [v for r in near if (v := file_value(r, file, key)) is not None]
            if not values:
                continue
            got = s.get(field)
            got = math.inf if got is None and field in ("memory_max", "memory_high") else got
            finite = [v for v in values if v != math.inf]
            step = max((abs(b - a) for a, b in itertools.pairwise(finite)), default=0)
            slack = step + (STAT_FUZZ if file == "memory.stat" else 0) + \
                (CURRENT_TRANSIENT if field == "memory_current" else 0)
            top = max(values) + slack
            limit = [v for r in near if (v := file_value(r, files["memory_max"][0], None)) not in (None, math.inf)]
            if field == "memory_current" and limit and max(values) >= AT_LIMIT * min(limit):
                # At its limit the cgroup touches the limit between reads (v1
                # counted 5,000 failed charges there): any value up to it is true.
                top = max(top, min(limit))
            high = [v for r in near if (v := file_value(r, "memory.high", None)) not in (None, math.inf)]
            if field == "memory_current" and high and max(values) >= min(high):
                top += OVER_HIGH
            n += 1
            if got is None or not min(values) - slack <= got <= top:
                bad.append(f"t={s['time']:.2f} {field}: served {got}, files {min(values)}..{max(values)} "
                           f"(slack {slack})")
    return n, bad


def num(v: float | None) -> str:
    if v is None or v == math.inf:
        return "max" if v == math.inf else "-"
    return f"{v:.2f}" if isinstance(v, float) and not v.is_integer() else str(int(v))


def print_table(rec: dict[str, Any], files: dict[str, tuple[str, str | None]], rows: int = 4) -> None:
    samples = [s for s in served(rec) if s.get("memory_current") is not None]
    picks = list(itertools.pairwise(samples))[:: max(1, len(samples) // rows)][:rows]
    reads = sorted(rec["reads"], key=lambda r: r["t"])
    print(f"\n{'field':16}" + "".join(f"{'t+' + str(round(s['time'] - samples[0]['time'])) + ' s':>35}"
                                      for s, _ in picks))
    for field, (file, key) in files.items():
        cells = []
        for s, following in picks:
            near = [v for r in bracket(reads, s["time"], following["time"]) or []
                    if (v := file_value(r, file, key)) is not None]
            lo, hi = (min(near), max(near)) if near else (None, None)
            span = "-" if lo is None else (num(lo) if lo == hi else f"{num(lo)}..{num(hi)}")
            cells.append(f"{num(s.get(field)):>10} / {span:<21}")
        print(f"{field:16}" + "".join(f"{c:>35}" for c in cells))
    print("(served / the files in the reads on both sides of the sidecar's read)")


def event_time(rec: dict[str, Any], what: str) -> float | None:
    return next((t for e, t in rec["events"] if e == what), None)


def until_the_kill(rec: dict[str, Any]) -> tuple[list[Sample], float]:
    """The samples the operator's own parser reads from every answer, up to
    the kernel's OOM kill, and the kill's instant. The kill is the earlier of
    the probe seeing the process gone and the first sample whose
    ``memory.events`` oom_kill rose: on a slow host the probe's loop lags the
    sidecar, which may already have served the emptied cgroup (a CI run read
    ``memory.current`` 80 KiB "before" the kill that way)."""
    stopped = event_time(rec, "ray stopped")
    assert stopped is not None, f"the process was never seen to stop; events {rec['events']}"
    events = (rec.get("at_kill") or {}).get("memory.events") or {}
    assert (events.get("oom_kill") or 0) > 0, (
        f"the process stopped, but not by the kernel's OOM killer: memory.events {events!r}, "
        f"dmesg {rec.get('dmesg_oom')}, its log {rec.get('ray_log', '')[-400:]!r}")
    samples: list[Sample] = []
    for a in answers(rec):
        poll = sidecar_client.parse(a["body"].encode(), latency_s=0.0, now_s=a["at"])
        samples.extend(s for s in poll.samples if s.time_s < stopped and (not samples or s.time_s > samples[-1].time_s))
    base = next((s.oom_kill_count for s in samples if s.oom_kill_count is not None), 0)
    seen = next((s.time_s for s in samples if (s.oom_kill_count or 0) > base), None)
    killed = stopped if seen is None else min(stopped, seen)
    return [s for s in samples if s.time_s < killed], killed


# -- cgroup v2 ---------------------------------------------------------------

def test_v2_every_served_field_is_what_the_files_said(v2: Run) -> None:
    for name in ("leak-max", "leak-high", "leak-sock"):
        rec = v2.record(name)
        n, bad = compare(rec, V2_FILES)
        print(f"{name}: {n} served values compared with the files, {len(bad)} off")
        assert n >= 200 and not bad, bad[:10]
    print_table(v2.record("leak-max"), V2_FILES)


def test_v2_the_oom_kill_is_seen_once_and_the_restarted_container_found(v2: Run) -> None:
    rec = v2.record("leak-max")
    killed, restarted = event_time(rec, "ray stopped"), event_time(rec, "ray restarted")
    assert killed is not None and restarted is not None, rec["events"]
    samples = served(rec)
    before = [s for s in samples if s["time"] < restarted and s.get("memory_current") is not None]
    after = [s for s in samples if s["time"] > restarted and s.get("memory_current") is not None]
    kills = [s["oom_kill"] for s in before]
    rises = sum(1 for a, b in itertools.pairwise(kills) if b > a)
    at_kill = rec["at_kill"]["memory.events"]
    print(f"memory.events at the kill: {at_kill}; served oom_kill before the restart: "
          f"{sorted(set(kills))}; after: {sorted({s['oom_kill'] for s in after})}")
    assert kills[0] == 0 and rises == 1, kills  # one kill, seen as one rise whatever oom_kill counts
    last = max(before, key=lambda s: s["time"])
    assert last["oom_kill"] > 0 and last["memory_current"] is not None  # the last sample before it, kept
    assert after and after[0]["oom_kill"] == 0, "the restarted container is read again, its counters anew"
    found = event_time(rec, "found again")
    assert found is not None
    print(f"the restarted container was found again {found - restarted:.1f} s after it started")


def test_v2_the_policy_rotates_the_leak_before_the_kernel_kills_it(v2: Run) -> None:
    samples, killed = until_the_kill(v2.record("leak-max"))
    result = replay("leak-max", samples, load_guard_settings(str(TEST_PROFILE)))
    first = result.first_rotation_s
    reasons = sorted({td.decision.reason.value for td in result.decisions})
    print(f"kill at t+{killed - samples[0].time_s:.0f} s; first rotation at "
          f"{'never' if first is None else f't+{first - samples[0].time_s:.0f} s'} ({reasons}); "
          f"lead {'none' if first is None else f'{killed - first:.0f} s'}")
    assert first is not None and first < killed


def test_v2_a_leak_of_the_kernels_memory_is_rotated_before_the_kernel_kills_it(v2: Run) -> None:
    """Issue 59, 1: socket buffers of connections nobody reads fill the
    cgroup while anon stays flat; the sidecar serves them (``sock``), the
    policy counts them in "in use" and rotates the pod before the kill."""
    samples, killed = until_the_kill(v2.record("leak-sock"))
    known = [s for s in samples if s.sock_bytes is not None and s.anon_bytes is not None]
    first, last = known[0], known[-1]
    print(f"socket leak: sock {first.sock_bytes / MIB:.0f} -> {last.sock_bytes / MIB:.0f} MiB, anon "
          f"{first.anon_bytes / MIB:.0f} -> {last.anon_bytes / MIB:.0f} MiB, kernel's unreclaimable "
          f"{(last.kernel_bytes or 0) / MIB:.0f} MiB, in use {last.used_fraction:.0%} of the limit at the last "
          f"sample before the kill (anon + shmem alone: {(last.anon_bytes + (last.shmem_bytes or 0)) / MIB:.0f} MiB)")
    assert last.sock_bytes - first.sock_bytes > 100 * MIB, "the leak was not in the socket buffers"
    assert last.anon_bytes < 100 * MIB, "anon grew: not a kernel-memory leak"
    result = replay("leak-sock", samples, load_guard_settings(str(TEST_PROFILE)))
    rotated = result.first_rotation_s
    reasons = sorted({td.decision.reason.value for td in result.decisions})
    print(f"kill at t+{killed - samples[0].time_s:.0f} s; first rotation at "
          f"{'never' if rotated is None else f't+{rotated - samples[0].time_s:.0f} s'} ({reasons}); "
          f"lead {'none' if rotated is None else f'{killed - rotated:.0f} s'}")
    assert rotated is not None and rotated < killed
    # Without the kernel's part (as before the issue) "in use" read anon + shmem alone.
    assert (last.anon_bytes + (last.shmem_bytes or 0)) / (last.memory_max_bytes or 1) < 0.5


def test_v2_memory_high_its_throttling_and_full_pressure_are_served(v2: Run) -> None:
    rec = v2.record("leak-high")
    crossed = event_time(rec, "crossed memory.high")
    assert crossed is not None, rec["events"]
    samples = [s for s in served(rec) if s.get("memory_current") is not None]
    assert all(s["memory_high"] == 160 * MIB for s in samples)
    assert samples[0]["events_high"] == 0 and samples[-1]["events_high"] > 0
    full = max(s["psi_full_avg10"] or 0.0 for s in samples)
    top = max(s["memory_current"] for s in samples) / MIB
    print(f"events_high {samples[-1]['events_high']}, events_max {samples[-1]['events_max']}, "
          f"PSI full avg10 at most {full}%, memory.current at most {top:.0f} MiB against memory.high 160 MiB "
          "and memory.max 256 MiB")
    assert full > 0


@pytest.mark.parametrize("name,uid", [("ray-1000-100", 1000), ("ray-arbitrary", 1234)])
def test_v2_a_sidecar_rendered_with_the_ray_containers_ids_reads_it(v2: Run, name: str, uid: int) -> None:
    rec = v2.record(name)
    samples = [s for s in served(rec) if s.get("memory_current") is not None]
    sources = {json.loads(a["body"]).get("source") for a in answers(rec)}
    print(f"{name}: sidecar uid {rec['case']['sidecar']['uid']}, {len(samples)} samples, source {sources}")
    assert rec["case"]["sidecar"]["uid"] == uid and samples and samples[-1]["memory_max"] == 256 * MIB
    # Ray's own cgroup, at the root of its cgroup mount: the path /proc/<pid>/cgroup
    # gives (relative to the sidecar's namespace, "0::/../ray") is not taken.
    assert all(s.startswith("cgroup-v2:/proc/") and s.endswith("/root/sys/fs/cgroup") for s in sources if s != "none")


def test_v2_a_root_ray_is_not_read_and_the_message_says_why(v2: Run) -> None:
    rec = v2.record("ray-root")
    assert rec["case"]["sidecar"]["uid"] == 1000  # the sidecar is never root
    assert not [s for s in served(rec) if s.get("memory_current") is not None]
    log = rec["sidecar_log"]
    print(log.strip().splitlines()[-3:])
    assert "runs as root" in log and "run the Ray container as a non-root user" in log


# -- the v1 layout of the same kernel ------------------------------------------

def test_v1_every_served_field_is_what_the_files_said(v1: Run) -> None:
    rec = v1.record("leak-max")
    n, bad = compare(rec, V1_FILES)
    print(f"v1 leak-max: {n} served values compared with the files, {len(bad)} off")
    assert n >= 100 and not bad, bad[:10]
    samples = served(rec)
    assert all(s.get(f) is None for s in samples for f in ("memory_high", "events_high", "events_max",
                                                           "psi_some_avg10"))


def test_v1_the_oom_kill_is_seen_and_the_restarted_container_found(v1: Run) -> None:
    rec = v1.record("leak-max")
    restarted = event_time(rec, "ray restarted")
    assert restarted is not None, rec["events"]
    before = [s for s in served(rec) if s["time"] < restarted and s.get("memory_current") is not None]
    kills = [s["oom_kill"] for s in before]
    print(f"v1 memory.oom_control at the kill: {rec['at_kill']['memory.oom_control']}, failcnt "
          f"{rec['at_kill']['memory.failcnt']}; served oom_kill {sorted(set(kills))}")
    assert kills[0] == 0 and kills[-1] > 0
    assert event_time(rec, "found again") is not None


def test_v1_a_sidecar_with_the_ray_containers_ids_reads_it(v1: Run) -> None:
    rec = v1.record("ray-1000-100")
    sources = {json.loads(a["body"]).get("source") for a in answers(rec)} - {"none"}
    assert [s for s in served(rec) if s.get("memory_current") is not None], rec["sidecar_log"][-2000:]
    print(f"v1 source {sources}")
    assert all(s.startswith("cgroup-v1:") for s in sources)
