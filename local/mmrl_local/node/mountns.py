"""``python -m mmrl_local.node.mountns SPEC.json``: exec a command with a pod's filesystem view, without containers.

The local control plane has fake kubelets, so nothing mounts a pod's volumes. This launcher does what a container
runtime would for one process: in a private mount namespace it builds a root on a tmpfs that shows the host's
filesystem (the "image": this machine's Python, venvs and checkout), mounts each volume at its ``mountPath`` on
top (ConfigMap files, a PersistentVolume's hostPath, the ServiceAccount token, memory-backed emptyDirs), chroots
into it and execs the command. The process then sees exactly the paths its pod spec promises (``/etc/mmrl``,
``/ckpt``, ``/var/run/secrets/...``), so product code runs unmodified. Host directories that must hold a mount
point (``/etc`` for ``/etc/mmrl``) are shadowed, entry by entry, so the host itself is never written.

With ``Spec.netns`` (a namespace pinned by ``podnet``) the process first joins the pod's network namespace, and its
``/sys`` is a sysfs of that namespace (``/sys/class/net`` lists the pod's interfaces, as in a container), with the
host's cgroup tree bound back in. ``Spec.hostname`` gives it a UTS namespace with that hostname, as a pod's
containers have. ``Spec.own_pids`` gives it a PID namespace with a fresh ``/proc``: the command is PID 1 there, and
when it exits the kernel kills everything it left behind (daemons in their own sessions included), as a container
runtime's does; the launcher waits for it, passes on SIGTERM/SIGINT/SIGHUP and exits with its status.

Needs CAP_SYS_ADMIN (root) or unprivileged user namespaces; see ``available()``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWPID = 0x00020000, 0x04000000, 0x20000000
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


@dataclass(frozen=True)
class Mount:
    target: str  # absolute path inside the pod
    source: str | None = None  # host path to bind; None with tmpfs=True
    read_only: bool = False
    tmpfs: bool = False


@dataclass
class Spec:
    root: str  # an empty host directory to build the pod's root in
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount] = field(default_factory=list)
    cwd: str = "/"
    netns: str | None = None  # a network namespace to join (its pinned path), or None for the host's
    hostname: str | None = None  # a UTS namespace with this hostname (a pod's name), or None for the host's
    own_pids: bool = False  # a PID namespace of its own, the command as PID 1

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Spec:
        raw = json.loads(path.read_text())
        raw["mounts"] = [Mount(**m) for m in raw["mounts"]]
        return cls(**raw)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    rc = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(rc, f"mount {source} -> {target}")


def _bind(source: str, target: str, read_only: bool = False) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)


def _join_netns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns({path}, CLONE_NEWNET)")
    finally:
        os.close(fd)


def _enter_namespace(extra: int = 0) -> None:
    """A new mount namespace (plus the ``extra`` CLONE_* flags), made private."""
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _check(_libc.unshare(CLONE_NEWNS | extra), f"unshare(CLONE_NEWNS|{extra:#x})")
    else:  # an unprivileged user: become root of a new user namespace that owns the mount namespace
        _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | extra), f"unshare(CLONE_NEWUSER|CLONE_NEWNS|{extra:#x})")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host


def _placeholder(path: str, like_dir: bool) -> None:
    if like_dir:
        os.makedirs(path, exist_ok=True)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()


def _populate(host_dir: str, new_dir: str, targets: dict[str, bool]) -> None:
    """Mirror ``host_dir`` into ``new_dir``: bind every entry, except the ones a target lies on or under, which
    become mount points (exact) or shadowed directories (recursed into). ``targets`` maps path → is a directory."""
    through: dict[str, bool] = {}  # child name -> True when the child itself is a mount target
    prefix = host_dir.rstrip("/") + "/"
    for target in targets:
        if target.startswith(prefix):
            child, _, rest = target[len(prefix) :].partition("/")
            through[child] = through.get(child, False) or not rest
    try:
        names = sorted(os.listdir(host_dir))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    for name in names:
        host, new = os.path.join(host_dir, name), os.path.join(new_dir, name)
        if name in through:
            continue
        try:
            if os.path.islink(host):
                os.symlink(os.readlink(host), new)
            elif os.path.isdir(host):
                os.mkdir(new)
                _bind(host, new)
            else:  # files, device nodes, sockets: bind onto an empty file
                Path(new).touch()
                _bind(host, new)
        except OSError as err:  # an odd entry (a stale FUSE mount...) must not stop the pod
            print(f"mountns: skipping {host}: {err}", file=sys.stderr)
    for name, exact in through.items():
        host, new = os.path.join(host_dir, name), os.path.join(new_dir, name)
        if exact:
            _placeholder(new, targets[host])
        else:
            os.makedirs(new, exist_ok=True)
            _populate(host, new, targets)


def build_root(spec: Spec) -> None:
    """Inside the new mount namespace: the host mirror on a tmpfs at ``spec.root``, then the volumes."""
    root = spec.root
    _mount("tmpfs", root, "tmpfs", MS_NOSUID, "mode=0755")
    # Resolve host symlinks on the way (/var/run -> /run) so a mount lands where the pod will look for it.
    resolved = [(os.path.realpath(m.target), m) for m in spec.mounts]
    if spec.own_pids:  # a /proc of the new PID namespace replaces the host's
        resolved.append(("/proc", Mount("/proc", tmpfs=True)))
    targets = {
        path: (m.tmpfs or m.source is None or os.path.isdir(m.source) or not os.path.exists(m.source))
        for path, m in resolved
    }
    _populate("/", root, targets)
    # Binding the host directory that contains ``root`` copied this tmpfs into itself: drop that copy.
    _libc.umount2((root + root).encode(), MNT_DETACH)
    if spec.netns:
        _mount("sysfs", root + "/sys", "sysfs", MS_NOSUID | MS_NODEV)
        if os.path.isdir("/sys/fs/cgroup") and os.path.isdir(root + "/sys/fs/cgroup"):
            _bind("/sys/fs/cgroup", root + "/sys/fs/cgroup")
    for path, m in sorted(resolved, key=lambda pm: pm[0].count("/")):  # parents before children
        inside = root + path
        if path == "/proc" and spec.own_pids:
            _mount("proc", inside, "proc", MS_NOSUID | MS_NODEV)
        elif m.tmpfs:
            _mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        else:
            assert m.source is not None
            _placeholder(inside, targets[path])
            _bind(m.source, inside, m.read_only)


def available() -> bool:
    """Whether this machine lets us create mount namespaces (root, or unprivileged user namespaces)."""
    import subprocess

    probe = [sys.executable, "-c", "import mmrl_local.node.mountns as m; m._enter_namespace()"]
    return subprocess.run(probe, capture_output=True, env={**os.environ}).returncode == 0


def _wait_for_pid_one(child: int) -> int:
    """The launcher's side of a PID namespace: pass termination signals on, exit as the command did."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def main(argv: list[str]) -> int:
    spec = Spec.load(Path(argv[0]))
    if spec.netns:
        _join_netns(spec.netns)
    _enter_namespace((CLONE_NEWUTS if spec.hostname else 0) | (CLONE_NEWPID if spec.own_pids else 0))
    if spec.own_pids:
        child = os.fork()  # the first child is PID 1 of the new namespace
        if child:
            return _wait_for_pid_one(child)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: the container (all of it) goes too
    if spec.hostname:
        name = spec.hostname.encode()
        _check(_libc.sethostname(name, len(name)), f"sethostname({spec.hostname})")
    build_root(spec)
    os.chroot(spec.root)
    os.chdir(spec.cwd)
    os.execvpe(spec.argv[0], spec.argv, spec.env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
