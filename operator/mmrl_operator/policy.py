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
from mmrl_operator.names import TRAINER_SA_SUFFIX

TRAINER_STATUS_FIELDS = ("progress", "adapter")
POLICY_NAME = "mmrl-trainer-status-fields"


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
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [c.GROUP],
                        "apiVersions": [c.VERSION],
                        "operations": ["UPDATE"],
                        "resources": [f"{c.PLURAL}/status"],
                    }
                ]
            },
            "matchConditions": [{"name": "the-jobs-own-trainer", "expression": trainer}],
            "validations": [
                {
                    "expression": _unchanged(field),
                    "message": f"the trainer may write only {owned}; status.{field} belongs to the operator",
                    "reason": "Forbidden",
                }
                for field in operator_status_fields()
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY}},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }
    return [policy, binding]
