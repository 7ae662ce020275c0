"""decide() is total: no status read back (written by the trainer or anyone with the status right), no shape of a
child object or of vLLM's answer, makes a pass raise, and no pass plans more than one new RayJob.

Property-based: hypothesis builds thousands of observed worlds from JSON-ish values, biased towards the shapes the
decision reads, and runs them through the same path the controller takes (`split_status`, then the decision). The
unguarded `run` is what is checked, so the guard in `decide` cannot hide a case.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmrl_api import JobStatus
from mmrl_api.status import PHASES
from mmrl_operator.core.decide import decide, run
from mmrl_operator.core.decision import Decision, Plan
from mmrl_operator.core.health import node_verdict
from mmrl_operator.core.observed import Observed, PodInfo, ServingObserved
from mmrl_operator.core.status_input import split_status
from tests.support.factories import T0, job

# `make test` runs 2,000 worlds (about a minute on 2 cores); MMRL_PROPERTY_EXAMPLES=20000 for a longer search.
EXAMPLES = int(os.environ.get("MMRL_PROPERTY_EXAMPLES", "1500"))
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=HEALTH)
STATUS_SETTINGS = settings(max_examples=max(1, EXAMPLES // 3), deadline=None, suppress_health_check=HEALTH)

json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.floats(allow_nan=True), st.text(max_size=20)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
times = st.one_of(
    st.none(),
    st.sampled_from(["2026-12-01T12:00:00Z", "2026-12-01T11:00:00Z", "2026-12-01T13:00:00+00:00", "2026-12-01"]),
    st.text(max_size=30),
    st.integers(),
)
small = st.one_of(st.integers(0, 5), st.integers(-3, 10**7), json_scalar)


def maybe(value: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(value, json_value)


progress = st.fixed_dictionaries(
    {},
    optional={
        "attempt": small,
        "resumedFromStep": small,
        "step": small,
        "totalSteps": small,
        "rewardMean": maybe(st.floats()),
        "lastCheckpoint": maybe(st.fixed_dictionaries({"step": small, "path": maybe(st.text(max_size=10))})),
        "heartbeat": times,
    },
)
adapter_config = st.dictionaries(
    st.sampled_from(
        [
            "r",
            "lora_alpha",
            "target_modules",
            "rank_pattern",
            "modules_to_save",
            "peft_type",
            "bias",
            "use_dora",
            "init_lora_weights",
            "base_model_name_or_path",
            "layer_replication",
        ]
    ),
    json_value,
    max_size=8,
)
adapter = st.fixed_dictionaries(
    {"path": maybe(st.just("/fsx/mmrl/adapter")), "rank": small},
    optional={"config": maybe(adapter_config), "maxLoraRank": small, "sha256": json_scalar, "baseModel": json_scalar},
)
attempt = st.fixed_dictionaries(
    {
        "index": small,
        "rayJob": maybe(st.just("geo-a1")),
        "cause": maybe(st.sampled_from(["initial", "application", "infra", "hang", "preemption", "resume"])),
    },
    optional={
        "result": maybe(st.sampled_from(["Running", "Succeeded", "Failed", "Stopped"])),
        "failure": maybe(st.sampled_from(["application", "infra", "hang", "preemption"])),
        "startTime": times,
        "endTime": times,
        "podSet": json_scalar,
        "node": json_scalar,
    },
)
condition = st.fixed_dictionaries(
    {"type": maybe(st.sampled_from(["Ready", "Stalled", "StatusValid"])), "status": maybe(st.just("True"))},
    optional={"reason": json_scalar, "message": json_scalar},
)
raw_status = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "phase": maybe(st.sampled_from(PHASES)),
            "attempt": small,
            "attempts": maybe(st.lists(attempt, max_size=4)),
            "restarts": maybe(st.dictionaries(st.sampled_from(["infra", "application"]), small)),
            "progress": maybe(progress),
            "adapter": maybe(adapter),
            "conditions": maybe(st.lists(condition, max_size=3)),
            "observedGeneration": small,
            "nextAttemptAfter": times,
            "finishedAt": times,
            "message": json_scalar,
            "foreignObjects": maybe(st.lists(st.text(max_size=10), max_size=3)),
            "degradedNodes": maybe(st.lists(st.text(max_size=10), max_size=3)),
        },
    ),
)
kuberay_states = st.sampled_from(["", "Running", "Complete", "Failed", "ValidationFailed", "Initializing", "New"])
job_states = st.sampled_from(["", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "PENDING"])
rayjob = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({}, optional={"deletionTimestamp": times, "name": json_scalar})},
    optional={
        "status": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "jobDeploymentStatus": maybe(kuberay_states),
                    "jobStatus": maybe(job_states),
                    "message": json_scalar,
                    "reason": json_scalar,
                },
            )
        )
    },
)
raycluster = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("geo")}, optional={"generation": small, "annotations": maybe(st.just({}))}
        )
    },
    optional={
        "spec": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "workerGroupSpecs": maybe(
                        st.lists(st.fixed_dictionaries({}, optional={"replicas": small, "numOfHosts": small}))
                    ),
                    "suspend": json_scalar,
                },
            )
        ),
        "status": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "state": maybe(st.sampled_from(["ready", "suspended", ""])),
                    "readyWorkerReplicas": small,
                    "observedGeneration": small,
                    "conditions": maybe(st.lists(condition, max_size=2)),
                },
            )
        ),
    },
)
pod = st.builds(
    PodInfo,
    name=st.text(min_size=1, max_size=8),
    component=st.sampled_from(["ray-head", "ray-worker", ""]),
    node=st.one_of(st.none(), st.sampled_from(["n1", "n2", "n3"])),
    created=st.none(),
    phase=st.sampled_from(["Running", "Pending", "Failed", ""]),
    reason=st.one_of(st.none(), st.sampled_from(["Evicted", "NodeLost", "x"])),
    terminating=st.booleans(),
    problem=st.one_of(st.none(), st.tuples(st.text(max_size=8), st.text(max_size=20))),
    spec_hash=st.one_of(st.none(), st.text(max_size=6)),
)
node = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "metadata": st.fixed_dictionaries(
                {
                    "labels": st.dictionaries(
                        st.sampled_from(
                            [
                                "sagemaker.amazonaws.com/node-health-status",
                                "sagemaker.amazonaws.com/deep-health-check-status",
                            ]
                        ),
                        st.sampled_from(
                            [
                                "Schedulable",
                                "Unschedulable",
                                "UnschedulablePendingReplacement",
                                "Failed",
                                "InProgress",
                                "Passed",
                            ]
                        ),
                    )
                }
            )
        },
        optional={"status": st.just({"conditions": [{"type": "Ready", "status": "False"}]})},
    ),
)
workload = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.just("geo-inference")}, optional={"generation": small})},
    optional={
        "status": maybe(
            st.dictionaries(
                st.sampled_from(
                    ["observedGeneration", "replicas", "updatedReplicas", "availableReplicas", "conditions"]
                ),
                json_value,
            )
        )
    },
)
serving = st.builds(
    ServingObserved,
    deployment=st.one_of(st.none(), workload),
    service=st.one_of(st.none(), workload),
    models=st.one_of(
        st.none(), json_value, st.lists(st.fixed_dictionaries({"id": json_scalar, "parent": json_scalar}))
    ),
    probe_error=st.one_of(st.none(), st.text(max_size=20)),
    pod_problem=st.one_of(st.none(), st.tuples(st.text(max_size=8), st.text(max_size=20))),
    check_failure=st.one_of(st.none(), st.text(max_size=20)),
)
observed = st.builds(
    Observed,
    raycluster=st.one_of(st.none(), raycluster),
    rayjobs=st.dictionaries(st.one_of(st.integers(1, 5), st.integers(1, 999_999)), rayjob, max_size=4),
    pods=st.lists(pod, max_size=4),
    nodes=st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), node, max_size=3).map(
        lambda nodes: {name: node_verdict(name, n) for name, n in nodes.items()}
    ),
    serving=serving,
    foreign=st.lists(st.text(max_size=10), max_size=3).map(tuple),
    name_conflict=st.one_of(st.none(), st.text(max_size=20)),
    apply_error=st.one_of(st.none(), st.text(max_size=20)),
)
SPECS = [
    None,
    {"spec": {"inference": {"enabled": True}}},
    {"spec": {"suspend": True}},
    {"spec": {"ttlSecondsAfterFinished": 0, "resilience": {"hangTimeoutSeconds": 60, "maxRestarts": 0}}},
]


def checked(plan: Plan) -> None:
    rayjobs = [o for o in plan.apply if o.get("kind") == "RayJob"]
    assert len(rayjobs) <= 1, [o["metadata"]["name"] for o in rayjobs]
    JobStatus.model_validate(plan.status)  # the status written back is one the next pass can read


@SETTINGS
@given(
    status=raw_status,
    seen=observed,
    spec=st.sampled_from(SPECS),
    generation=st.integers(1, 3),
    later=st.integers(-(10**6), 10**7),
)
def test_no_observed_world_makes_the_decision_raise(
    status: Any, seen: Observed, spec: dict | None, generation: int, later: int
) -> None:
    clean, problems = split_status(status)
    j = job(spec, status=clean)
    now = T0 + timedelta(seconds=later)
    plan = run(Decision(j, generation, Observed(**{**seen.__dict__, "status_problems": tuple(problems)}), now))
    checked(plan)
    if problems:
        assert any(c["type"] == "StatusValid" and c["status"] == "False" for c in plan.status["conditions"])


@STATUS_SETTINGS
@given(status=raw_status)
def test_a_status_read_back_keeps_every_field_that_validates(status: Any) -> None:
    clean, problems = split_status(status)
    JobStatus.model_validate(clean)
    if isinstance(status, dict) and not problems:
        assert clean == status


def test_a_malformed_trainer_report_becomes_a_condition_and_one_warning() -> None:
    raw = {"phase": "Running", "attempt": 0, "progress": {"heartbeat": 12, "step": "three"}, "adapter": {"rank": -1}}
    clean, problems = split_status(raw)
    assert "heartbeat" not in clean["progress"] and "adapter" not in clean
    assert any("status.progress.heartbeat" in p for p in problems)
    j = job(status=clean)
    plan = decide(j, 1, Observed(status_problems=tuple(problems)), T0)
    cond = next(c for c in plan.status["conditions"] if c["type"] == "StatusValid")
    assert cond["status"] == "False" and cond["reason"] == "MalformedStatus" and "heartbeat" in cond["message"]
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["MalformedStatus"]
    again = decide(
        j.model_copy(update={"status": JobStatus.model_validate(plan.status)}),
        1,
        Observed(raycluster=None, status_problems=tuple(problems)),
        T0,
    )
    assert not [e for e in again.events if e.reason == "MalformedStatus"]


def test_an_unexpected_error_stalls_that_job_alone() -> None:
    j = job()
    broken = Observed(pods=[None])  # type: ignore[list-item]  # a shape no reader expects
    plan = decide(j, 1, broken, T0)
    stalled = next(c for c in plan.status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "DecisionError"
    assert not plan.apply and not plan.delete and plan.requeue_after == 60
    assert [e.reason for e in plan.events] == ["DecisionError"]
