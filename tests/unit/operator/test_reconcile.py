"""The decision function, driven through a job's life with observed children built by factories."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api import JobStatus
from mmrl_operator.core.builders.raycluster import SPEC_HASH_ANNOTATION, build_raycluster
from mmrl_operator.core.decide import Plan, decide, ts
from mmrl_operator.core.observed import Observed, PodInfo
from tests.support.factories import T0, job, node, raycluster, rayjob, verdicts

STATIC = ["ConfigMap/geo-trainer-config"]  # the trainer identity is the namespace's (runtime/identity.py), not here


def kinds(plan: Plan) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in plan.apply]


def cond(plan: Plan, ctype: str) -> str:
    return next(c["status"] for c in plan.status["conditions"] if c["type"] == ctype)


def advance(j, plan: Plan):
    """The job as the next reconcile reads it: same spec, the status the plan wrote."""
    return (
        job(status=plan.status) if j is None else j.model_copy(update={"status": JobStatus.model_validate(plan.status)})
    )


# The Ray pods of a healthy cluster, created before the attempt started.
PODS = [
    PodInfo("geo-head", "ray-head", "hyperpod-i-0", T0 - timedelta(minutes=5), "Running"),
    PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0 - timedelta(minutes=5), "Running"),
]


def ready_cluster(j) -> dict:
    return raycluster(ready=True, spec_hash=build_raycluster(j)["metadata"]["annotations"][SPEC_HASH_ANNOTATION])


def test_new_job_creates_config_and_cluster_but_no_rayjob_until_ready() -> None:
    j = job()
    plan = decide(j, 1, Observed(), T0)
    # The RayCluster goes right after what its pods need (the ConfigMap, the NetworkPolicy that guards them from their
    # first moment); no RBAC object of its own (the trainer identity is the namespace's).
    assert kinds(plan) == [*STATIC, "NetworkPolicy/geo-ray", "RayCluster/geo"]
    assert plan.status["phase"] == "Provisioning" and plan.status["observedGeneration"] == 1
    assert cond(plan, "Reconciling") == "True" and cond(plan, "Ready") == "False"
    assert plan.status["jobDir"] == "/fsx/mmrl/team/geo-0f1e2d3c"


def test_ready_cluster_starts_attempt_one_once() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    # The first attempt needs only its RayJob: the static children were applied with the cluster, this generation.
    assert kinds(plan) == ["RayJob/geo-a1"]
    assert plan.status["attempt"] == 1 and plan.status["phase"] == "Running"
    assert plan.status["attempts"][0]["cause"] == "initial"
    # The same world observed again (RayJob now exists): nothing new is created.
    j2 = advance(j, plan)
    again = decide(j2, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert kinds(again) == [] and again.status["attempt"] == 1
    assert cond(again, "Training") == "True"


def test_killed_after_creating_rayjob_before_status_write_adopts_it() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))  # status says attempt 0
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert kinds(plan) == [] and plan.status["attempt"] == 1


def test_success_finishes_and_ttl_deletes_cluster_later() -> None:
    j = job({"spec": {"inference": {"enabled": False}}})  # serving: tests/unit/operator/test_serving.py
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    done = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "SUCCEEDED")}), T0)
    assert done.status["phase"] == "Succeeded" and cond(done, "Complete") == "True" and cond(done, "Ready") == "True"
    j = advance(j, done)
    early = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0 + timedelta(seconds=10))
    assert early.delete == [] and early.requeue_after == 3590
    late = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0 + timedelta(seconds=3600))
    assert [(d.kind, d.name) for d in late.delete] == [("RayCluster", "geo")]
    assert [e.reason for e in late.events] == ["ClusterDeleted"]
    # Until the watch reports it gone, the cache holds it as terminating: no second DELETE, no second event.
    terminating = ready_cluster(j)
    terminating["metadata"]["deletionTimestamp"] = ts(T0 + timedelta(seconds=3600))
    again = decide(j, 1, Observed(raycluster=terminating), T0 + timedelta(seconds=3601))
    assert again.delete == [] and again.events == [] and again.requeue_after is None


def test_application_failure_backs_off_then_retries_on_same_cluster() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    failed = decide(
        j,
        1,
        Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED", "AppFailed")}, pods=PODS),
        T0,
    )
    assert failed.status["phase"] == "Recovering" and failed.status["restarts"] == {"application": 1}
    assert failed.status["attempts"][0]["failure"] == "application"
    assert failed.status["nextAttemptAfter"] == ts(T0 + timedelta(seconds=30))
    j = advance(j, failed)
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}, pods=PODS)
    assert kinds(decide(j, 1, world, T0 + timedelta(seconds=10))) == []
    retry = decide(j, 1, world, T0 + timedelta(seconds=31))
    # A retry heals static children deleted while the last attempt ran.
    assert kinds(retry) == [*STATIC, "RayJob/geo-a2"] and retry.status["attempts"][1]["cause"] == "application"


def test_application_budget_exhausted_fails_with_a_message_naming_the_budget() -> None:
    j = job({"spec": {"resilience": {"maxRestarts": 0}}})
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}, pods=PODS), T0)
    assert plan.status["phase"] == "Failed"
    assert "spec.resilience.maxRestarts=0" in plan.status["message"]
    assert cond(plan, "Stalled") == "True" and cond(plan, "Failed") == "True"


def test_node_pending_replacement_stops_attempt_and_charges_infra() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    pods = [PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running")]
    bad = verdicts(node("hyperpod-i-1", "UnschedulablePendingReplacement"))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=pods, nodes=bad), T0)
    assert [(d.kind, d.name) for d in plan.delete] == [("Pod", "geo-worker-1"), ("RayJob", "geo-a1")]
    assert plan.status["restarts"] == {"infra": 1} and plan.status["attempts"][0]["node"] == "hyperpod-i-1"
    assert any(e.reason == "NodeFault" for e in plan.events) and cond(plan, "NodeFaults") == "True"


def test_a_node_gone_with_its_pods_is_named_as_the_fault_that_ended_the_attempt() -> None:
    # HyperPod replaced the worker's node and its pod went with it: no pod names the node any more, but the running
    # attempt remembered where its pods ran, so the node's deletion is seen and named.
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    running = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS), T0)
    assert running.status["attemptNodes"] == ["hyperpod-i-0", "hyperpod-i-1"]
    j = advance(j, running)
    gone = verdicts(node("hyperpod-i-0"), ("hyperpod-i-1", None))
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS[:1], nodes=gone)
    plan = decide(j, 1, world, T0 + timedelta(seconds=30))
    (attempt,) = plan.status["attempts"]
    assert attempt["result"] == "Stopped" and attempt["failure"] == "infra" and attempt["node"] == "hyperpod-i-1"
    assert "node hyperpod-i-1 was deleted" in attempt["message"]
    assert [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    # Between attempts there is nothing to remember; the next attempt records its own nodes.
    assert plan.status.get("attemptNodes", []) == []


def test_degraded_node_marks_attempt_so_its_failure_counts_as_infra() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    checking = verdicts(node("hyperpod-i-1", "Unschedulable"))
    pods = [PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running")]
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=pods, nodes=checking), T0)
    assert plan.delete == [] and plan.status["phase"] == "Running"
    j = advance(j, plan)
    failed = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}), T0)
    assert failed.status["attempts"][0]["failure"] == "infra"


def running_attempt(patch: dict | None = None):
    j = job(patch)
    j = advance(j, decide(j, 1, Observed(), T0))
    return advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))


def with_progress(j, **progress):
    return advance(j, Plan(status={**j.status.wire(), "progress": progress}))


def test_startup_timeout_applies_until_the_attempts_first_heartbeat() -> None:
    j = running_attempt({"spec": {"resilience": {"hangTimeoutSeconds": 60, "startupTimeoutSeconds": 600}}})
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()})
    # Loading for 5 minutes without a heartbeat is fine: the 60 s hang timeout does not apply yet.
    assert decide(j, 1, world, T0 + timedelta(seconds=300)).requeue_after == 300
    plan = decide(j, 1, world, T0 + timedelta(seconds=601))
    assert [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    (attempt,) = plan.status["attempts"]
    assert attempt["failure"] == "hang" and "startupTimeoutSeconds" in attempt["message"]


def test_hang_timeout_starts_at_the_first_heartbeat_of_this_attempt() -> None:
    j = running_attempt({"spec": {"resilience": {"hangTimeoutSeconds": 60, "startupTimeoutSeconds": 600}}})
    beat = T0 + timedelta(seconds=200)
    j = with_progress(j, attempt=1, step=1, heartbeat=ts(beat))
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()})
    assert decide(j, 1, world, beat + timedelta(seconds=30)).requeue_after == 30
    plan = decide(j, 1, world, beat + timedelta(seconds=61))
    assert (
        plan.status["attempts"][0]["failure"] == "hang"
        and "hangTimeoutSeconds" in plan.status["attempts"][0]["message"]
    )


def test_a_heartbeat_left_by_the_previous_attempt_does_not_count() -> None:
    j = running_attempt({"spec": {"resilience": {"hangTimeoutSeconds": 60, "startupTimeoutSeconds": 600}}})
    j = with_progress(j, attempt=0, step=9, heartbeat=ts(T0 + timedelta(seconds=5)))
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()})
    plan = decide(j, 1, world, T0 + timedelta(seconds=120))
    assert plan.status["phase"] == "Running" and plan.requeue_after == 480


def test_resumed_step_is_what_the_attempts_trainer_reported() -> None:
    j = running_attempt()
    j = with_progress(j, attempt=1, resumedFromStep=20, step=20)
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert plan.status["attempts"][0]["resumedFromStep"] == 20
    # A report of another attempt is not this attempt's truth.
    j = with_progress(running_attempt(), attempt=3, resumedFromStep=40, step=40)
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert "resumedFromStep" not in plan.status["attempts"][0]


def test_checkpoints_the_trainer_passed_over_are_recorded_and_said_once() -> None:
    """The trainer found the newest sealed step damaged and resumed from an older one: the attempt keeps why, and one
    Warning event says it (the next pass, with the same report, says nothing more)."""
    why = "global_step_30/policy/optimizer.pt has 7 bytes, its manifest 32"
    j = with_progress(running_attempt(), attempt=1, resumedFromStep=20, step=20, passedOver=[why])
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()})
    plan = decide(j, 1, world, T0)
    assert plan.status["attempts"][0]["passedOver"] == [why]
    (event,) = [e for e in plan.events if e.reason == "CheckpointPassedOver"]
    assert event.type == "Warning" and event.message == f"attempt 1 resumed from step 20, not newer: {why}"
    again = decide(advance(j, plan), 1, world, T0 + timedelta(seconds=5))
    assert not [e for e in again.events if e.reason == "CheckpointPassedOver"]


def ray_failure(code: int, last_line: str) -> dict:
    tail = f"INFO loading\nmmrl-trainer error: {last_line}"
    message = f"Job entrypoint command failed with exit code {code}, last available logs (truncated):\n{tail}"
    return rayjob("Failed", "FAILED", reason="AppFailed", message=message)


def test_trainer_exit_3_fails_the_job_at_once_without_spending_budget() -> None:
    j = running_attempt()
    failed = Observed(
        raycluster=ready_cluster(j), rayjobs={1: ray_failure(3, "dataset.train: /fsx/x not found")}, pods=PODS
    )
    plan = decide(j, 1, failed, T0 + timedelta(seconds=5))
    assert plan.status["phase"] == "Failed" and plan.status.get("restarts", {}) == {}
    stalled = next(c for c in plan.status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidInput"
    assert "dataset.train: /fsx/x not found" in plan.status["message"]
    assert [e.reason for e in plan.events] == ["InvalidInput"]
    again = decide(advance(j, plan), 1, failed, T0 + timedelta(seconds=60))
    assert not [o for o in again.apply if o["kind"] == "RayJob"] and again.status["phase"] == "Failed"


def test_trainer_exit_2_is_invalid_config_and_exit_1_is_retried() -> None:
    j = running_attempt()
    bad = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: ray_failure(2, "config x")}, pods=PODS), T0)
    assert bad.status["phase"] == "Failed" and cond(bad, "Stalled") == "True"
    assert next(c for c in bad.status["conditions"] if c["type"] == "Failed")["reason"] == "InvalidConfig"
    crash = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: ray_failure(1, "boom")}, pods=PODS), T0)
    assert crash.status["phase"] == "Recovering" and crash.status["restarts"] == {"application": 1}


def test_unschedulable_pods_explain_why_the_cluster_is_not_ready() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    why = (
        "Unschedulable",
        'pod geo-head-x cannot be scheduled: 0/3 nodes are available: persistentvolumeclaim "fsx-claim" not found.',
    )
    stuck = PodInfo("geo-head-x", "ray-head", None, T0, "Pending", problem=why)
    plan = decide(j, 1, Observed(raycluster=raycluster(ready=False), pods=[stuck]), T0)
    assert plan.status["phase"] == "Provisioning" and why[1] in plan.status["message"]
    ready = next(c for c in plan.status["conditions"] if c["type"] == "ClusterReady")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Unschedulable", why[1])


def test_suspend_deletes_cluster_and_job_and_resume_does_not_charge_a_restart() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    s = job({"spec": {"suspend": True}}, status=j.status.wire())
    plan = decide(s, 2, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert sorted((d.kind, d.name) for d in plan.delete) == [("RayCluster", "geo"), ("RayJob", "geo-a1")]
    assert plan.status["phase"] == "Suspended" and cond(plan, "Suspended") == "True"
    r = job(status=plan.status)
    resumed = decide(r, 3, Observed(), T0)
    assert "RayCluster/geo" in kinds(resumed) and resumed.status["phase"] == "Recovering"
    r = advance(r, resumed)
    started = decide(r, 3, Observed(raycluster=ready_cluster(r), pods=PODS), T0)
    assert kinds(started)[-1] == "RayJob/geo-a2" and started.status["attempts"][1]["cause"] == "resume"
    assert started.status.get("restarts", {}) == {}


def test_worker_replica_change_reapplies_the_cluster() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    bigger = job({"spec": {"cluster": {"workerGroups": [{"name": "p5", "replicas": 2}]}}}, status=j.status.wire())
    plan = decide(bigger, 2, Observed(raycluster=ready_cluster(j)), T0)
    rc = [o for o in plan.apply if o["kind"] == "RayCluster"]
    assert rc and rc[0]["spec"]["workerGroupSpecs"][0]["replicas"] == 2


def test_failure_with_a_lost_head_pod_is_infra_even_before_the_head_is_replaced() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    workers_only = [p for p in PODS if p.component == "ray-worker"]
    failed = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}, pods=workers_only)
    plan = decide(j, 1, failed, T0 + timedelta(seconds=30))
    assert plan.status["attempts"][0]["failure"] == "infra" and plan.status["restarts"] == {"infra": 1}


def test_failure_after_a_worker_was_recreated_mid_attempt_is_infra() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    recreated = [PODS[0], PodInfo("geo-worker-2", "ray-worker", "hyperpod-i-2", T0 + timedelta(seconds=2), "Running")]
    failed = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}, pods=recreated)
    plan = decide(j, 1, failed, T0 + timedelta(seconds=30))
    assert plan.status["attempts"][0]["failure"] == "infra"


def test_fixing_an_invalid_spec_lets_the_job_start() -> None:
    invalid = {
        "phase": "Failed",
        "message": "invalid spec: spec.lora.rank: ...",
        "observedGeneration": 1,
        "conditions": [{"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "x"}],
    }
    j = job(status=invalid)
    assert decide(j, 1, Observed(), T0).status["phase"] == "Failed"  # same generation: still invalid
    plan = decide(j, 2, Observed(), T0)
    assert plan.status["phase"] == "Provisioning" and "RayCluster/geo" in kinds(plan)
    assert cond(plan, "Stalled") == "False"


def test_next_attempt_waits_until_the_previous_rayjob_and_its_pods_are_gone() -> None:
    j = running_attempt()
    failed = rayjob("Failed", "FAILED", message="boom")
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: failed}, pods=PODS), T0))
    later = T0 + timedelta(minutes=5)  # well past the backoff
    deleting = {**failed, "metadata": {"name": "geo-a1", "deletionTimestamp": ts(T0)}}
    terminating = [PODS[0], PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running", terminating=True)]
    for world in (
        Observed(raycluster=ready_cluster(j), rayjobs={1: deleting}, pods=PODS),
        Observed(raycluster=ready_cluster(j), pods=terminating),
        Observed(raycluster=ready_cluster(j), pods=PODS, nodes=verdicts(("hyperpod-i-1", None))),
    ):
        plan = decide(j, 1, world, later)
        assert "RayJob/geo-a2" not in kinds(plan) and plan.status["phase"] == "Recovering", plan.status["message"]
        assert "waiting before attempt 2" in plan.status["message"]
    assert "RayJob/geo-a2" in kinds(decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), later))


def test_a_cordon_does_not_turn_an_application_failure_into_an_infra_one() -> None:
    j = running_attempt()
    cordoned = node("hyperpod-i-1")
    cordoned["spec"] = {"unschedulable": True}
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS, nodes=verdicts(cordoned))
    j = advance(j, decide(j, 1, world, T0 + timedelta(seconds=5)))
    failed = Observed(
        raycluster=ready_cluster(j), rayjobs={1: rayjob("Failed", "FAILED")}, pods=PODS, nodes=verdicts(cordoned)
    )
    plan = decide(j, 1, failed, T0 + timedelta(seconds=10))
    assert plan.status["attempts"][0]["failure"] == "application"
    assert plan.status["restarts"] == {"application": 1}


def test_raising_the_exhausted_budget_resumes_a_failed_job() -> None:
    j = running_attempt({"spec": {"resilience": {"maxRestarts": 0}}})
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Failed", "FAILED")}, pods=PODS), T0)
    assert plan.status["phase"] == "Failed" and cond(plan, "Stalled") == "True"
    stuck = job({"spec": {"resilience": {"maxRestarts": 0}}}, status=plan.status)
    assert decide(stuck, 1, Observed(raycluster=ready_cluster(stuck), pods=PODS), T0).status["phase"] == "Failed"
    raised = job({"spec": {"resilience": {"maxRestarts": 1}}}, status=plan.status)
    later = T0 + timedelta(minutes=5)
    resumed = decide(raised, 2, Observed(raycluster=ready_cluster(raised), pods=PODS), later)
    assert resumed.status["phase"] == "Running" and "RayJob/geo-a2" in kinds(resumed)
    assert resumed.status["attempts"][1]["cause"] == "application" and "finishedAt" not in resumed.status
    assert [e.reason for e in resumed.events][:1] == ["Resumed"]


def test_a_refused_rayjob_apply_records_no_attempt_and_says_why() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    refused = "RayJob geo-a1 was refused (403): admission webhook denied the request: quota exceeded"
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), apply_error=refused), T0)
    assert plan.status.get("attempt", 0) == 0 and not plan.status.get("attempts")
    stalled = next(c for c in plan.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"], stalled["message"]) == ("True", "ApplyFailed", refused)
    assert refused in plan.status["message"] and [e.reason for e in plan.events] == ["ApplyFailed"]
    assert plan.requeue_after == 30
    again = decide(advance(j, plan), 1, Observed(raycluster=ready_cluster(j), apply_error=refused), T0)
    assert again.events == []  # the same refusal is not announced again


def test_static_children_are_applied_again_after_a_pass_whose_applies_were_refused() -> None:
    """The first pass wrote the RayCluster but one static child was refused (a webhook, a quota, RBAC): the next pass
    applies them again instead of running attempt 1 without it, and once written they are left alone."""
    j = job()
    first = decide(j, 1, Observed(), T0)
    refused = "ConfigMap geo-trainer-config was refused (403): forbidden"
    j = advance(j, decide(j, 1, Observed(apply_error=refused), T0))
    again = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    static = [o for o in first.apply if o["kind"] != "RayCluster"]
    assert [o for o in static if o not in again.apply] == []
    settled = decide(advance(j, again), 1, Observed(raycluster=ready_cluster(j)), T0)
    assert [o["kind"] for o in settled.apply if o in static] == []


def kueue_held(j, suspended: bool = True) -> dict:
    rc = ready_cluster(j)
    rc["spec"]["suspend"] = suspended
    if suspended:
        rc["status"] = {"state": "suspended"}
    return rc


def test_a_cluster_kueue_has_not_admitted_is_queued_and_mmrl_never_sets_suspend() -> None:
    j = job()
    plan = decide(j, 1, Observed(), T0)
    (rc,) = [o for o in plan.apply if o["kind"] == "RayCluster"]
    assert "suspend" not in rc["spec"]  # Kueue owns spec.suspend
    j = advance(j, plan)
    queued = decide(j, 1, Observed(raycluster=kueue_held(j)), T0)
    assert queued.status["phase"] == "Queued" and "RayJob/geo-a1" not in kinds(queued)
    ready = next(c for c in queued.status["conditions"] if c["type"] == "ClusterReady")
    assert ready["reason"] == "QueuedByKueue" and cond(queued, "Reconciling") == "True"


def test_a_kueue_preemption_stops_the_attempt_without_spending_a_budget() -> None:
    j = running_attempt()
    plan = decide(j, 1, Observed(raycluster=kueue_held(j), rayjobs={1: rayjob()}, pods=PODS), T0)
    assert [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    (first,) = plan.status["attempts"]
    assert (first["result"], first["failure"]) == ("Stopped", "preemption") and plan.status.get("restarts", {}) == {}
    assert plan.status["phase"] == "Queued"
    j = advance(j, plan)
    readmitted = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0 + timedelta(seconds=1))
    assert "RayJob/geo-a2" in kinds(readmitted) and readmitted.status["attempts"][1]["cause"] == "preemption"


def test_a_cluster_change_during_an_attempt_waits_and_is_applied_between_attempts() -> None:
    j = running_attempt()
    old_hash = ready_cluster(j)["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    built = [PodInfo(p.name, p.component, p.node, p.created, p.phase, spec_hash=old_hash) for p in PODS]
    patch = {"spec": {"cluster": {"podTemplate": {"labels": {"team": "vision"}}}}}
    changed = job(patch, status=j.status.wire())
    plan = decide(changed, 2, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=built), T0)
    assert "RayCluster/geo" not in kinds(plan) and cond(plan, "SpecChangePending") == "True"
    # The attempt ends; the next pass applies the change, pods built from the old spec are replaced, then attempt 2.
    failed = {1: rayjob("Failed", "FAILED")}
    ended = decide(advance(changed, plan), 2, Observed(raycluster=ready_cluster(j), rayjobs=failed, pods=built), T0)
    ended = decide(advance(changed, ended), 2, Observed(raycluster=ready_cluster(j), rayjobs=failed, pods=built), T0)
    assert "RayCluster/geo" in kinds(ended)
    later = T0 + timedelta(minutes=5)
    after = advance(changed, ended)
    replacing = decide(after, 2, Observed(raycluster=ready_cluster(after), pods=built), later)
    assert sorted(d.name for d in replacing.delete if d.kind == "Pod") == ["geo-head", "geo-worker-1"]
    assert "RayJob/geo-a2" not in kinds(replacing) and cond(replacing, "SpecChangePending") == "False"
    new_hash = ready_cluster(after)["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    fresh = [PodInfo(p.name + "-new", p.component, p.node, later, p.phase, spec_hash=new_hash) for p in PODS]
    assert "RayJob/geo-a2" in kinds(decide(after, 2, Observed(raycluster=ready_cluster(after), pods=fresh), later))


def test_the_next_attempt_waits_for_a_full_set_of_running_ray_pods() -> None:
    """KubeRay's ready counts lag behind pods just removed: after a stopped attempt, the next one starts only when
    the head and every worker exist, are scheduled and Running."""
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    stopped = decide(
        j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Failed", "FAILED")}, pods=PODS), T0
    )
    j = advance(j, stopped)
    later = T0 + timedelta(minutes=5)
    head_only = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS[:1]), later)
    assert "RayJob/geo-a2" not in kinds(head_only) and "1 of 2 Ray pods exist" in head_only.status["message"]
    pending = PodInfo("geo-worker-2", "ray-worker", None, later, "Pending")
    unscheduled = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=[PODS[0], pending]), later)
    assert "RayJob/geo-a2" not in kinds(unscheduled) and "geo-worker-2 is not running" in unscheduled.status["message"]
    ready = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), later)
    assert kinds(ready)[-1] == "RayJob/geo-a2"


def test_only_plans_that_start_or_stop_an_attempt_are_confirmed_on_a_fresh_read() -> None:
    # runtime.reconcile.reconcile decides from the watch caches and re-decides these on fresh LISTs.
    from mmrl_operator.runtime.reconcile import starts_or_stops

    def status_of(j) -> dict:
        return j.status.model_dump(by_alias=True, exclude_none=True, mode="json") if j.status else {}

    j = job()
    first = decide(j, 1, Observed(), T0)
    assert not starts_or_stops(first, {})  # creating the cluster: applies by name are idempotent
    j = advance(j, first)
    start = decide(j, 1, Observed(raycluster=ready_cluster(j)), T0)
    assert starts_or_stops(start, status_of(j))  # creates RayJob geo-a1
    j = advance(j, start)
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS)
    steady = decide(j, 1, world, T0 + timedelta(minutes=1))
    assert not starts_or_stops(steady, status_of(j))
    bad = verdicts(node("hyperpod-i-1", "UnschedulablePendingReplacement"))
    fault = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS, nodes=bad), T0)
    assert starts_or_stops(fault, status_of(j))  # deletes the worker and the RayJob


def test_the_event_of_our_own_status_write_needs_a_pass_only_while_there_is_a_next_step() -> None:
    # runtime.reconcile.settled: handlers skip the watch event of a status write when a pass on it would do nothing.
    from mmrl_operator.runtime.reconcile import settled

    def stored(j, plan: Plan) -> dict:
        return {**j.wire(), "status": plan.status}

    j = job()
    first = decide(j, 1, Observed(), T0)
    # Seen without the RayCluster it just applied, the next pass would apply again: not settled.
    assert not settled(stored(j, first), 1, Observed(), T0)
    # With the cluster in the cache (write-through), the next pass has nothing to do until KubeRay reports.
    pending = raycluster(ready=False, spec_hash=build_raycluster(j)["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    assert settled(stored(j, first), 1, Observed(raycluster=pending), T0)
    # The cluster is ready: the pass that wrote Provisioning was not the last step, a pass must start attempt 1.
    assert not settled(stored(j, first), 1, Observed(raycluster=ready_cluster(j)), T0)


def test_head_recreated_under_a_running_rayjob_stops_the_attempt_as_infra() -> None:
    # KubeRay keeps the RayJob Running when its head is replaced and resubmits the job to the new head: the
    # operator, not KubeRay, ends the attempt so that the rerun is a recorded attempt that resumes.
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    assert j.status.attempts[0].pod_set is not None
    new_head = PodInfo("geo-head-2", "ray-head", "hyperpod-i-3", T0 + timedelta(seconds=40), "Running")
    world = Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=[new_head, PODS[1]])
    plan = decide(j, 1, world, T0 + timedelta(seconds=60))
    (attempt,) = plan.status["attempts"]
    assert attempt["result"] == "Stopped" and attempt["failure"] == "infra"
    assert "lost or recreated" in attempt["message"]
    assert [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    assert plan.status["restarts"] == {"infra": 1}


def test_the_same_pods_under_a_running_rayjob_keep_it_running() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS), T0)
    assert plan.delete == [] and plan.status["attempts"][0]["result"] == "Running"


def test_workers_that_joined_the_previous_head_are_replaced_before_the_next_attempt() -> None:
    # After a head is recreated KubeRay reports the cluster ready while the old workers' raylets still wait for
    # the previous GCS: their containers started before the new head pod existed.
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0))
    later = T0 + timedelta(seconds=30)
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}, pods=PODS[1:]), later))
    head = PodInfo("geo-head-2", "ray-head", "hyperpod-i-3", later, "Running", started=later)
    old_worker = PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running", started=T0)
    after = later + timedelta(minutes=5)
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=[head, old_worker]), after)
    assert [(d.kind, d.name) for d in plan.delete] == [("Pod", "geo-worker-1")]
    assert "RayJob/geo-a2" not in kinds(plan) and "previous head" in plan.status["message"]
    restarted = PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running", started=later)
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=[head, restarted]), after)
    assert "RayJob/geo-a2" in kinds(plan)
