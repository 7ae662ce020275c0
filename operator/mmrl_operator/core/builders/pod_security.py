"""The securityContext of every pod the operator builds, decided per image (docs/security.md, "Pod security").

The trainer image (both targets of docker/trainer.Dockerfile, and Ray's own images) runs as the numeric user 1000,
so its pods can say `runAsNonRoot` and the kubelet can verify it without a `runAsUser` of ours, which would
override whatever user a team's own image picked. vLLM's published images run as root, so the serving pods cannot;
they get everything else. Every container drops all capabilities and cannot gain privileges (a non-root process has
no effective capabilities anyway; the bounding set and no_new_privs also stop setuid and file-capability binaries).
A read-only root file system only where everything the process writes is known: the trainer-log printer and the
adapter check write nothing but their volumes, while Ray, torch, Triton and vLLM write under /tmp and $HOME, which
in the trainer image also holds the Python environment. `seccompProfile: RuntimeDefault` everywhere:
the runtime's default filter, the one `docker run` applies.

Each call returns new dicts: one dict shared by two containers would print as a YAML anchor (`mmrl render`).
"""

from __future__ import annotations

from typing import Any


def _seccomp() -> dict[str, str]:
    return {"type": "RuntimeDefault"}


def non_root_pod() -> dict[str, Any]:
    """For pods whose every container runs an image with a numeric non-root USER (the trainer image)."""
    return {"runAsNonRoot": True, "seccompProfile": _seccomp()}


def root_image_pod() -> dict[str, Any]:
    """For pods with a container whose image runs as root (vLLM's): what holds without a non-root user."""
    return {"seccompProfile": _seccomp()}


def locked_container(*, read_only_root: bool, non_root: bool = False) -> dict[str, Any]:
    """No privilege escalation, no capabilities; `non_root` for a trainer-image container in a root image's pod."""
    out: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if non_root:
        out["runAsNonRoot"] = True
    if read_only_root:
        out["readOnlyRootFilesystem"] = True
    return out
