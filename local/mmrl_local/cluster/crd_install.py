"""Install mmrl's generated CRDs (crds/ of this checkout) into a control plane with server-side apply, as Helm or
Argo CD would, and wait until it is Established."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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

    install_policies(api, build_trainer_status_policy(), timeout)


def install_policies(api: client.ApiClient, objects: list[dict[str, Any]], timeout: float = 30.0) -> None:
    """ValidatingAdmissionPolicies and their bindings, applied, and waited for until the apiserver has type-checked
    each policy (before that it does not enforce it)."""
    apply_objects(api, objects)
    admission = client.AdmissionregistrationV1Api(api)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    deadline = time.monotonic() + timeout
    while names and time.monotonic() < deadline:
        found = {n: admission.read_validating_admission_policy(n) for n in names}
        names = [
            n for n, p in found.items() if not (p.status and p.status.observed_generation == p.metadata.generation)
        ]
        if names:
            time.sleep(0.1)
    if names:
        raise TimeoutError(f"admission policies not type-checked by the apiserver: {', '.join(names)}")


def remove_policies(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    """Delete the policies and bindings `install_policies` applied (those already gone are skipped)."""
    admission = client.AdmissionregistrationV1Api(api)
    for obj in objects:
        delete = (
            admission.delete_validating_admission_policy
            if obj["kind"] == "ValidatingAdmissionPolicy"
            else admission.delete_validating_admission_policy_binding
        )
        try:
            delete(obj["metadata"]["name"])
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
