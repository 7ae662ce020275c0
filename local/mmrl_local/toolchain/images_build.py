"""Build the images on this machine, with buildah and no daemon: the operator image (``make images``), the trainer
image's `cpu` target (``build_trainer_cpu``, `make test-trainer-image`: about 7 GB, not part of `make test`; its
default `gpu` target needs SkyRL's CUDA base image and SkyRL's source from GitHub, neither reachable here), and an
image of the compiled KubeRay operator (``build_kuberay``) for running KubeRay in the local cluster.

No registry of base images is reachable here, so the base that operator.Dockerfile names (python:3.12-slim-bookworm)
is replaced by one made with mmdebstrap: Debian bookworm with its python3 (3.11) in a venv at /opt/python, first on
PATH, so the Dockerfile's ``pip`` and ``python`` mean what they mean in the published base. It is passed with
``--from`` (the operator image) or as the ``CPU_BASE`` build argument (the trainer's `cpu` target, whose first stage
is not its base); the Dockerfiles keep the published bases as their defaults for users.

Builds run with chroot isolation (no runtime, no daemon) into buildah storage under ``$MMRL_CACHE/images``. Each
image is tagged with a key that hashes its Dockerfile, the base's recipe and every file its COPY instructions take
from the context (requirements.lock and the packages), so a second ``make images`` finds the tag and does nothing,
and a change in a package rebuilds from buildah's layer cache (the pip layer stays). The storage driver is overlay
where the kernel mounts it: on a quiet machine here it built the operator image in 17 s into 327 MB, where vfs took
69 s and 1.9 GB (vfs copies every layer whole); vfs is the fallback.

The host's CA bundle and pip configuration are bind-mounted into each RUN (``-v``), never copied: behind a
TLS-intercepting proxy pip needs them, and the image must not carry them. buildah 1.28 leaves an empty file where a
mount point did not exist (/etc/pip.conf); tests/images checks that nothing of the host's is in it.

buildah, mmdebstrap and runc (which tests/images runs the image with) come from Debian's packages, installed with
apt-get when missing. Building needs root (mmdebstrap's root mode, buildah's rootful storage).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from mmrl_local.toolchain import build

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_DOCKERFILE = ROOT / "docker" / "operator.Dockerfile"
# Bump when the build recipe below changes what lands in an image.
RECIPE = "1"
TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "runc": "runc"}
# Debian's python3 in a venv first on PATH: `pip` and `python` as in the python:*-slim images. minbase is apt and
# the Essential set (passwd's groupadd/useradd included). The merged-usr hook sets up merged /usr itself, without
# the usrmerge package and the perl it pulls in; docs, man pages and locales are left out as Debian's slim images
# do, copyright files kept: 153 MB instead of 248 MB. dpkg skips its fsyncs, as in Docker's Debian images (the
# option stays in /etc/dpkg/dpkg.cfg.d, like the exclusions).
BASE_SUITE = "bookworm"
BASE_VENV = "/opt/python"
BASE_MMDEBSTRAP_ARGS = (
    "--variant=minbase",
    "--include=python3,python3-venv,ca-certificates",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=force-unsafe-io",
    f'--customize-hook=chroot "$1" python3 -m venv {BASE_VENV}',
)
BASE_PATH = f"{BASE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What .dockerignore keeps out of the context inside the copied packages.
IGNORED_PARTS = ("__pycache__",)
IGNORED_SUFFIXES = (".pyc", ".egg-info")
# Where the host keeps what pip needs behind an intercepting proxy, and where the build sees it: the Debian path of
# the CA bundle exists in every Debian-based image, so mounting over it leaves nothing behind.
CA_BUNDLE_TARGET = "/etc/ssl/certs/ca-certificates.crt"
PIP_CONFIG_TARGET = "/etc/pip.conf"
HOST_CA_BUNDLE = CA_BUNDLE_TARGET
HOST_PIP_CONFIG = PIP_CONFIG_TARGET


class ImageBuildError(RuntimeError):
    """An image cannot be built here; the message says what is missing."""


@dataclasses.dataclass(frozen=True)
class Storage:
    """One buildah storage: its root, run root and driver, as global options of every buildah command."""

    root: Path
    runroot: Path
    driver: str

    def cmd(self, *args: str) -> list[str]:
        options = ["--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", self.driver]
        return ["buildah", *options, *args]


def images_dir() -> Path:
    return build.cache_root() / "images"


def _run(cmd: list[str], log=None, **kwargs) -> subprocess.CompletedProcess:
    if log is not None:
        print(f">> {shlex.join(cmd)}", file=log, flush=True)
        return subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, text=True, **kwargs)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)


def ensure_tools() -> None:
    """Install buildah, mmdebstrap and runc from Debian's packages when one is missing (as `make test` installs
    what it needs): about 20 s on a fresh bookworm machine."""
    missing = [pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageBuildError(
            f"{', '.join(missing)} missing: install them from Debian's packages as root "
            f"(apt-get install --no-install-recommends {' '.join(missing)})"
        )
    print(f">> installing {', '.join(missing)} from Debian's packages", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *missing]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"{shlex.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def storage() -> Storage:
    """overlay when this kernel mounts it for buildah, else vfs (MMRL_IMAGE_STORAGE_DRIVER picks one). Each driver
    has its own root: containers/storage refuses to open a root with another driver."""
    forced = os.environ.get("MMRL_IMAGE_STORAGE_DRIVER")
    for driver in [forced] if forced else ["overlay", "vfs"]:
        candidate = Storage(images_dir() / f"storage-{driver}", images_dir() / f"run-{driver}", driver)
        probe = subprocess.run(candidate.cmd("images", "--quiet"), capture_output=True, text=True)
        if probe.returncode == 0:
            return candidate
        if forced:
            raise ImageBuildError(f"buildah storage driver {driver}: {probe.stderr.strip()}")
    raise ImageBuildError(f"buildah cannot open storage with overlay or vfs: {probe.stderr.strip()}")


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def base_key() -> str:
    return _digest(RECIPE.encode(), BASE_SUITE.encode(), *(a.encode() for a in BASE_MMDEBSTRAP_ARGS))[:12]


def copy_sources(dockerfile_text: str) -> list[str]:
    """The context paths a Dockerfile's COPY and ADD instructions take (not those from other stages or URLs)."""
    sources: list[str] = []
    joined = ""
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if not joined and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        joined += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        words, joined = joined.split(), ""
        if words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from=") for w in words[1:]):
            continue
        sources += [s for s in args[:-1] if "://" not in s and not s.startswith("git@")]
    return sources


