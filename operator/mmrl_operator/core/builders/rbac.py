"""ServiceAccount, Role and RoleBinding for the trainer: it may read this job and patch only its status."""

from __future__ import annotations

from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_operator.core.builders.common import child_metadata
from mmrl_operator.core.names import service_account_name


def build_rbac(job: MultimodalRLJob) -> list[dict[str, Any]]:
    name = service_account_name(job.name)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": child_metadata(job, name, "rbac")}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": child_metadata(job, name, "rbac"),
        "rules": [
            # resourceNames pins the grant to this one job: a compromised trainer cannot touch other jobs.
            {"apiGroups": [c.GROUP], "resources": [c.PLURAL], "resourceNames": [job.name], "verbs": ["get"]},
            {
                "apiGroups": [c.GROUP],
                "resources": [f"{c.PLURAL}/status"],
                "resourceNames": [job.name],
                "verbs": ["get", "patch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_metadata(job, name, "rbac"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }
    return [sa, role, binding]
