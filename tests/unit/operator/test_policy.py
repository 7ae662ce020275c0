"""The trainer-status admission policy is generated from the status model."""

from __future__ import annotations

from mmrl_api.status import JobStatus
from mmrl_operator.codegen.trainer_status_policy import TRAINER_STATUS_FIELDS, build_trainer_status_policy


def test_every_status_field_but_the_trainers_is_protected() -> None:
    policy, binding = build_trainer_status_policy()
    protected = {v["message"].split("; status.")[1].split(" ")[0] for v in policy["spec"]["validations"]}
    wire = {f.alias or n for n, f in JobStatus.model_fields.items()}
    assert protected == wire - set(TRAINER_STATUS_FIELDS) and "phase" in protected and "progress" not in protected
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["multimodalrljobs/status"]