def _context_files(context: Path, source: str) -> list[Path]:
    path = context / source
    if path.is_file():
        return [path]
    files = []
    for item in sorted(path.rglob("*")):
        relative = item.relative_to(context)
        if not item.is_file() or any(p in IGNORED_PARTS or p.endswith(IGNORED_SUFFIXES) for p in relative.parts):
            continue
        files.append(item)
    if not files:
        raise ImageBuildError(f"{source}: the Dockerfile copies it, but the build context has no such files")
    return files


def image_key(dockerfile: Path, context: Path = ROOT) -> str:
    """Hash of the Dockerfile, the base recipe and every context file the Dockerfile copies."""
    text = dockerfile.read_text()
    parts = [RECIPE.encode(), base_key().encode(), text.encode()]
    for source in copy_sources(text):
        for path in _context_files(context, source):
            parts += [str(path.relative_to(context)).encode(), path.read_bytes()]
    return _digest(*parts)[:12]


def build_mounts(env: Mapping[str, str] = os.environ) -> list[str]:
    """``-v`` options that show the build the host's CA bundle and pip configuration, read-only: the files pip is
    told to use (PIP_CERT, SSL_CERT_FILE, PIP_CONFIG_FILE), else Debian's default places."""
    mounts: list[str] = []
    bundles = (env.get("PIP_CERT"), env.get("SSL_CERT_FILE"), HOST_CA_BUNDLE)
    bundle = next((p for p in bundles if p and Path(p).is_file()), None)
    if bundle is not None:
        mounts += ["-v", f"{bundle}:{CA_BUNDLE_TARGET}:ro"]
    pip_config = next((p for p in (env.get("PIP_CONFIG_FILE"), HOST_PIP_CONFIG) if p and Path(p).is_file()), None)
    if pip_config is not None:
        mounts += ["-v", f"{pip_config}:{PIP_CONFIG_TARGET}:ro"]
    return mounts


