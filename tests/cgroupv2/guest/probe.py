"""Runs in the cgroup v2 kit's guest, as root: for each case of
/share/conf.json, a Kubernetes-shaped pod (the kit's podlib: a pause
container owning the PID and network namespaces, a Ray container, and the
project's sidecar as the operator renders it), a leak or none, and two
records side by side: what the sidecar served (the raw ``/v1/samples``
answers, as the operator's poller gets them) and what the cgroup files said,
read by this driver every quarter second. The host side (test_cgroupv2.py)
judges them; nothing is judged here.

Standard library only: this is the guest's own Python 3.11."""
import ctypes
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, "/cgkit")
import podlib  # the kit's, shared in read-only

with open("/share/conf.json") as _f:
    CONF = json.load(_f)
V2 = CONF["layout"] == "v2"
PORT = CONF["port"]
OUT = "/share/out"
CLONE_NEWNET = 0x40000000
FILES_V2 = ("memory.current", "memory.max", "memory.high", "memory.stat", "memory.events", "memory.pressure")
FILES_V1 = ("memory.usage_in_bytes", "memory.limit_in_bytes", "memory.stat", "memory.oom_control", "memory.failcnt")
STAT_KEYS = ("anon", "file", "inactive_file", "shmem", "rss", "cache", "total_rss", "total_cache",
             "total_inactive_file", "total_shmem", "slab_unreclaimable", "sock", "kernel_stack", "pagetables",
             "percpu")


def cgroup_dir(name):
    if V2:
        return podlib.cg(name)
    return "/sys/fs/cgroup/memory" + podlib.POD_CG + "/" + name


def read_files(name):
    out = {"t": time.time()}
    for f in FILES_V2 if V2 else FILES_V1:
        text = podlib.read(os.path.join(cgroup_dir(name), f))
        if f in ("memory.stat", "memory.events", "memory.oom_control"):
            kv = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) == 2)
            out[f] = {k: int(v) for k, v in kv.items() if v.isdigit() and (f != "memory.stat" or k in STAT_KEYS)}
        elif f == "memory.pressure":
            out[f] = {line.split()[0] + "_" + kv.split("=")[0]: float(kv.split("=")[1])
                      for line in text.splitlines() if line.split() for kv in line.split()[1:]
                      if kv.startswith("avg10=")}
        else:
            out[f] = text
    return out


