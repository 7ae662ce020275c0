"""Shared storage for a local job: a hostPath PersistentVolume pre-bound to a claim, standing in for FSx for Lustre.

On HyperPod the checkpoint claim (`fsx-claim`) is an FSx for Lustre volume mounted on every node. Locally every
"node" is this machine, so a hostPath PersistentVolume shows every pod the same directory. The volume is
pre-bound to the claim (`claimRef` + `volumeName`), and the real PV controller in kube-controller-manager binds
them; pods that mount the claim are scheduled only once it is Bound, exactly as with a real volume.
"""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

STORAGE_CLASS = "mmrl-local-hostpath"


def volume_name(namespace: str, claim: str) -> str:
    return f"{namespace}-{claim}"[:253]


def create_hostpath_claim(
    core: client.CoreV1Api, namespace: str, claim: str, host_dir: Path, *, size: str = "100Gi", timeout: float = 60
) -> Path:
    """Create (or reuse) PV + PVC `claim` in `namespace` backed by `host_dir`; return `host_dir` once Bound."""
    host_dir.mkdir(parents=True, exist_ok=True)
    pv = volume_name(namespace, claim)
    modes = ["ReadWriteMany"]
    bodies = [
        (
            core.create_persistent_volume,
            (),
            {
                "metadata": {"name": pv, "labels": {"app.kubernetes.io/managed-by": "mmrl-local"}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": modes,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORAGE_CLASS,
                    "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            },
        ),
        (
            core.create_namespaced_persistent_volume_claim,
            (namespace,),
            {
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {
                    "accessModes": modes,
                    "storageClassName": STORAGE_CLASS,
                    "volumeName": pv,
                    "resources": {"requests": {"storage": size}},
                },
            },
        ),
    ]
    for create, args, body in bodies:
        try:
            create(*args, body)
        except ApiException as err:
            if err.status != 409:
                raise
    deadline = time.monotonic() + timeout
    while core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase != "Bound":
        if time.monotonic() > deadline:
            raise TimeoutError(f"persistentvolumeclaim {namespace}/{claim} was not bound within {timeout}s")
        time.sleep(0.2)
    return host_dir


def delete_hostpath_claim(core: client.CoreV1Api, namespace: str, claim: str) -> None:
    """Remove the claim and its volume; the host directory (checkpoints!) stays."""
    for call, args in (
        (core.delete_namespaced_persistent_volume_claim, (claim, namespace)),
        (core.delete_persistent_volume, (volume_name(namespace, claim),)),
    ):
        try:
            call(*args)
        except ApiException as err:
            if err.status != 404:
                raise
