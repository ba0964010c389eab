"""Container images built here without a Docker engine and without a
registry: each Dockerfile of the project is carried out step by step
(FROM, WORKDIR, COPY, RUN, ENV, USER, ENTRYPOINT, CMD...) in a chroot, as
root, on a local base image, then packed as a one-layer image by the
kit's ``images/mkimage.py`` and imported into the kit's containerd.

The base: the kit's Debian bookworm Python image (``KL_PYTHON=1``: debootstrap
minbase + python3-minimal), given the rest of the standard library, venv
and ``python`` on PATH from Debian's packages, to stand for
``python:3.11.10-slim-bookworm`` (which cannot be pulled here). What
differs: Debian's Python is 3.11.2, installed under /usr, not 3.11.10
under /usr/local.

Built images are cached by the hash of everything they are made from (the
Dockerfile, the files it copies, the base, the build arguments): a second
run only imports them. Usage::

    python -m tests.realpods.images build --kubelet-home DIR [NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
KIT = ROOT.parent / "shared" / "realk8s"
CACHE = Path(os.environ.get("MEMORYGUARD_IMAGE_CACHE", Path.home() / ".cache" / "memoryguard" / "images"))
KIT_PYTHON = "localhost/realk8s/python:3.11-bookworm"
STANDS_FOR = "python:3.11.10-slim-bookworm"  # the base our Dockerfiles name
# What python:3.11-slim has and python3-minimal lacks.
SLIM_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
RUN_TIMEOUT_S = 1800
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
BUILD_ONLY_ENV = {"PIP_CERT": HOST_CA, "SSL_CERT_FILE": HOST_CA, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                  "PIP_DEFAULT_TIMEOUT": "180"}


class BuildError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Image:
    name: str  # the short name: sidecar, operator, ray
    dockerfile: Path
    ref: str  # what pods name: localhost/memoryguard/NAME:TAG
    build_args: tuple[tuple[str, str], ...] = ()


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def project_images() -> list[Image]:
    from importlib.metadata import version

    tag = version("memoryguard-kuberay-core")
    return [Image("sidecar", ROOT / "Dockerfile.sidecar", f"localhost/memoryguard/sidecar:{tag}"),
            Image("operator", ROOT / "Dockerfile.operator", f"localhost/memoryguard/operator:{tag}"),
            Image("ray", ROOT / "tests" / "realpods" / "Dockerfile.ray", f"localhost/memoryguard/ray:{ray_version()}",
                  (("RAY_VERSION", ray_version()),))]


def project_ref(name: str) -> str:
    return next(i.ref for i in project_images() if i.name == name)


def log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


# -- the Dockerfile, read ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Instruction:
    op: str
    arg: str


def parse(text: str) -> list[Instruction]:
    """Instructions with their continuation lines joined; comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        op, _, arg = full.partition(" ")
        out.append(Instruction(op.upper(), arg.strip()))
    return out


def _words(arg: str) -> list[str]:
    """An exec-form (JSON array) or a shell-form argument, as words."""
    if arg.startswith("["):
        return [str(w) for w in json.loads(arg)]
    return ["/bin/sh", "-c", arg]


def _expand(value: str, env: dict[str, str]) -> str:
    for k, v in sorted(env.items(), key=lambda kv: -len(kv[0])):
        value = value.replace("${" + k + "}", v).replace("$" + k, v)
    return value


