"""The OCI runtime spec (runc's ``config.json``) for one container of a pod, from its image's config and the pod
spec, by Kubernetes' rules. Pure: the caller reads the image and the pod, this module decides.

What Kubernetes (the kubelet with a CRI runtime such as containerd) does and this module does with it:

- ``command`` replaces the image's Entrypoint and drops its Cmd; ``args`` replaces Cmd.
- The env is the image's Env, then the container's (resolved by the caller), the container's winning; HOME is the
  user's home from the image's /etc/passwd when neither sets it, else ``/``.
- ``workingDir`` replaces the image's WorkingDir.
- The user: ``runAsUser``/``runAsGroup`` (the container's securityContext over the pod's) replace the image's User;
  ``supplementalGroups`` and ``fsGroup`` become additional groups. ``runAsNonRoot`` refuses to start a container
  that would run as uid 0, and one whose image names its user by name (which the kubelet cannot verify), with the
  kubelet's CreateContainerConfigError.
- Capabilities: the runtime's default set (containerd's), less ``drop`` (``ALL`` drops all), plus ``add``. A
  process that does not run as root keeps them only in its bounding set, as containerd does since Kubernetes 1.22.
- ``allowPrivilegeEscalation: false`` sets no_new_privs; ``readOnlyRootFilesystem`` mounts the root read-only.
- The pod's volumes are bind mounts (read-only where the volumeMount says so), a memory-backed emptyDir a tmpfs; the
  pod's /etc/hosts is bound in; the network namespace is the pod sandbox's; pid, ipc, uts and mount namespaces are
  the container's own, with the pod's name as hostname.

Left out, and refused rather than ignored where it matters: ``privileged`` containers (refused), seccomp and
AppArmor profiles, SELinux options, resource limits (no cgroup limits are set), ``procMount``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmrl_local.node.mountns import Mount

# containerd's default capability set (oci.WithDefaultSpec / DefaultCapabilities).
RUNTIME_DEFAULT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


class CreateContainerConfigError(ValueError):
    """The kubelet's refusal to create a container from its config (the message is the status's message)."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    additional_gids: tuple[int, ...] = ()
    home: str = "/"


def process_args(config: Mapping[str, Any], command: list[str] | None, args: list[str] | None) -> list[str]:
    """Kubernetes' rule: ``command`` replaces the entrypoint and drops the image's Cmd; ``args`` replaces Cmd."""
    entrypoint = command if command is not None else config.get("Entrypoint") or []
    if args is None:
        args = (config.get("Cmd") or []) if command is None else []
    argv = [*entrypoint, *args]
    if not argv:
        raise CreateContainerConfigError("the image has no entrypoint or cmd, and the container gives no command")
    return argv


def _table(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _lookup(name: str, rows: list[list[str]], what: str) -> list[str]:
    for fields in rows:
        if fields[0] == name or (name.isdigit() and len(fields) > 2 and fields[2] == name):
            return fields
    raise CreateContainerConfigError(f"unable to find {what} {name}: no matching entries in the image's {what} file")


def identity(
    image_user: str,
    security: Mapping[str, Any],
    passwd: str,
    group: str,
) -> Identity:
    """The uid, gid and groups a container runs as: ``security`` is the pod's securityContext overlaid by the
    container's; ``passwd`` and ``group`` are the image's /etc/passwd and /etc/group."""
    name, _, group_name = (image_user or "0").partition(":")
    users, groups = _table(passwd), _table(group)
    run_as_user = security.get("runAsUser")
    if run_as_user is None and not name.isdigit() and security.get("runAsNonRoot"):
        raise CreateContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
        )
    if run_as_user is not None:
        uid = int(run_as_user)
    else:
        uid = int(name) if name.isdigit() else int(_lookup(name, users, "user")[2])
    if security.get("runAsNonRoot") and uid == 0:
        raise CreateContainerConfigError("container has runAsNonRoot and image will run as root")
    entry = next((f for f in users if len(f) > 3 and f[2] == str(uid)), None)
    if security.get("runAsGroup") is not None:
        gid = int(security["runAsGroup"])
    elif group_name and run_as_user is None:
        gid = int(group_name) if group_name.isdigit() else int(_lookup(group_name, groups, "group")[2])
    else:
        gid = int(entry[3]) if entry else 0
    extra = [int(g) for g in security.get("supplementalGroups") or []]
    if security.get("fsGroup") is not None:
        extra.append(int(security["fsGroup"]))
    home = entry[5] if entry and len(entry) > 5 and entry[5] else "/"
    return Identity(uid, gid, tuple(dict.fromkeys(g for g in extra if g != gid)), home)


def capabilities(security: Mapping[str, Any], uid: int) -> dict[str, list[str]]:
    if security.get("privileged"):
        raise CreateContainerConfigError("privileged containers do not run from images on the local kubelet")
    caps = (security.get("capabilities") or {}) if isinstance(security.get("capabilities"), Mapping) else {}
    drop = {f"CAP_{c.upper().removeprefix('CAP_')}" for c in caps.get("drop") or []}
    add = [f"CAP_{c.upper().removeprefix('CAP_')}" for c in caps.get("add") or []]
    kept = [] if "CAP_ALL" in drop else [c for c in RUNTIME_DEFAULT_CAPS if c not in drop]
    bounding = list(dict.fromkeys([*kept, *add]))
    held = bounding if uid == 0 else []
    return {"bounding": bounding, "effective": held, "permitted": held, "inheritable": [], "ambient": []}


def merged_security(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's securityContext with the container's over it (the fields both may set)."""
    pod = dict(pod_spec.get("securityContext") or {})
    own = dict(container.get("securityContext") or {})
    return {**pod, **own}


def _bind(mount: Mount) -> dict[str, Any]:
    if mount.tmpfs:
        return {"destination": mount.target, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}
    options = ["rbind", "rprivate", *(["ro"] if mount.read_only else [])]
    return {"destination": mount.target, "type": "bind", "source": mount.source, "options": options}


def _base_mounts() -> list[dict[str, Any]]:
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755"]},
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    ]


def runtime_spec(
    *,
    root: Path,
    argv: list[str],
    env: Mapping[str, str],
    cwd: str,
    who: Identity,
    security: Mapping[str, Any],
    mounts: list[Mount],
    hostname: str,
    netns: str | None,
) -> dict[str, Any]:
    """The whole config.json: ``env`` is the container's final env (image's, then the pod's); ``netns`` the pod
    sandbox's pinned namespace, or None for a namespace with loopback only."""
    env = {**env}
    env.setdefault("HOME", who.home)
    user: dict[str, Any] = {"uid": who.uid, "gid": who.gid}
    if who.additional_gids:
        user["additionalGids"] = list(who.additional_gids)
    network: dict[str, Any] = {"type": "network", **({"path": netns} if netns else {})}
    return {
        "ociVersion": "1.0.2",
        "root": {"path": str(root), "readonly": bool(security.get("readOnlyRootFilesystem"))},
        "hostname": hostname,
        "process": {
            "terminal": False,
            "user": user,
            "args": list(argv),
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": cwd or "/",
            "capabilities": capabilities(security, who.uid),
            "noNewPrivileges": security.get("allowPrivilegeEscalation") is False,
        },
        "mounts": [*_base_mounts(), *(_bind(m) for m in mounts)],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, network, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
        },
    }