def image_exists(store: Storage, name: str) -> bool:
    return subprocess.run(store.cmd("inspect", "--type", "image", name), capture_output=True).returncode == 0


def inspect(store: Storage, name: str) -> dict:
    return json.loads(_run(store.cmd("inspect", "--type", "image", name)).stdout)


def base_name() -> str:
    return f"localhost/mmrl-python:3.11-{BASE_SUITE}-{base_key()}"


def ensure_base(store: Storage, log) -> str:
    """The Debian python base image, built with mmdebstrap when the storage lacks it (20 to 30 s on 2 idle cores)."""
    name = base_name()
    if image_exists(store, name):
        return name
    with tempfile.TemporaryDirectory(dir=images_dir()) as tmp:
        tarball = Path(tmp) / "base.tar"
        _run(["mmdebstrap", *BASE_MMDEBSTRAP_ARGS, BASE_SUITE, str(tarball)], log)
        container = _run(store.cmd("from", "scratch")).stdout.strip()
        try:
            _run(store.cmd("add", container, str(tarball), "/"), log)
            _run(store.cmd("config", "--env", f"PATH={BASE_PATH}", "--cmd", "python", container), log)
            _run(store.cmd("commit", "--quiet", "--format", "docker", container, name), log)
        finally:
            _run(store.cmd("rm", container))
    return name


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """What ``make images`` built, as docs/benchmarks.md reports it."""

    image: str
    digest: str
    base: str
    size_bytes: int
    layers: int
    storage_driver: str
    build_seconds: float  # of the build that made it, base included
    base_seconds: float  # of that build's making the base; 0 when it found the base built
    reused: bool  # True when this call found it built

    @property
    def size_mb(self) -> float:
        return round(self.size_bytes / 1e6, 1)


def _measure(store: Storage, name: str, base: str, seconds: float, base_seconds: float) -> ImageFacts:
    info = inspect(store, name)
    manifest = json.loads(info["Manifest"])
    return ImageFacts(
        image=name,
        digest=info["FromImageDigest"],
        base=base,
        size_bytes=sum(layer["size"] for layer in manifest["layers"]),
        layers=len(manifest["layers"]),
        storage_driver=store.driver,
        build_seconds=seconds,
        base_seconds=base_seconds,
        reused=False,
    )


