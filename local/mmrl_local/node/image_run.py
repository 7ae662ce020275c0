"""Start processes from an image that ``make images`` built, the way a container runtime starts them: on the image's
own root filesystem, with its entrypoint, user, working directory and env (a pod's ``command``, ``args``,
``workingDir``, env and securityContext over them, by ``oci_spec``), through runc, the OCI reference runtime from
Debian's packages.

A bare chroot would not do: the image's config is the half of the image that a chroot forgets (user 10001, PYTHONPATH,
the entrypoint), and ``buildah run`` applies the user, env and working directory but never the entrypoint. crun, the
other runtime Debian ships, refuses this machine's hybrid cgroup layout (a controller on the v2 hierarchy beside the
v1 ones: "cgroups in hybrid mode not supported"); runc runs there.

``ImageContainer`` is one container's life: a buildah working container gives it a fresh writable layer on the image
(each start gets a new one, as a restarted container does), runc runs it in the foreground (runc passes the signals
it gets to the container's PID 1), and ``remove()`` kills what is left and drops the working container. ``run()``
runs one process to its end under the chart's restricted pod security (tests/images). Every container's env ends
with the run's mark (``marked``), as every other process a run starts inherits it: ``leftovers`` finds the containers
a run left behind, and only that run's.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmrl_local.common import procs
from mmrl_local.node import oci_spec
from mmrl_local.node.mountns import Mount
from mmrl_local.toolchain import images_build

_ids = itertools.count()
RUNC_ROOT = Path("/run/mmrl-runc")  # runc's state for the containers local/ starts, apart from any other runc user
# The chart's container securityContext (charts/mmrl-operator/values.yaml), for one-off runs.
RESTRICTED = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # from runc's start to the process's exit


def image_config(store: images_build.Storage, image: str) -> dict:
    """The image's runtime config (User, Env, Entrypoint, Cmd, WorkingDir)."""
    return images_build.inspect(store, image)["OCIv1"]["config"]


