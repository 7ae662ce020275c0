"""Admission policy that scopes the namespace's trainer identity to one job, and to the status fields it owns.

RBAC lets `mmrl-trainer` (core/builders/identity.py) patch the status of every job in its namespace; it cannot say
"only the job whose pod this is", nor "only these fields". This ValidatingAdmissionPolicy does both, for status
updates made by `system:serviceaccount:<job's namespace>:mmrl-trainer`:

- The token must be bound to a pod (the kubelet's projected tokens are; `kubectl create token` without
  `--bound-object-kind Pod` is not): the apiserver then puts the pod's name in the request's user info
  (`authentication.kubernetes.io/pod-name`). A request without it is refused.
- That pod must be one of this job's Ray pods, by the names KubeRay v1.5 gives a RayCluster's pods (the RayCluster
  is named as the job; `names.ray_head_pod_prefix`, `names.ray_worker_pod_prefix`): the head `<job>-head-xxxxx`, or
  `<job>-head` with KubeRay's deterministic head pod names, and the workers `<job>-<group>-worker-xxxxx` for a group
  of `spec.cluster.workerGroups`, `<job>-<group>` cut to 50 characters as KubeRay cuts it (`xxxxx`: the apiserver's
  5 generated characters, lowercase letters and digits). Both may report: the local backend trains in the Ray
  driver on the head, SkyRL's entry task on a worker (the head offers no CPUs).
- Every status field except the trainer's (`progress`, `adapter`, `tracking`) must stay as it was. The field list
  comes from the status model, so a new status field is protected the day it is added.

No pod name is accepted for two jobs of a namespace. Job names are at most 40 characters (MAX_JOB_NAME_LENGTH), so
`<job>-` is never cut, and worker group names are lowercase letters and digits only (api cluster.GROUP_NAME_RULE).
Take a pod name p accepted for jobs j1 and j2:
- head and head: p = j1 + "-head-" + s1 = j2 + "-head-" + s2 with |s1| = |s2| = 5, so j1 = j2 (equal lengths); and
  p = j1 + "-head" = j2 + "-head-" + s would make s end in "-head", which has a dash.
- head and worker: a worker's name ends in "-worker-" + 5 characters without a dash, a head's in "-head-" + 5 such
  characters or in "-head"; the last 13 characters (resp. the last 5) cannot agree.
- worker and worker: the stems before "-worker-" + 5 characters are equal: P = cut(j1 + "-" + g1) = cut(j2 + "-" + g2).
  The cut keeps j + "-" and at least one character of g (|j| + 1 <= 41 < 50), and g has no dash, so j is P before
  its last dash: j1 = j2.
With a dash allowed in group names, job "geo" with group "x-y" makes "geo-x-y-worker-abcde", which is also job "geo-x"
with group "y". tests/unit/operator/test_trainer_status_policy.py checks the claim on generated names, and
tests/cluster/test_trainer_status_policy.py checks this module's CEL against `ray_pod_of_job` on the live apiserver.

Jobs reconciled before the per-namespace identity ran as `<job>-trainer` (the Role that grants it is the job's, by
resourceNames): the field rules still hold for those until their jobs are deleted.

Shipped by the Helm chart (trainerStatusPolicy.enabled); `mmrl_local` installs it on the local control plane.
Without it, any trainer of a namespace could write any status field of any job there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mmrl_api import constants as c
from mmrl_api.status import JobStatus
from mmrl_operator.core.names import (
    GENERATED_SUFFIX_LENGTH,
    LEGACY_TRAINER_SA_SUFFIX,
    RAY_POD_PREFIX_MAX,
    TRAINER_IDENTITY,
    ray_head_pod_prefix,
    ray_worker_pod_prefix,
)

TRAINER_STATUS_FIELDS = ("progress", "adapter", "tracking")
POLICY_NAME = "mmrl-trainer-status-fields"
ADMISSION_API = "admissionregistration.k8s.io/v1"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
GENERATED = f"^[a-z0-9]{{{GENERATED_SUFFIX_LENGTH}}}$"
"""The characters the apiserver appends to a generateName (k8s.io/apimachinery/pkg/util/rand: a subset of these)."""


def operator_status_fields() -> list[str]:
    wire = [f.alias or n for n, f in JobStatus.model_fields.items()]
    return [name for name in wire if name not in TRAINER_STATUS_FIELDS]


def ray_pod_of_job(pod: str, job: str, groups: Iterable[str]) -> bool:
    """Whether `pod` is a name KubeRay gives a Ray pod of job `job`'s RayCluster with these worker groups: what the
    policy's CEL (`pod_match_variables`) decides, written in Python for the tests."""
    if pod == ray_head_pod_prefix(job)[:-1]:
        return True
    stem, suffix = pod[:-GENERATED_SUFFIX_LENGTH], pod[-GENERATED_SUFFIX_LENGTH:]
    if len(pod) <= GENERATED_SUFFIX_LENGTH or not re.fullmatch(GENERATED[1:-1], suffix):
        return False
    return stem == ray_head_pod_prefix(job) or any(stem == ray_worker_pod_prefix(job, g) for g in groups)


