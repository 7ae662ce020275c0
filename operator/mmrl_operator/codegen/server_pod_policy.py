"""Admission policies that keep a ModelServer's Service to the server's own pods (issue #44 item 5).

The Service `<server>-vllm` selects pods by label, `mmrl.dev/server=<server>` among them, and labels are anyone's to
set: a tenant's pod (or a Job's, a StatefulSet's) carrying that label and answering on port 8000 would get a share
of the server's clients, their prompts and images, and answer them as it likes. The operator already ignores such a
pod (it loads only into pods of the server's own ReplicaSets); the Service cannot. These ValidatingAdmissionPolicies
make the label mean what the Service needs: a pod, ReplicaSet or Deployment may carry `mmrl.dev/server=S` only as
part of server S's own chain,

- a Deployment (template labelled S) is written by someone allowed to write ModelServer S's status: the operator
  (its RBAC), a cluster admin, the garbage collector; or by the deployment controller, for the Deployment `S-vllm`;
- a ReplicaSet (template labelled S): the same principals, or the deployment controller for a ReplicaSet that the
  Deployment `S-vllm` controls;
- a pod: the same principals, or the ReplicaSet controller for a pod that a ReplicaSet `S-vllm-...` controls; and the
  label is never added to or changed on an existing pod by anyone else.

"Allowed to write ModelServer S's status" is asked of the apiserver's authorizer (`patch` on `modelservers/status`
named S), so the policy needs no operator name, holds for a chart-installed operator and for one run by hand, and
tenants with the aggregated `edit` role (which reads a server's status and writes its spec) are outside it. An owner
reference alone proves nothing (anyone may write one), so the controllers are recognised by their user names, as the
controller-manager authenticates them (`--use-service-account-credentials`, EKS's setting) or as one identity.

Shipped by the Helm chart (serverPodPolicy.enabled, on by default).
"""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c
from mmrl_operator.codegen.trainer_status_policy import policy_with_binding

PODS_POLICY = "mmrl-server-pods"
WORKLOADS_POLICY = "mmrl-server-workloads"
CONTROLLER_MANAGER = "system:kube-controller-manager"
REPLICASET_CONTROLLERS = ("system:serviceaccount:kube-system:replicaset-controller", CONTROLLER_MANAGER)
DEPLOYMENT_CONTROLLERS = ("system:serviceaccount:kube-system:deployment-controller", CONTROLLER_MANAGER)
SERVICE_SUFFIX = "-vllm"  # core.builders.model_server names the Deployment and the Service `<server>-vllm`


def _label(root: str) -> str:
    return f"{root}.?labels[?'{c.LABEL_SERVER}']"


def _users(names: tuple[str, ...]) -> str:
    return "request.userInfo.username in [" + ", ".join(f"'{n}'" for n in names) + "]"


def _controlled_by(kind: str, name_test: str) -> str:
    """The object's controller owner is a `kind` whose name passes `name_test` (CEL on `o.name`)."""
    return (
        f"object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == '{kind}' && "
        f"o.?controller.orValue(false) && {name_test})"
    )


TRUSTED = (
    "authorizer.group('mmrl.dev').resource('modelservers').subresource('status')"
    ".namespace(request.namespace).name(variables.server).check('patch').allowed()"
)


def _policy(name: str, rules: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
    return policy_with_binding(name, {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules}, **spec})


def _says(*parts: str) -> str:
    """A CEL message: the text parts joined around the server's name (CEL double-quoted strings)."""
    return " + variables.server + ".join(f'"{part}"' for part in parts)


def build_server_pod_policy() -> list[dict[str, Any]]:
    """The two policies and their cluster-wide bindings: pods, and the ReplicaSets and Deployments that make them."""
    own = f"variables.server + '{SERVICE_SUFFIX}'"
    by_its_replicaset = _controlled_by("ReplicaSet", f"o.name.startsWith({own} + '-')")
    by_its_deployment = _controlled_by("Deployment", f"o.name == {own}")
    pods = _policy(
        PODS_POLICY,
        [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}],
        {
            "matchConditions": [
                {"name": "labelled-for-a-server", "expression": f"{_label('object.metadata')}.hasValue()"}
            ],
            "variables": [
                {"name": "server", "expression": f"{_label('object.metadata')}.orValue('')"},
                {"name": "trusted", "expression": TRUSTED},
            ],
            "validations": [
                {
                    "expression": "request.operation != 'CREATE' || variables.trusted || "
                    f"({_users(REPLICASET_CONTROLLERS)} && {by_its_replicaset})",
                    "messageExpression": _says(
                        f"metadata.labels: a pod labelled {c.LABEL_SERVER}=",
                        " gets the ModelServer's clients through its Service: only the server's own ReplicaSet (of "
                        "its Deployment ",
                        f"{SERVICE_SUFFIX}) creates one",
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation != 'UPDATE' || variables.trusted || "
                    f"{_label('oldObject.metadata')}.orValue('') == variables.server",
                    "messageExpression": _says(
                        f"metadata.labels: {c.LABEL_SERVER}=",
                        " cannot be added to a pod, or changed: the pod would get the ModelServer's clients through "
                        "its Service",
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    )
    template = "object.spec.template.metadata"
    workloads = _policy(
        WORKLOADS_POLICY,
        [
            {
                "apiGroups": ["apps"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["deployments", "replicasets"],
            }
        ],
        {
            "matchConditions": [{"name": "templated-for-a-server", "expression": f"{_label(template)}.hasValue()"}],
            "variables": [
                {"name": "server", "expression": f"{_label(template)}.orValue('')"},
                {"name": "trusted", "expression": TRUSTED},
            ],
            "validations": [
                {
                    "expression": f"variables.trusted || ({_users(DEPLOYMENT_CONTROLLERS)} && ("
                    f"(request.resource.resource == 'deployments' && request.operation == 'UPDATE' && "
                    f"object.metadata.name == {own}) || "
                    f"(request.resource.resource == 'replicasets' && {by_its_deployment})))",
                    "messageExpression": _says(
                        f"spec.template.metadata.labels: {c.LABEL_SERVER}=",
                        " makes pods that get the ModelServer's clients through its Service: only the operator "
                        "writes a workload that makes them (it may patch the status of ModelServer ",
                        ")",
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    )
    return pods + workloads