def _recorded(path: Path) -> ImageFacts | None:
    """The facts a build wrote beside its image; None when missing or written by another version of this module."""
    try:
        return ImageFacts(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _drop_older(store: Storage, repository: str, keep: str) -> None:
    """Earlier keys' tags and facts, as far as buildah lets go of them (an image that later layers were built on
    stays): layers the new image uses stay in the cache."""
    listed = _run(store.cmd("images", "--json")).stdout
    for image in json.loads(listed or "[]"):
        stale = [n for n in image.get("names") or [] if n.startswith(f"{repository}:") and n != keep]
        if stale:
            subprocess.run(store.cmd("rmi", *stale), capture_output=True)
    prefix = repository.rsplit("/", 1)[-1]
    for old in images_dir().glob(f"{prefix}-*.json"):
        if old.name != f"{prefix}-{keep.rsplit(':', 1)[-1]}.json":
            old.unlink(missing_ok=True)


def _build(
    repository: str, key: str, bud_args: list[str], *, base_needed: bool, verbose: bool, base_arg: str | None = None
) -> ImageFacts:
    """Build (or reuse) ``repository:key`` with ``buildah bud`` and ``bud_args`` (the Containerfile and context),
    on the Debian base when ``base_needed``: passed with ``--from`` (it replaces the first FROM), or as the build
    argument ``base_arg`` when given; records the facts beside the image."""
    ensure_tools()
    images_dir().mkdir(parents=True, exist_ok=True)
    store = storage()
    name = f"{repository}:{key}"
    prefix = repository.rsplit("/", 1)[-1]
    facts_path = images_dir() / f"{prefix}-{key}.json"
    with open(images_dir() / "build.lock", "w") as lock:
        # Parallel test workers and a `make images` beside them must not build into one storage at once.
        fcntl.flock(lock, fcntl.LOCK_EX)
        recorded = _recorded(facts_path)
        if recorded is not None and image_exists(store, name):
            return dataclasses.replace(recorded, reused=True)
        log_path = images_dir() / f"{prefix}.log"
        started = time.monotonic()
        with open(log_path, "w") as log:
            if verbose:
                print(f">> building {name} (log: {log_path})", file=sys.stderr)
            try:
                base = ensure_base(store, log) if base_needed else ""
                base_seconds = round(time.monotonic() - started, 1)
                from_base = ([f"--build-arg={base_arg}={base}"] if base_arg else ["--from", base]) if base else []
                cmd = store.cmd(
                    "bud",
                    "--isolation",
                    "chroot",
                    "--layers",
                    "--pull=never",
                    "--format",
                    "docker",
                    *from_base,
                    *build_mounts(),
                    "-t",
                    name,
                    *bud_args,
                )
                _run(cmd, log)
            except subprocess.CalledProcessError as err:
                raise ImageBuildError(f"building {name} failed; see {log_path}") from err
        facts = _measure(store, name, base, round(time.monotonic() - started, 1), base_seconds)
        facts_path.write_text(json.dumps(dataclasses.asdict(facts), indent=2) + "\n")
        _drop_older(store, repository, keep=name)
        if base:
            _drop_older(store, base.rsplit(":", 1)[0], keep=base)
    if verbose:
        print(f">> built {name} in {facts.build_seconds} s", file=sys.stderr)
    return facts


def build_operator(verbose: bool = True) -> ImageFacts:
    """The operator image from docker/operator.Dockerfile on the local base, built or reused."""
    key = image_key(OPERATOR_DOCKERFILE)
    bud = ["-f", str(OPERATOR_DOCKERFILE), str(ROOT)]
    return _build("localhost/mmrl-operator", key, bud, base_needed=True, verbose=verbose)


TRAINER_DOCKERFILE = ROOT / "docker" / "trainer.Dockerfile"


def build_trainer_cpu(verbose: bool = True) -> ImageFacts:
    """The trainer image's `cpu` target (the local backend's stack from requirements.lock, about 7 GB: PyPI's torch
    is the CUDA build) on the local base, passed as its CPU_BASE build argument. Not part of `make images`."""
    key = image_key(TRAINER_DOCKERFILE)
    bud = ["--target", "cpu", "-f", str(TRAINER_DOCKERFILE), str(ROOT)]
    return _build("localhost/mmrl-trainer-cpu", key, bud, base_needed=True, verbose=verbose, base_arg="CPU_BASE")


# KubeRay's and Kueue's own images are built by their projects on a distroless static base, user 65532, the binary
# at /manager. Here the same static binaries (CGO off) go into an image FROM scratch with that user.
CONTROLLER_CONTAINERFILE = """FROM scratch
COPY manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
"""


def build_controller(repository: str, binary: Path, verbose: bool = True) -> ImageFacts:
    """An image of the controller binary ``binary`` (its cache directory names its build key) as ``repository``."""
    name = repository.rsplit("/", 1)[-1]
    key = _digest(RECIPE.encode(), CONTROLLER_CONTAINERFILE.encode(), binary.parent.name.encode(), name.encode())[:12]
    context = images_dir() / f"{name}-context-{key}"
    if not (context / "Containerfile").exists():
        tmp = Path(tempfile.mkdtemp(dir=images_dir()))
        shutil.copy2(binary, tmp / "manager")
        (tmp / "Containerfile").write_text(CONTROLLER_CONTAINERFILE)
        shutil.rmtree(context, ignore_errors=True)
        tmp.rename(context)
    bud = ["-f", str(context / "Containerfile"), str(context)]
    return _build(repository, key, bud, base_needed=False, verbose=verbose)


def build_kuberay(binary: Path, verbose: bool = True) -> ImageFacts:
    return build_controller("localhost/kuberay-operator", binary, verbose)


def build_kueue(binary: Path, verbose: bool = True) -> ImageFacts:
    return build_controller("localhost/kueue", binary, verbose)
