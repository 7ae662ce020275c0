"""Admission policy that keeps a job's `specPatch` from taking more than the job's own pods' powers.

`specPatch` is a JSON merge patch onto every Ray pod spec, so whoever may create a MultimodalRLJob could otherwise
have the operator create pods that run as any ServiceAccount of the namespace, join the node's network, PID or IPC
namespace, mount a host path, run privileged or with added capabilities, or tolerate HyperPod's node-health-status
taint (pods on nodes HyperPod is checking, rebooting or replacing). This ValidatingAdmissionPolicy refuses
a job whose specPatch sets any of those, with a message naming the field. The specPatch fields are found in the
job model, so a new one is covered the day it is added. It is on unless the platform turns it off (the chart's
`specPatchPolicy.enabled`), as one that already trusts its job authors with pods may. Only creates and updates that
change a specPatch are judged, so a job admitted before the policy was switched on never gets stuck (the operator
can still update its metadata and delete it). A specPatch may still loosen the Ray pods' securityContext (an image
that runs as root needs `runAsNonRoot: false`): the Pod Security Standards on the namespace judge that.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from mmrl_api import constants as c
from mmrl_api.job import JobSpec
from mmrl_operator.codegen.trainer_status_policy import admission_policy

POLICY_NAME = "mmrl-restrict-spec-patch"
SPEC_PATCH_FIELD = "spec_patch"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
# The pods' identity is the namespace's trainer identity, with its API token mounted (the trainer reports progress
# with it); the RayCluster builder sets these fields after the specPatch anyway, so a patch of them is a mistake.
SERVICE_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount", "automountServiceAccountToken")


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list or any(_is_list(a) for a in typing.get_args(annotation))


def spec_patch_paths(model: type[BaseModel] = JobSpec, under: tuple[str, ...] = ("spec",)) -> list[tuple[str, ...]]:
    """The wire path of every specPatch field of the job, e.g. ("spec", "cluster", "podTemplate", "specPatch")."""
    found = []
    for name, field in model.model_fields.items():
        path = (*under, field.alias or name)
        if name == SPEC_PATCH_FIELD:
            found.append(path)
            continue
        for nested in _models(field.annotation):
            inner = spec_patch_paths(nested, path)
            if inner and _is_list(field.annotation):
                # One CEL variable per path cannot reach into list items; write the rule when such a field appears.
                raise NotImplementedError(f"{'.'.join(path)}: a specPatch inside a list is not covered")
            found += inner
    return found


def _select(root: str, path: tuple[str, ...]) -> str:
    """The value at `path` below `root`, or an empty object when any step is missing."""
    return f"{root}.?{'.?'.join(path)}.orValue({{}})"


def _variable(path: tuple[str, ...]) -> str:
    """The CEL variable holding the specPatch at `path`, e.g. clusterPodTemplateSpecPatch."""
    return path[1] + "".join(p[0].upper() + p[1:] for p in path[2:])


def _rules(patch: str, field: str) -> list[tuple[str, str, str]]:
    """(expression that holds for an allowed patch, field below the specPatch, why) for one specPatch."""
    out = [
        (
            f"!has({patch}.{f})",
            f,
            "the Ray pods run as the namespace's mmrl-trainer ServiceAccount with its token; a specPatch may not "
            "change that",
        )
        for f in SERVICE_ACCOUNT_FIELDS
    ]
    out += [
        (f"{patch}.?{f}.orValue(false) != true", f, "a specPatch may not put the Ray pods in the node's namespaces")
        for f in HOST_NAMESPACES
    ]
    out.append(
        (
            f"{patch}.?volumes.orValue([]).all(v, !has(v.hostPath))",
            "volumes[].hostPath",
            "a specPatch may not mount a path of the node",
        )
    )
    key = "t.?key.orValue('')"
    out.append(
        (
            f"{patch}.?tolerations.orValue([]).all(t, {key} != '{c.HYPERPOD_TAINT_KEY}' "
            f"&& ({key} != '' || t.?operator.orValue('Equal') != 'Exists'))",
            "tolerations[]",
            "a specPatch may not tolerate HyperPod's node-health-status taint, by its key or as every taint",
        )
    )
    for kind in CONTAINER_LISTS:
        containers = f"{patch}.?{kind}.orValue([])"
        out.append(
            (
                f"{containers}.all(x, x.?securityContext.?privileged.orValue(false) != true)",
                f"{kind}[].securityContext.privileged",
                "a specPatch may not run a privileged container",
            )
        )
        out.append(
            (
                f"{containers}.all(x, size(x.?securityContext.?capabilities.?add.orValue([])) == 0)",
                f"{kind}[].securityContext.capabilities.add",
                "a specPatch may not add Linux capabilities",
            )
        )
    return [(expr, f"{field}.{below}", why) for expr, below, why in out]


def build_spec_patch_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its cluster-wide binding."""
    paths = spec_patch_paths()
    variables = [{"name": _variable(p), "expression": _select("object", p)} for p in paths]
    changed = " || ".join(f"{_select('oldObject', p)} != {_select('object', p)}" for p in paths)
    validations = [
        {
            "expression": expr,
            "message": f"{field}: {why}",
            "reason": "Forbidden",
        }
        for p in paths
        for expr, field, why in _rules(f"variables.{_variable(p)}", ".".join(p))
    ]
    return admission_policy(
        POLICY_NAME,
        resource=c.PLURAL,
        operations=["CREATE", "UPDATE"],
        match_conditions=[
            {"name": "a-spec-patch-is-new-or-changed", "expression": f"request.operation == 'CREATE' || {changed}"}
        ],
        validations=validations,
        variables=variables,
    )
