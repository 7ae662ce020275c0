"""Install mmrl's generated CRDs (crds/ of this checkout) into a control plane with server-side apply, as Helm or
Argo CD would, and wait until it is Established."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client

from mmrl_local.common import yaml_loader
from mmrl_local.common.apply import apply_objects
from mmrl_operator.codegen import crd

CRD_DIR = Path(__file__).resolve().parents[3] / "crds"


def install_mmrl_crd(api: client.ApiClient, timeout: float = 30.0) -> None:
    """Every CRD of the mmrl.dev API (MultimodalRLJob, ModelServer)."""
    bodies = [yaml_loader.load(crd.crd_path(CRD_DIR, kind).read_text()) for kind in crd.KINDS]
    apply_objects(api, bodies)
    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    waiting = [b["metadata"]["name"] for b in bodies]
    while time.monotonic() < deadline:
        waiting = [n for n in waiting if not _established(ext, n)]
        if not waiting:
            return
        time.sleep(0.1)
    raise TimeoutError(f"CRDs not Established: {', '.join(waiting)}")


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    conds = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conds)


def install_trainer_status_policy(api: client.ApiClient, timeout: float = 30.0) -> None:
    """The admission policy that keeps trainers to their own status fields
    (mmrl_operator.codegen.trainer_status_policy)."""
    from mmrl_operator.codegen.trainer_status_policy import build_trainer_status_policy

    apply_objects(api, build_trainer_status_policy())
    policy = build_trainer_status_policy()[0]
    admission = client.AdmissionregistrationV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the apiserver type-checks a policy before it enforces it
        found = admission.read_validating_admission_policy(policy["metadata"]["name"])
        if found.status and found.status.observed_generation == found.metadata.generation:
            return
        time.sleep(0.1)
    raise TimeoutError("the trainer status policy was not type-checked by the apiserver")
