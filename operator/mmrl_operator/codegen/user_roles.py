"""The ClusterRoles for the people who use mmrl, aggregated into Kubernetes' built-in user-facing roles.

Kubernetes' `admin`, `edit` and `view` ClusterRoles gather the rules of every ClusterRole labelled
`rbac.authorization.k8s.io/aggregate-to-<role>: "true"` (the controller-manager's aggregation controller). The chart
ships two: `<release>-edit` (write every mmrl.dev kind, never its status, which the operator and the trainer own)
into `admin` and `edit`, and `<release>-view` (read every kind and its status) into `admin`, `edit` and `view`, the
way Kubernetes' own view rules reach edit and admin. So a team member bound to `edit` in a namespace creates jobs and
servers there, and one bound to `view` watches them, with no mmrl-specific binding. The kinds come from the CRD list
(`crd.KINDS`): a new kind is covered the day it is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrl_api import constants as c
from mmrl_operator.codegen.crd import KINDS

AGGREGATE_LABEL = "rbac.authorization.k8s.io/aggregate-to-{}"
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class UserRole:
    suffix: str  # the ClusterRole is `<release full name>-<suffix>`
    aggregate_to: tuple[str, ...]  # the built-in roles that gather its rules
    rules: tuple[dict[str, Any], ...]

    @property
    def labels(self) -> dict[str, str]:
        return {AGGREGATE_LABEL.format(role): "true" for role in self.aggregate_to}


def user_roles() -> list[UserRole]:
    plurals = [kind.plural for kind in KINDS]
    edit = UserRole(
        "edit", ("admin", "edit"), ({"apiGroups": [c.GROUP], "resources": plurals, "verbs": [*READ, *WRITE]},)
    )
    readable = [*plurals, *(f"{p}/status" for p in plurals)]
    view = UserRole(
        "view", ("admin", "edit", "view"), ({"apiGroups": [c.GROUP], "resources": readable, "verbs": list(READ)},)
    )
    return [edit, view]
