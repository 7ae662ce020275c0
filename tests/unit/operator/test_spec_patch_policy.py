"""The specPatch admission policy is generated from the job model: every specPatch field gets every rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from mmrl_api.spec_patch_rules import spec_patch_paths
from mmrl_operator.codegen.spec_patch_policy import build_spec_patch_policy


def test_the_ray_pod_template_spec_patch_is_found_in_the_model() -> None:
    assert spec_patch_paths() == [("spec", "cluster", "podTemplate", "specPatch")]


def test_a_spec_patch_inside_a_list_is_refused_rather_than_left_uncovered() -> None:
    class Template(BaseModel):
        spec_patch: dict[str, Any] | None = None

    class Spec(BaseModel):
        templates: list[Template] = []

    with pytest.raises(NotImplementedError, match=r"spec\.templates"):
        spec_patch_paths(Spec)


def test_every_rule_names_its_field_under_the_spec_patch() -> None:
    policy, binding = build_spec_patch_policy()
    fields = {v["message"].split(":")[0] for v in policy["spec"]["validations"]}
    under = "spec.cluster.podTemplate.specPatch."
    assert all(f.startswith(under) for f in fields)
    expected = {"serviceAccountName", "serviceAccount", "automountServiceAccountToken", "volumes[].hostPath"}
    expected |= {"hostNetwork", "hostPID", "hostIPC"}
    expected.add("tolerations[]")  # of HyperPod's node-health-status taint
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        expected |= {f"{kind}[].securityContext.privileged", f"{kind}[].securityContext.capabilities.add"}
    assert {f.removeprefix(under) for f in fields} == expected
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["multimodalrljobs"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