def _env_pairs(arg: str, env: dict[str, str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    words = shlex.split(arg)
    if words and "=" not in words[0]:  # the legacy form: ENV KEY value
        return {words[0]: _expand(" ".join(words[1:]), env)}
    for w in words:
        k, _, v = w.partition("=")
        pairs[k] = _expand(v, {**env, **pairs})
    return pairs


# -- the build --------------------------------------------------------------------------
def _sha(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _tree_bytes(path: Path) -> Iterable[bytes]:
    if path.is_file():
        yield str(path.name).encode()
        yield path.read_bytes()
        return
    for f in sorted(path.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and ".egg-info" not in str(f) and "/build/" not in str(f):
            yield str(f.relative_to(path)).encode()
            yield f.read_bytes()


def _context_sources(instructions: Sequence[Instruction], context: Path) -> list[Path]:
    out = []
    for ins in instructions:
        if ins.op == "COPY" and not ins.arg.startswith("--from"):
            out.extend(context / s for s in shlex.split(ins.arg)[:-1])
    return out


def _chroot(rootfs: Path, argv: Sequence[str], env: dict[str, str], workdir: str, logf: Path) -> None:
    """Run ``argv`` inside ``rootfs`` in a mount namespace of its own (its
    /proc, /dev and /sys vanish with it: nothing is left mounted)."""
    shutil.copy("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")  # pip and apt reach the registries by name
    inner = " ".join(shlex.quote(a) for a in argv)
    # The build sees this machine's trust store (a TLS-inspecting egress has
    # its own CA there), as `docker build` sees the daemon's: mounted for the
    # step only, never part of the image; pip is pointed at it (its own
    # bundle would not know that CA).
    env = {**env, **BUILD_ONLY_ENV}
    script = (f"set -e; R={shlex.quote(str(rootfs))}; mkdir -p $R/proc $R/dev $R/sys; "
              "mount -t proc proc $R/proc; mount --rbind /dev $R/dev; mount --rbind /sys $R/sys; "
              "if [ -d $R/etc/ssl/certs ]; then mount --bind /etc/ssl/certs $R/etc/ssl/certs; fi; "
              f"exec chroot $R /usr/bin/env -i {' '.join(shlex.quote(f'{k}={v}') for k, v in env.items())} "
              f"/bin/sh -c {shlex.quote(f'mkdir -p {workdir} && cd {workdir} && exec {inner}')}")
    with open(logf, "ab") as out:
        out.write(f"\n$ {inner}\n".encode())
        out.flush()
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "/bin/sh", "-c", script],
                              stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        tail = logf.read_text(errors="replace")[-3000:]
        raise BuildError(f"RUN {inner[:200]} failed (exit {done.returncode}); the end of {logf}:\n{tail}")


def _copy_in(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


def _inside(rootfs: Path, path: str, workdir: str) -> Path:
    p = path if path.startswith("/") else os.path.join(workdir, path)
    return rootfs / p.lstrip("/")


def kit_base(kubelet_home: Path) -> Path:
    """The kit's Python image, unpacked once into the cache."""
    tar = kubelet_home / "images" / "python.tar"
    if not tar.exists():
        raise BuildError(f"{tar} is absent: start the kit's kubelet with KL_PYTHON=1 (it builds the Python image)")
    with tarfile.open(tar) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        layer_name = manifest[0]["Layers"][0]  # "<sha256 of the layer>/layer.tar": the key, whatever the copy
        rootfs = CACHE / f"kit-python-{layer_name[:12]}"
        if not (rootfs / "usr" / "bin" / "python3").exists():
            shutil.rmtree(rootfs, ignore_errors=True)
            rootfs.mkdir(parents=True)
            with tarfile.open(fileobj=outer.extractfile(layer_name)) as inner:  # type: ignore[arg-type]
                inner.extractall(rootfs, filter="fully_trusted")
    return rootfs


def slim_base(kubelet_home: Path, logf: Path) -> Path:
    """The stand-in for python:3.11-slim: the kit's image plus SLIM_PACKAGES."""
    kit = kit_base(kubelet_home)
    rootfs = CACHE / f"slim-{_sha([kit.name.encode(), *(p.encode() for p in SLIM_PACKAGES)])[:12]}"
    if (rootfs / ".done").exists():
        return rootfs
    for older in CACHE.glob("slim-*"):  # one base is kept
        shutil.rmtree(older, ignore_errors=True)
    t0 = time.monotonic()
    log(f"making the base ({STANDS_FOR} stands in as {KIT_PYTHON} + {', '.join(SLIM_PACKAGES)})")
    subprocess.run(["cp", "-a", str(kit), str(rootfs)], check=True)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    _chroot(rootfs, ["apt-get", "update", "-qq"], env, "/", logf)
    _chroot(rootfs, ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *SLIM_PACKAGES], env, "/", logf)
    _chroot(rootfs, ["apt-get", "clean"], env, "/", logf)
    (rootfs / ".done").write_text(f"{time.monotonic() - t0:.1f}\n")
    log(f"base ready in {time.monotonic() - t0:.0f} s")
    return rootfs


def build(image: Image, *, kubelet_home: Path, workdir: Path) -> Path:
    """The image's tarball (built, or from the cache)."""
    text = image.dockerfile.read_text()
    instructions = parse(text)
    logf = workdir / f"build-{image.name}.log"
    base = slim_base(kubelet_home, logf)
    context = ROOT
    key = _sha([text.encode(), base.name.encode(), json.dumps(image.build_args).encode(), image.ref.encode(),
                *(b for src in _context_sources(instructions, context) for b in _tree_bytes(src))])[:16]
    out = CACHE / f"{image.name}-{key}.tar"
    if out.exists():
        log(f"{image.ref}: cached ({out.name})")
        return out
    t0 = time.monotonic()
    log(f"{image.ref}: building from {image.dockerfile.name} (log {logf})")
    stages: dict[str, Path] = {}
    scratch = CACHE / f"work-{image.name}-{key}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    rootfs: Path | None = None
    env: dict[str, str] = {}
    config: dict[str, object] = {}
    args = dict(image.build_args)
    workdir_in = "/"
    try:
        for ins in instructions:
            arg = _expand(ins.arg, {**args, **env})
            if ins.op == "ARG":
                name, _, default = ins.arg.partition("=")
                args.setdefault(name, default)
            elif ins.op == "FROM":
                words = arg.split()
                if words[0] != STANDS_FOR:
                    raise BuildError(f"{image.dockerfile.name}: FROM {words[0]}: only {STANDS_FOR} is known here")
                rootfs = scratch / f"stage-{len(stages)}"
                subprocess.run(["cp", "-a", str(base), str(rootfs)], check=True)
                if len(words) == 3 and words[1].upper() == "AS":
                    stages[words[2]] = rootfs
                env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
                config, workdir_in = {}, "/"
            elif rootfs is None:
                raise BuildError(f"{image.dockerfile.name}: {ins.op} before FROM")
            elif ins.op == "WORKDIR":
                workdir_in = arg if arg.startswith("/") else os.path.join(workdir_in, arg)
                _inside(rootfs, workdir_in, "/").mkdir(parents=True, exist_ok=True)
            elif ins.op == "COPY":
                words = shlex.split(arg)
                src_root, rest = context, words
                if words[0].startswith("--from="):
                    src_root, rest = stages[words[0].split("=", 1)[1]], words[1:]
                *srcs, dest = rest
                for s in srcs:
                    src = src_root / s.lstrip("/")
                    target = _inside(rootfs, dest, workdir_in)
                    # Docker's rule: a directory's contents go into the destination; a file
                    # into it when it ends in "/" (or several are copied), else it is the file.
                    _copy_in(src, target / src.name if src.is_file() and (dest.endswith("/") or len(srcs) > 1)
                             else target)
            elif ins.op == "RUN":
                _chroot(rootfs, _words(arg), env, workdir_in, logf)
            elif ins.op == "ENV":
                env.update(_env_pairs(ins.arg, env))
            elif ins.op == "USER":
                config["User"] = arg
            elif ins.op in ("ENTRYPOINT", "CMD"):
                config["Entrypoint" if ins.op == "ENTRYPOINT" else "Cmd"] = _words(arg)
            elif ins.op == "EXPOSE":
                config.setdefault("ExposedPorts", {})[f"{arg.split('/')[0]}/tcp"] = {}  # type: ignore[index]
            elif ins.op == "LABEL":
                config.setdefault("Labels", {}).update(_env_pairs(arg, {}))  # type: ignore[attr-defined]
            elif ins.op == "HEALTHCHECK":
                pass  # Docker's own; Kubernetes ignores it (probes are in the pod spec)
            else:
                raise BuildError(f"{image.dockerfile.name}: {ins.op} is not carried out here")
        assert rootfs is not None
        config["Env"] = [f"{k}={v}" for k, v in env.items()]
        config["WorkingDir"] = workdir_in
        for junk in ("etc/resolv.conf",):
            (rootfs / junk).write_text("")
        subprocess.run([sys.executable, str(KIT / "images" / "mkimage.py"), str(rootfs), str(out) + ".part",
                        image.ref, json.dumps(config)], check=True, stdout=subprocess.DEVNULL)
        os.replace(str(out) + ".part", out)
        for older in CACHE.glob(f"{image.name}-*.tar"):  # one version of each image is kept
            if older != out:
                older.unlink()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"{image.ref}: built in {time.monotonic() - t0:.0f} s ({out.stat().st_size / 2**20:.0f} MiB)")
    return out


def import_into(kubelet_home: Path, tarball: Path) -> None:
    """Into the kit's containerd (namespace k8s.io, where the kubelet looks)."""
    ctr = shutil.which("ctr") or "/usr/bin/ctr"
    sock = kubelet_home / "containerd" / "containerd.sock"
    done = subprocess.run([ctr, "-a", str(sock), "-n", "k8s.io", "images", "import", str(tarball)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise BuildError(f"ctr images import {tarball} failed: {done.stderr[-2000:]}")


def ensure(names: Sequence[str], *, kubelet_home: Path, workdir: Path) -> dict[str, str]:
    """Build (or take from the cache) and import; returns name -> image ref."""
    refs: dict[str, str] = {}
    for image in project_images():
        if names and image.name not in names:
            continue
        t0 = time.monotonic()
        tar = build(image, kubelet_home=kubelet_home, workdir=workdir)
        import_into(kubelet_home, tar)
        log(f"{image.ref}: imported ({time.monotonic() - t0:.0f} s with its build)")
        refs[image.name] = image.ref
    return refs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.realpods.images",
                                description="Build the project's images here (no Docker engine, no registry) "
                                            "and import them into the kit's containerd.")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or take from the cache) and import")
    b.add_argument("names", nargs="*", help="sidecar, operator, ray (default: all)")
    b.add_argument("--kubelet-home", type=Path, required=True, help="the kit's KUBELET_HOME (kubelet-up.sh)")
    b.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")), help="build logs here")
    a = p.parse_args(argv)
    try:
        refs = ensure(a.names, kubelet_home=a.kubelet_home, workdir=a.workdir)
    except BuildError as e:
        print(f"images: {e}", file=sys.stderr)
        return 1
    for name, ref in refs.items():
        print(f"{name}\t{ref}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