def image_env(config: Mapping[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)


@contextlib.contextmanager
def rootfs(store: images_build.Storage, image: str) -> Iterator[Path]:
    """The image's root filesystem, mounted from a throwaway working container (removed on exit)."""
    container = subprocess.run(
        store.cmd("from", "--pull=never", image), check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        mounted = subprocess.run(store.cmd("mount", container), check=True, capture_output=True, text=True)
        yield Path(mounted.stdout.strip())
    finally:
        subprocess.run(store.cmd("rm", container), capture_output=True)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _runc(*args: str) -> list[str]:
    """A runc command line on local/'s own state directory."""
    return ["runc", "--root", str(RUNC_ROOT), *args]


def marked(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with this run's mark (``procs.RUN_MARK``, when set) last in its process's env. A container's env is
    its image's and its pod's, not the environment of the process that starts it, so without this the run's mark
    would not reach it and ``leftovers`` could not tell this run's containers from another run's. A mark the image
    or the pod set is replaced: a container belongs to the run that starts it."""
    prefix = f"{procs.RUN_MARK}="
    env = [item for item in spec["process"]["env"] if not item.startswith(prefix)]
    mark = os.environ.get(procs.RUN_MARK)
    if mark:
        env.append(prefix + mark)
    return {**spec, "process": {**spec["process"], "env": env}}


@functools.cache
def remove_stale(store: images_build.Storage) -> list[str]:
    """Drop the working containers (and runc state) of processes that are gone: a run killed before it could remove
    them. Their names end in ``-<pid>-<n>`` (``ImageContainer``). Once per process and storage."""
    listed = subprocess.run(store.cmd("containers", "--json"), capture_output=True, text=True)
    removed = []
    # buildah prints `null` when there are none
    for entry in (json.loads(listed.stdout or "null") or []) if listed.returncode == 0 else []:
        name = entry.get("containername") or ""
        parts = name.rsplit("-", 2)
        if not name.startswith("mmrl-") or len(parts) != 3 or not parts[1].isdigit() or procs.pid_alive(int(parts[1])):
            continue
        subprocess.run(_runc("delete", "--force", name), capture_output=True)
        subprocess.run(store.cmd("rm", name), capture_output=True)
        removed.append(name)
    return removed


class ImageContainer:
    """One container of a pod, started from a built image. Not thread-safe: one owner (the pod's worker)."""

    def __init__(
        self, store: images_build.Storage, image: str, bundle: Path, name: str, owner: int | None = None
    ) -> None:
        """``owner`` is the process whose exit makes the container stale (``remove_stale``): this one by default."""
        remove_stale(store)
        self.store, self.image, self.bundle, self.name = store, image, bundle, name
        self.config = image_config(store, image)
        self.env = image_env(self.config)
        self.container_id = f"{name}-{owner or os.getpid()}-{next(_ids)}"
        self._working: str | None = None

    def prepare(self) -> Path:
        """A fresh working container on the image; returns its mounted root filesystem."""
        self._drop_working()
        self._working = subprocess.run(
            self.store.cmd("from", "--pull=never", "--name", self.container_id, self.image),
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        mounted = subprocess.run(self.store.cmd("mount", self._working), check=True, capture_output=True, text=True)
        return Path(mounted.stdout.strip())

    def identity(self, root: Path, security: Mapping[str, Any]) -> oci_spec.Identity:
        return oci_spec.identity(
            self.config.get("User", ""), security, _read(root / "etc" / "passwd"), _read(root / "etc" / "group")
        )

    def one_off_spec(
        self, root: Path, command: list[str] | None, args: list[str] | None, mounts: list[Mount]
    ) -> dict[str, Any]:
        """The spec of a process run on its own (not a pod's container): the image's config under ``command`` and
        ``args``, the chart's restricted securityContext, a network namespace with loopback only."""
        return oci_spec.runtime_spec(
            root=root,
            argv=oci_spec.process_args(self.config, command, args),
            env=self.env,
            cwd=self.config.get("WorkingDir") or "/",
            who=self.identity(root, RESTRICTED),
            security=RESTRICTED,
            mounts=mounts,
            hostname="mmrl-image",
            netns=None,
        )

    def run_argv(self, spec: dict[str, Any]) -> list[str]:
        """Write ``spec`` as the bundle's config.json, marked as this run's (``marked``); the command line that runs
        it in the foreground."""
        self.bundle.mkdir(parents=True, exist_ok=True)
        (self.bundle / "config.json").write_text(json.dumps(marked(spec)))
        RUNC_ROOT.mkdir(parents=True, exist_ok=True)
        return _runc("run", "--bundle", str(self.bundle), self.container_id)

    def spawn(self, spec: dict[str, Any], log: Path):
        """Start runc in the foreground on ``spec``; its process is this container's."""
        return procs.spawn(self.run_argv(spec), log)

    def pid(self) -> int | None:
        """The container's PID 1 as this machine sees it."""
        state = subprocess.run(_runc("state", self.container_id), capture_output=True, text=True)
        if state.returncode != 0:
            return None
        pid = json.loads(state.stdout).get("pid") or 0
        return pid or None

    def stop_runtime(self) -> None:
        """Kill whatever the container still runs and forget it in runc."""
        _stop_runtime(self.container_id)

    def _drop_working(self) -> None:
        if self._working is not None:
            subprocess.run(self.store.cmd("rm", self._working), capture_output=True)
            self._working = None

    def remove(self) -> None:
        self.stop_runtime()
        self._drop_working()


def _stop_runtime(container_id: str) -> None:
    subprocess.run(_runc("kill", container_id, "KILL"), capture_output=True)
    subprocess.run(_runc("delete", "--force", container_id), capture_output=True)


def remove_container(store: images_build.Storage, container_id: str) -> None:
    """Kill and remove the container ``container_id`` (an ``ImageContainer``'s) that its owner did not remove."""
    _stop_runtime(container_id)
    subprocess.run(store.cmd("rm", container_id), capture_output=True)


def run(
    image: str,
    command: list[str] | None = None,
    args: list[str] | None = None,
    timeout: float = 120.0,
    mounts: list[Mount] | None = None,
) -> Finished:
    """Run the image's process to its end under the chart's restricted securityContext, in a network namespace
    with loopback only, and return what it printed."""
    store = images_build.storage()
    with tempfile.TemporaryDirectory(prefix="mmrl-bundle-") as bundle:
        container = ImageContainer(store, image, Path(bundle), "mmrl-run")
        try:
            spec = container.one_off_spec(container.prepare(), command, args, list(mounts or []))
            argv = container.run_argv(spec)
            started = time.monotonic()
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
            return Finished(done.returncode, done.stdout, done.stderr, round(time.monotonic() - started, 2))
        finally:
            container.remove()
