"""The trainer status policy: generated from the status model, matched to the namespace's trainer identity, and
scoped to one job's Ray pods by name, with no pod name accepted for two jobs (the proof in the policy module's
docstring, checked here on generated names; tests/cluster/test_trainer_status_policy.py checks the CEL itself)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mmrl_api.cluster import GROUP_NAME_RULE, MAX_GROUP_NAME, MAX_WORKER_GROUPS
from mmrl_api.constants import MAX_JOB_NAME_LENGTH
from mmrl_api.status import JobStatus
from mmrl_operator.codegen.trainer_status_policy import (
    TRAINER_STATUS_FIELDS,
    build_trainer_status_policy,
    ray_pod_of_job,
)
from mmrl_operator.core.names import RAY_POD_PREFIX_MAX, ray_head_pod_prefix, ray_worker_pod_prefix

JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # the CRD's metadata.name rule (DNS-1035)
# Few letters and many dashes, so that names share prefixes and pieces (where a mix-up would be); long ones too, so
# that KubeRay's cut at 50 characters is reached.
_pieces = st.lists(st.text("ab0", min_size=1, max_size=3), min_size=1, max_size=6).map("-".join)
_long = st.text("ab0-", min_size=30, max_size=MAX_JOB_NAME_LENGTH)
job_names = (
    (_pieces | _long)
    .map(lambda n: "a" + n[1:])
    .filter(lambda n: bool(JOB_NAME.match(n)) and len(n) <= MAX_JOB_NAME_LENGTH)
)
group_names = st.text("ab0", min_size=1, max_size=3) | st.text("ab0", min_size=1, max_size=MAX_GROUP_NAME)
group_lists = st.lists(group_names, min_size=1, max_size=MAX_WORKER_GROUPS, unique=True)
generated = st.text("bcdfghjklmnpqrstvwxz2456789", min_size=5, max_size=5)  # the apiserver's generateName alphabet


def test_every_status_field_but_the_trainers_is_protected() -> None:
    policy, binding = build_trainer_status_policy()
    fields = [v for v in policy["spec"]["validations"] if "belongs to the operator" in v.get("message", "")]
    protected = {v["message"].split("; status.")[1].split(" ")[0] for v in fields}
    wire = {f.alias or n for n, f in JobStatus.model_fields.items()}
    assert protected == wire - set(TRAINER_STATUS_FIELDS) and "phase" in protected and "progress" not in protected
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["multimodalrljobs/status"]


def test_the_policy_matches_the_namespaces_trainer_identity_and_the_jobs_own_legacy_one() -> None:
    policy, _ = build_trainer_status_policy()
    (match,) = policy["spec"]["matchConditions"]
    assert "':' + 'mmrl-trainer'" in match["expression"]
    assert "object.metadata.name + '-trainer'" in match["expression"]
    pod_rules = [v for v in policy["spec"]["validations"] if "variables.sharedIdentity" in v["expression"]]
    assert len(pod_rules) == 2  # a token bound to a pod; that pod one of the job's Ray pods


def test_kuberays_cut_never_reaches_the_job_name() -> None:
    # `<job>-` and at least one character of a group survive KubeRay's 50-character prefix, and the head's prefix is
    # never cut: the proof in the policy module rests on both.
    assert MAX_JOB_NAME_LENGTH + 1 < RAY_POD_PREFIX_MAX and MAX_GROUP_NAME >= 1
    longest = "j" * MAX_JOB_NAME_LENGTH
    assert ray_head_pod_prefix(longest) == f"{longest}-head-"
    assert ray_worker_pod_prefix(longest, "g" * MAX_GROUP_NAME) == f"{longest}-{'g' * 9}-worker-"
    assert len(ray_worker_pod_prefix(longest, "g" * MAX_GROUP_NAME)) + 5 <= 63


def test_a_dash_in_a_group_name_would_make_one_pod_two_jobs_and_the_api_refuses_it() -> None:
    pod = "geo-x-y-worker-b2c4d"
    assert ray_pod_of_job(pod, "geo", ["x-y"]) and ray_pod_of_job(pod, "geo-x", ["y"])
    assert not GROUP_NAME_RULE.holds("x-y") and GROUP_NAME_RULE.holds("gpu2")


@st.composite
def pod_of(draw: st.DrawFn, job: str, groups: list[str]) -> str:
    """A name KubeRay v1.5 gives a Ray pod of the job's RayCluster."""
    kind = draw(st.sampled_from(["head", "deterministic-head", "worker"]))
    if kind == "deterministic-head":
        return ray_head_pod_prefix(job)[:-1]
    prefix = ray_head_pod_prefix(job) if kind == "head" else ray_worker_pod_prefix(job, draw(st.sampled_from(groups)))
    return prefix + draw(generated)


def claimants(pod: str) -> list[str]:
    """The job names that could claim a pod name: those the name starts with, up to a dash."""
    cuts = [pod[:i] for i, ch in enumerate(pod) if ch == "-"]
    return [n for n in cuts if JOB_NAME.match(n) and len(n) <= MAX_JOB_NAME_LENGTH]


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_no_pod_name_of_one_job_is_accepted_for_another(data: st.DataObject) -> None:
    job, groups = data.draw(job_names, "job"), data.draw(group_lists, "groups")
    pod = data.draw(pod_of(job, groups), "pod")
    assert ray_pod_of_job(pod, job, groups)
    # The other job: one named like the start of the pod's name (the only kind that could claim it), or any; its
    # groups: pieces of the pod's name where they are group names, or any.
    other = data.draw(st.sampled_from(claimants(pod)) | job_names if claimants(pod) else job_names, "other")
    pieces = [p for p in pod.split("-") if GROUP_NAME_RULE.holds(p) and len(p) <= MAX_GROUP_NAME]
    their_groups = data.draw(
        st.lists(st.sampled_from(pieces) | group_names, min_size=1, max_size=MAX_WORKER_GROUPS, unique=True),
        "their groups",
    )
    if other != job:
        assert not ray_pod_of_job(pod, other, their_groups)


def test_only_kuberays_names_for_the_job_are_accepted() -> None:
    groups = ["gpu", "p5"]
    for pod in ("geo-head-b2c4d", "geo-head", "geo-gpu-worker-b2c4d", "geo-p5-worker-zz999"):
        assert ray_pod_of_job(pod, "geo", groups), pod
    near_misses = [
        "geo-head-b2c4",  # 4 generated characters
        "geo-head-b2c4dd",  # 6
        "geo-head-b2-4d",  # a dash among them
        "geo-head-B2C4D",  # upper case
        "geo-heads",
        "geo-cpu-worker-b2c4d",  # no such group
        "geo-gpu-worker",
        "geo-gpu-b2c4d",
        "geo-a1-hbk2d",  # the RayJob's submitter pod: not a Ray pod
        "geo-inference-7d9f8-b2c4d",  # the vLLM Deployment's pod
        "xgeo-head-b2c4d",
        "",
    ]
    assert [p for p in near_misses if ray_pod_of_job(p, "geo", groups)] == []
