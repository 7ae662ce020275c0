"""Admission policy that lets a job's trainer write only the status fields it owns.

RBAC can grant the trainer `patch` on its own job's status subresource (builders/rbac.py, by resourceNames), but
not on a part of it. This ValidatingAdmissionPolicy closes the gap: for status updates made by the job's own
trainer ServiceAccount (`<job>-trainer` in the job's namespace) every status field except the trainer's
(`progress`, `adapter`) must stay as it was. The field list comes from the status model, so a new status field is
protected the day it is added. Shipped by the Helm chart; `mmrl_local` installs it on the local control plane.
"""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c
from mmrl_api.status import JobStatus
from mmrl_operator.core.names import TRAINER_SA_SUFFIX

TRAINER_STATUS_FIELDS = ("progress", "adapter", "tracking")
POLICY_NAME = "mmrl-trainer-status-fields"
ADMISSION_API = "admissionregistration.k8s.io/v1"


def operator_status_fields() -> list[str]:
    wire = [f.alias or n for n, f in JobStatus.model_fields.items()]
    return [name for name in wire if name not in TRAINER_STATUS_FIELDS]


def _unchanged(field: str) -> str:
    new, old = (
        f"(has(object.status) && has(object.status.{field}))",
        f"(has(oldObject.status) && has(oldObject.status.{field}))",
    )
    return f"{new} == {old} && (!{new} || object.status.{field} == oldObject.status.{field})"


def build_trainer_status_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its cluster-wide binding."""
    trainer = (
        "request.userInfo.username == 'system:serviceaccount:' + object.metadata.namespace + ':' "
        f"+ object.metadata.name + '{TRAINER_SA_SUFFIX}'"
    )
    owned = ", ".join(f"status.{f}" for f in TRAINER_STATUS_FIELDS)
    validations = [
        {
            "expression": _unchanged(field),
            "message": f"the trainer may write only {owned}; status.{field} belongs to the operator",
            "reason": "Forbidden",
        }
        for field in operator_status_fields()
    ]
    return admission_policy(
        POLICY_NAME,
        resource=f"{c.PLURAL}/status",
        operations=["UPDATE"],
        match_conditions=[{"name": "the-jobs-own-trainer", "expression": trainer}],
        validations=validations,
    )


def admission_policy(
    name: str,
    *,
    resource: str,
    operations: list[str],
    match_conditions: list[dict[str, str]],
    validations: list[dict[str, str]],
    variables: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy on MultimodalRLJobs that fails closed, and its cluster-wide Deny binding."""
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [c.GROUP], "apiVersions": [c.VERSION], "operations": operations, "resources": [resource]}
            ]
        },
        "matchConditions": match_conditions,
    }
    if variables:
        spec["variables"] = variables
    spec["validations"] = validations
    metadata = {"name": name, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY}}
    policy = {"apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicy", "metadata": metadata, "spec": spec}
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