def pod_match_variables(pod: str, job: str, groups: str) -> list[dict[str, str]]:
    """CEL variables deciding whether the pod named by the CEL expression `pod` is a Ray pod of the job named by `job`
    whose worker group names are the list `groups`: `rayHead` or `rayWorker` is true then. Parameterised so a test
    can evaluate the same CEL on other objects."""
    n, name = GENERATED_SUFFIX_LENGTH, "variables.podName"
    worker_stem = (
        f"(size({job}) + size(g) < {RAY_POD_PREFIX_MAX} ? {job} + '-' + g "
        f": ({job} + '-' + g).substring(0, {RAY_POD_PREFIX_MAX})) + '-worker-'"
    )
    return [
        {"name": "podName", "expression": pod},
        {
            "name": "podStem",
            "expression": f"size({name}) > {n} ? {name}.substring(0, size({name}) - {n}) : ''",
        },
        {
            "name": "podGenerated",
            "expression": f"size(variables.podName) > {n} && "
            f"variables.podName.substring(size(variables.podName) - {n}).matches('{GENERATED}')",
        },
        {
            "name": "rayHead",
            "expression": f"variables.podName == {job} + '-head' "
            f"|| (variables.podGenerated && variables.podStem == {job} + '-head-')",
        },
        {
            "name": "rayWorker",
            "expression": f"variables.podGenerated && ({groups}).exists(g, variables.podStem == {worker_stem})",
        },
    ]


def _unchanged(field: str) -> str:
    new, old = (
        f"(has(object.status) && has(object.status.{field}))",
        f"(has(oldObject.status) && has(oldObject.status.{field}))",
    )
    return f"{new} == {old} && (!{new} || object.status.{field} == oldObject.status.{field})"


def build_trainer_status_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its cluster-wide binding."""
    account = "'system:serviceaccount:' + object.metadata.namespace + ':'"
    shared = f"request.userInfo.username == {account} + '{TRAINER_IDENTITY}'"
    legacy = f"request.userInfo.username == {account} + object.metadata.name + '{LEGACY_TRAINER_SA_SUFFIX}'"
    extra = f"request.userInfo.extra[?'{POD_NAME_EXTRA}'].orValue([])"
    variables = [
        {"name": "sharedIdentity", "expression": shared},
        {"name": "boundPods", "expression": extra},
        *pod_match_variables(
            "size(variables.boundPods) == 1 ? variables.boundPods[0] : ''",
            "object.metadata.name",
            "object.spec.?cluster.?workerGroups.orValue([]).map(g, g.name)",
        ),
    ]
    owned = ", ".join(f"status.{f}" for f in TRAINER_STATUS_FIELDS)
    validations = [
        {
            "expression": "!variables.sharedIdentity || size(variables.boundPods) == 1",
            "message": f"{TRAINER_IDENTITY} may patch a job's status only with a token bound to a pod (one the kubelet "
            "mounts, or a TokenRequest with boundObjectRef kind Pod), and only the status of the job whose Ray pod "
            "that is",
            "reason": "Forbidden",
        },
        {
            "expression": "!variables.sharedIdentity || size(variables.boundPods) != 1 "
            "|| variables.rayHead || variables.rayWorker",
            "messageExpression": "'the token is bound to pod ' + variables.podName + ', which is not a Ray pod of job "
            f"' + object.metadata.name + ': {TRAINER_IDENTITY} may patch only the status of the job whose Ray pod "
            "(head or worker) it runs in'",
            "reason": "Forbidden",
        },
        *(
            {
                "expression": _unchanged(field),
                "message": f"the trainer may write only {owned}; status.{field} belongs to the operator",
                "reason": "Forbidden",
            }
            for field in operator_status_fields()
        ),
    ]
    return admission_policy(
        POLICY_NAME,
        resource=f"{c.PLURAL}/status",
        operations=["UPDATE"],
        match_conditions=[{"name": "a-trainer-of-the-namespace", "expression": f"{shared} || {legacy}"}],
        validations=validations,
        variables=variables,
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
    return policy_with_binding(name, spec)


def policy_with_binding(name: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy with `spec`, and its cluster-wide Deny binding, labelled as mmrl's."""
    metadata = {"name": name, "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY}}
    policy = {"apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicy", "metadata": metadata, "spec": spec}
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
