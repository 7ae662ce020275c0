"""spec.preflight: the image self-test runs as attempt 0 (`<name>-a0`) before attempt 1, once, and its failure
ends the job as InvalidConfig without touching a restart budget."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api.contract import SELFTEST
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.decide import decide
from mmrl_operator.core.names import attempt_of, rayjob_name
from mmrl_operator.core.observed import Observed
from tests.support.factories import T0, job, node, rayjob, verdicts
from tests.unit.operator.test_reconcile import PODS, advance, cond, kinds, ray_failure, ready_cluster

PREFLIGHT_JOB = {"spec": {"preflight": True}}


def provisioned(patch: dict | None = None):
    """A job with spec.preflight whose RayCluster was created by the first pass (status written)."""
    j = job({**PREFLIGHT_JOB, **(patch or {})})
    return advance(j, decide(j, 1, Observed(), T0))


def condition(plan, ctype: str) -> dict:
    return next(c for c in plan.status["conditions"] if c["type"] == ctype)


def test_attempt_zero_is_the_preflight_name_and_runs_the_selftest_on_the_job_volume() -> None:
    assert rayjob_name("geo", 0) == "geo-a0" and attempt_of("geo-a0", "geo") == 0
    assert attempt_of("geo-a01", "geo") is None and attempt_of("geo-a00", "geo") is None
    entry = build_rayjob(job(PREFLIGHT_JOB), 0)["spec"]["entrypoint"].split()
    assert entry[:4] == ["python", "-m", "mmrl_trainer", SELFTEST]
    # The driver runs on the GPU-less head: the job's backend is named, not guessed from the head's hardware.
    assert entry[entry.index("--backend") + 1] == "skyrl"
    assert entry[entry.index("--workdir") + 1] == "/fsx/mmrl/team/geo-0f1e2d3c/preflight"
    assert "--config" not in entry  # the trainer's own config is attempt 1's business


def test_the_preflight_is_planned_before_attempt_one() -> None:
    j = provisioned()
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    assert kinds(plan) == ["RayJob/geo-a0"]
    assert plan.status["attempt"] == 0 and plan.status.get("attempts", []) == []
    assert plan.status["preflight"]["phase"] == "Running" and plan.status["preflight"]["rayJob"] == "geo-a0"
    assert condition(plan, "PreflightPassed")["status"] == "Unknown"
    # Observed again while it runs: nothing is created, attempt 1 waits.
    j = advance(j, plan)
    again = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={0: rayjob()}, pods=PODS), T0)
    assert kinds(again) == [] and again.status["attempt"] == 0 and again.status["phase"] == "Running"


def test_a_passed_preflight_starts_attempt_one_in_the_same_pass_and_never_runs_again() -> None:
    j = provisioned()
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    passed = Observed(raycluster=ready_cluster(j), rayjobs={0: rayjob("Complete", "SUCCEEDED")}, pods=PODS)
    plan = decide(j, 1, passed, T0 + timedelta(minutes=3))
    assert kinds(plan) == ["RayJob/geo-a1"] and plan.status["attempt"] == 1
    assert plan.status["preflight"]["phase"] == "Succeeded" and cond(plan, "PreflightPassed") == "True"
    assert plan.status["attempts"][0]["cause"] == "initial"
    # Later passes (attempt 1 running, a0 still listed) never touch the preflight again.
    j = advance(j, plan)
    later = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={0: passed.rayjobs[0], 1: rayjob()}), T0)
    assert kinds(later) == [] and later.status["preflight"]["phase"] == "Succeeded"


def test_a_failed_preflight_is_invalid_config_with_no_budget_charged() -> None:
    j = provisioned()
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    failed = Observed(
        raycluster=ready_cluster(j), rayjobs={0: ray_failure(1, "self-test failed at hardware: no GPU")}, pods=PODS
    )
    plan = decide(j, 1, failed, T0 + timedelta(minutes=2))
    assert plan.status["phase"] == "Failed" and kinds(plan) == []
    assert plan.status.get("restarts", {}) == {} and plan.status["attempt"] == 0
    assert condition(plan, "Failed")["reason"] == "InvalidConfig" and cond(plan, "Stalled") == "True"
    assert plan.status["preflight"] == {
        **plan.status["preflight"],
        "phase": "Failed",
        "message": "self-test failed at hardware: no GPU",
    }
    assert "self-test failed at hardware: no GPU" in plan.status["message"]
    assert cond(plan, "PreflightPassed") == "False" and [e.reason for e in plan.events] == ["InvalidConfig"]
    again = decide(advance(j, plan), 1, failed, T0 + timedelta(minutes=5))
    assert kinds(again) == [] and again.status["phase"] == "Failed"


def test_an_operator_restart_between_create_and_status_write_adopts_the_preflight() -> None:
    j = provisioned()  # status never recorded the preflight, but its RayJob exists
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={0: rayjob()}, pods=PODS), T0)
    assert kinds(plan) == [] and plan.status["preflight"]["phase"] == "Running"


def test_a_preflight_rayjob_that_vanished_before_its_verdict_runs_again() -> None:
    j = provisioned()
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0 + timedelta(minutes=1))
    assert kinds(plan) == ["RayJob/geo-a0"] and plan.status["attempt"] == 0
    assert "PreflightLost" in [e.reason for e in plan.events]


def test_a_node_fault_under_the_preflight_reruns_it_free_of_charge() -> None:
    j = provisioned()
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    bad = verdicts(node("hyperpod-i-1", "UnschedulablePendingReplacement"))
    world = Observed(raycluster=ready_cluster(j), rayjobs={0: rayjob()}, pods=PODS, nodes=bad)
    plan = decide(j, 1, world, T0 + timedelta(minutes=1))
    assert ("RayJob", "geo-a0") in [(d.kind, d.name) for d in plan.delete]
    assert plan.status["preflight"]["phase"] == "Pending" and plan.status.get("restarts", {}) == {}
    assert plan.status["phase"] != "Failed"


def test_a_job_without_preflight_starts_attempt_one_directly() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    assert kinds(plan) == ["RayJob/geo-a1"] and "preflight" not in plan.status
    assert "PreflightPassed" not in [c["type"] for c in plan.status["conditions"]]


def test_the_preflight_of_a_skyrl_backend_job_without_a_shared_volume_fails_at_once_naming_the_fields() -> None:
    j = provisioned({"spec": {"preflight": True, "checkpoint": {"pvc": None, "s3": {"uri": "s3://mmrl-test/ckpt"}}}})
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    assert kinds(plan) == [] and plan.status["phase"] == "Failed"
    assert condition(plan, "Failed")["reason"] == "InvalidConfig" and plan.status.get("restarts", {}) == {}
    assert "spec.checkpoint.pvc" in plan.status["preflight"]["message"]


def test_an_adopted_attempt_one_records_the_preflight_it_followed_as_passed() -> None:
    j = provisioned()
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))  # preflight Running in status
    # The pass that saw a0 succeed created a1 and died before its status write.
    world = Observed(raycluster=ready_cluster(j), rayjobs={0: rayjob("Complete", "SUCCEEDED"), 1: rayjob()}, pods=PODS)
    plan = decide(j, 1, world, T0 + timedelta(minutes=3))
    assert kinds(plan) == [] and plan.status["attempt"] == 1
    assert plan.status["preflight"]["phase"] == "Succeeded" and cond(plan, "PreflightPassed") == "True"
