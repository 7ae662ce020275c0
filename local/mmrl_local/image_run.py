"""Start one process from an image that ``make images`` built, the way a container runtime starts it: the image's
entrypoint, user, working directory and env applied (the first two overridable as a pod's ``command`` and ``args``
override them), on the image's root filesystem, through runc, the OCI reference runtime from Debian's packages.

A bare chroot would not do: the image's config is the half of the image that a chroot forgets (user 10001, PYTHONPATH,
the entrypoint), and ``buildah run`` applies the user, env and working directory but never the entrypoint. crun, the
other runtime Debian ships, refuses this machine's hybrid cgroup layout (a controller on the v2 hierarchy beside the
v1 ones: "cgroups in hybrid mode not supported"); runc runs there.

The process runs as the chart's pod security runs the operator (restricted): a read-only root filesystem, no
capabilities, no privilege escalation; in new pid, mount, ipc, uts and network namespaces (loopback only).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mmrl_local import images_build

_ids = itertools.count()


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # from runc's start to the process's exit


def image_config(store: images_build.Storage, image: str) -> dict:
    """The image's runtime config (User, Env, Entrypoint, Cmd, WorkingDir)."""
    return images_build.inspect(store, image)["OCIv1"]["config"]


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


def _id_of(name: str, table: Path) -> int:
    for line in table.read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2])
    raise ValueError(f"{name}: not in the image's {table.name}")


def resolve_user(user: str, root: Path) -> tuple[int, int]:
    """uid and gid of an image's ``User`` ("uid", "uid:gid", or names looked up in the image's passwd and group);
    an empty User is root, as runtimes read it."""
    name, _, group = (user or "0").partition(":")
    uid = int(name) if name.isdigit() else _id_of(name, root / "etc" / "passwd")
    if group:
        return uid, int(group) if group.isdigit() else _id_of(group, root / "etc" / "group")
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[2] == str(uid):
            return uid, int(fields[3])
    return uid, 0


def process_args(config: dict, command: list[str] | None, args: list[str] | None) -> list[str]:
    """Kubernetes' rule: ``command`` replaces the entrypoint and drops the image's Cmd; ``args`` replaces Cmd."""
    entrypoint = command if command is not None else config.get("Entrypoint") or []
    if args is None:
        args = (config.get("Cmd") or []) if command is None else []
    argv = [*entrypoint, *args]
    if not argv:
        raise ValueError("the image has no entrypoint or cmd, and no command was given")
    return argv


def runtime_spec(template: dict, config: dict, root: Path, argv: list[str]) -> dict:
    """runc's default spec with the image's config applied and the chart's restricted pod security."""
    spec = json.loads(json.dumps(template))
    uid, gid = resolve_user(config.get("User", ""), root)
    process = spec["process"]
    process.update(
        terminal=False,
        user={"uid": uid, "gid": gid},
        args=argv,
        env=list(config.get("Env") or []),
        cwd=config.get("WorkingDir") or "/",
        noNewPrivileges=True,
    )
    process["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
    spec["root"] = {"path": str(root), "readonly": True}
    spec["hostname"] = "mmrl-image"
    return spec


def run(
    image: str,
    command: list[str] | None = None,
    args: list[str] | None = None,
    timeout: float = 120.0,
) -> Finished:
    """Run the image's process to its end and return what it printed."""
    store = images_build.storage()
    with rootfs(store, image) as root, tempfile.TemporaryDirectory(prefix="mmrl-bundle-") as bundle:
        subprocess.run(["runc", "spec", "--bundle", bundle], check=True, capture_output=True)
        template = json.loads((Path(bundle) / "config.json").read_text())
        config = image_config(store, image)
        spec = runtime_spec(template, config, root, process_args(config, command, args))
        (Path(bundle) / "config.json").write_text(json.dumps(spec))
        container_id = f"mmrl-{os.getpid()}-{next(_ids)}"
        started = time.monotonic()
        done = subprocess.run(
            ["runc", "run", "--bundle", bundle, container_id],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Finished(done.returncode, done.stdout, done.stderr, round(time.monotonic() - started, 2))
