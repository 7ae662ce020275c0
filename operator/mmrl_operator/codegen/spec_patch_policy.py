"""Admission policy that keeps a job's `specPatch` from taking more than the job's own pods' powers.

`specPatch` is a JSON merge patch onto every Ray pod spec, so whoever may create a MultimodalRLJob could otherwise
have the operator create pods that run as any ServiceAccount of the namespace, join the node's network, PID or IPC
namespace, mount a host path, run privileged or with added capabilities, or tolerate HyperPod's node-health-status
taint (pods on nodes HyperPod is checking, rebooting or replacing). This ValidatingAdmissionPolicy refuses
a job whose specPatch sets any of those, with a message naming the field. The rules are written once, in
mmrl_api/spec_patch_rules.py, which `mmrl validate` checks too; the specPatch fields are found in the job model, so a
new one is covered the day it is added. It is on unless the platform turns it off (the chart's
`specPatchPolicy.enabled`), as one that already trusts its job authors with pods may. Only creates and updates that
change a specPatch are judged, so a job admitted before the policy was switched on never gets stuck (the operator
can still update its metadata and delete it). A specPatch may still loosen the Ray pods' securityContext (an image
that runs as root needs `runAsNonRoot: false`): the Pod Security Standards on the namespace judge that.
"""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c
from mmrl_api.spec_patch_rules import RULES, message, spec_patch_paths
from mmrl_operator.codegen.trainer_status_policy import admission_policy

POLICY_NAME = "mmrl-restrict-spec-patch"


def _select(root: str, path: tuple[str, ...]) -> str:
    """The value at `path` below `root`, or an empty object when any step is missing."""
    return f"{root}.?{'.?'.join(path)}.orValue({{}})"


def _variable(path: tuple[str, ...]) -> str:
    """The CEL variable holding the specPatch at `path`, e.g. clusterPodTemplateSpecPatch."""
    return path[1] + "".join(p[0].upper() + p[1:] for p in path[2:])


def build_spec_patch_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its cluster-wide binding."""
    paths = spec_patch_paths()
    variables = [{"name": _variable(p), "expression": _select("object", p)} for p in paths]
    changed = " || ".join(f"{_select('oldObject', p)} != {_select('object', p)}" for p in paths)
    validations = [
        {"expression": rule.cel(f"variables.{_variable(p)}"), "message": message(p, rule), "reason": "Forbidden"}
        for p in paths
        for rule in RULES
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
