"""Volumes every Ray pod mounts: the checkpoint PVC, read-only PVCs named by pvc:// data/model URIs, the
trainer config, and a memory-backed /dev/shm (NCCL and the dataloaders need more than the 64 MiB default).

`pvc://claim/path` is rewritten to the path where that claim is mounted, so the trainer only sees local paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api.constants import CONFIG_MOUNT, DATA_MOUNT_ROOT, SHM_MOUNT
from mmrl_operator.core.names import config_map_name

CONFIG_FILE = f"{CONFIG_MOUNT}/trainer.json"


@dataclass(frozen=True)
class Mounts:
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    claim_paths: dict[str, str]  # claim name -> mount path


def _claims_in_uris(job: MultimodalRLJob) -> list[str]:
    uris = [job.spec.model.name, job.spec.dataset.train, job.spec.dataset.validation or ""]
    claims = []
    for uri in uris:
        if uri.startswith("pvc://"):
            claim = uri.removeprefix("pvc://").split("/", 1)[0]
            if claim not in claims:
                claims.append(claim)
    return claims


def build_mounts(job: MultimodalRLJob) -> Mounts:
    volumes: list[dict[str, Any]] = [
        {"name": "trainer-config", "configMap": {"name": config_map_name(job.name)}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "trainer-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": SHM_MOUNT},
    ]
    claim_paths: dict[str, str] = {}
    pvc = job.spec.checkpoint.pvc
    if pvc is not None:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc.claim_name}})
        mounts.append({"name": "checkpoints", "mountPath": pvc.mount_path})
        claim_paths[pvc.claim_name] = pvc.mount_path
    for i, claim in enumerate(c for c in _claims_in_uris(job) if c not in claim_paths):
        path = f"{DATA_MOUNT_ROOT}/{claim}"
        volumes.append({"name": f"data-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": f"data-{i}", "mountPath": path, "readOnly": True})
        claim_paths[claim] = path
    return Mounts(volumes, mounts, claim_paths)


def local_path(uri: str | None, claim_paths: dict[str, str]) -> str | None:
    """pvc://claim/rest -> <mount of claim>/rest; other URIs unchanged."""
    if uri is None or not uri.startswith("pvc://"):
        return uri
    claim, _, rest = uri.removeprefix("pvc://").partition("/")
    return f"{claim_paths[claim].rstrip('/')}/{rest}" if rest else claim_paths[claim]