def enter_netns(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def get(path, timeout=2.0):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def names(c):
    """The case's containers, by its name: cases run side by side (``together``)."""
    n = c["name"]
    return f"{n}-sidecar", f"{n}-ray", f"{n}-pause"


def start_ray(c, pause, rate):
    ray = names(c)[1]
    program = c.get("program", "leak.py") if rate else "leak.py"  # (restarted: no leak)
    args = ["bash", "-c", f"exec -a ray::Leaker python3 /probes/{program} {rate} {c['cache_mib']}"]
    kw = {"uid": c["ray_uid"], "gid": c["ray_gid"], "join": pause, "mem": c["mem_max"],
          "log": f"/var/lib/kitpod/ray-{c['name']}.log"}
    if V2:
        kw["oom_group"] = 1  # the kubelet's default since 1.28
    pid = podlib.start(ray, args, **kw)
    if V2 and c.get("mem_high"):
        with open(os.path.join(cgroup_dir(ray), "memory.high"), "w") as f:
            f.write(str(c["mem_high"]))
    return pid


def run_case(c):
    sidecar, ray, pause_name = names(c)
    for name in names(c):
        podlib.kill(name)
    rec = {"case": c, "reads": [], "answers": [], "events": []}
    pause = podlib.start(pause_name, ["sleep", "infinity"])
    enter_netns(pause)
    sc = c["sidecar"]
    log = f"/var/lib/kitpod/sidecar-{c['name']}.log"
    # The sidecar first, as a native sidecar starts before the Ray
    # container, and the leak only once it answers: three sidecars starting
    # at once in this emulated guest took 80 s, a third of a leak unsampled.
    podlib.start(sidecar, sc["args"], uid=sc["uid"], gid=sc["gid"], caps=sc["caps"], nnp=sc["nnp"], join=pause,
                 mounts=[("/site", "/opt/mg")], env=["PYTHONPATH=/opt/mg"], log=log)
    rec["events"].append(["sidecar started", time.time()])
    answering = time.time() + 240
    while get("/healthz")[0] is None and time.time() < answering:
        time.sleep(0.5)
    rec["events"].append(["sidecar answering", time.time()])
    start_ray(c, pause, c["rate"])
    rec["events"].append(["ray started", time.time()])
    deadline = time.time() + c["timeout_s"]
    since = 0.0
    next_poll = time.time() + 1.0
    killed_at = restarted_at = crossed_high_at = found_again_at = None
    watch_until = time.time() + c.get("watch_s", 1e9)
    while time.time() < deadline and time.time() < watch_until:
        r = read_files(ray)
        rec["reads"].append(r)
        if c.get("mem_high") and crossed_high_at is None and r.get("memory.current", "").isdigit() \
                and int(r["memory.current"]) >= c["mem_high"]:
            crossed_high_at = r["t"]
            rec["events"].append(["crossed memory.high", crossed_high_at])
            watch_until = crossed_high_at + c["after_high_s"]
        if time.time() >= next_poll:
            next_poll += 1.0
            status, body = get(f"/v1/samples?since={since}")
            rec["answers"].append({"at": time.time(), "status": status, "body": body})
            if status == 200:
                samples = json.loads(body).get("samples") or []
                if samples:
                    since = samples[-1]["time"]
                if restarted_at is not None and found_again_at is None and any(
                        s["time"] > restarted_at and s.get("memory_current") is not None for s in samples):
                    found_again_at = time.time()
                    rec["events"].append(["found again", found_again_at])
                    watch_until = found_again_at + 3
        if c.get("restart") and killed_at is None and podlib.state(ray) in ("stopped", None):
            killed_at = time.time()
            rec["events"].append(["ray stopped", killed_at])
            rec["at_kill"] = read_files(ray)
            rec["reads"].append(rec["at_kill"])
            # As the kubelet does: the dead container is removed (its cgroup
            # with it) and a new one started, here after 2 s, with no leak.
            time.sleep(2)
            podlib.kill(ray)
            start_ray(c, pause, 0)
            restarted_at = time.time()
            rec["events"].append(["ray restarted", restarted_at])
        time.sleep(0.25)
    rec["healthz"] = get("/healthz")
    with open(log, errors="replace") as f:
        rec["sidecar_log"] = f.read()[-4000:]
    with open(f"/var/lib/kitpod/ray-{c['name']}.log", errors="replace") as f:
        rec["ray_log"] = f.read()[-2000:]
    rec["dmesg_oom"] = [line for line in subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
                        if "oom" in line.lower() or "killed process" in line.lower()][-20:]
    for name in names(c):
        podlib.kill(name)
    with open(f"{OUT}/{c['name']}.json", "w") as f:
        json.dump(rec, f)
    print(f"case {c['name']}: {len(rec['reads'])} reads, {len(rec['answers'])} answers, events "
          f"{[(e, round(t - rec['events'][0][1], 1)) for e, t in rec['events']]}", flush=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs("/var/lib/kitpod", exist_ok=True)
    only = set(sys.argv[1:])
    cases = [c for c in CONF["cases"] if not only or c["name"] in only]
    # Cases of one ``together`` key run at once, each in a child of its own
    # (its own network namespace, its own pod): the leaks wait on their
    # rates, not on the CPU, and one after another they took most of the
    # tier's time. The others run alone, in order.
    groups = []
    for c in cases:
        key = c.get("together")
        same = next((g for g in groups if key and g[0].get("together") == key), None)
        if same is None:
            groups.append([c])
        else:
            same.append(c)
    for group in groups:
        if len(group) == 1:
            run_case(group[0])
            continue
        children = []
        for c in group:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    run_case(c)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                os._exit(code)
            children.append((pid, c["name"]))
        for pid, name in children:
            _, status = os.waitpid(pid, 0)
            if status:
                print(f"case {name}: its child ended with status {status}", flush=True)


if __name__ == "__main__":
    main()
