"""`mmrl status` rendering of a job the operator has worked on."""

from __future__ import annotations

from mmrl_operator.cli.status import render_status
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed
from tests.support.factories import T0, job, rayjob
from tests.unit.operator.test_reconcile import PODS, advance, ready_cluster


def test_status_shows_phase_attempts_budgets_and_events() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    j = advance(
        j, decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob("Complete", "FAILED")}, pods=PODS), T0)
    )
    text = render_status(
        {
            "metadata": {"name": "geo", "namespace": "team"},
            "spec": {"resilience": {"maxRestarts": 2}},
            "status": j.status.wire(),
        },
        [{"type": "Warning", "reason": "AttemptFailed", "message": "attempt 1 failed"}],
    )
    assert "phase=Recovering" in text and "attempt=1" in text
    assert "application 1/2" in text
    assert "#1 geo-a1 initial -> Failed [application]" in text
    assert "AttemptFailed" in text and "Stalled" in text


def test_each_distinct_message_is_printed_once() -> None:
    why = "pod geo-head-x cannot be scheduled: 0/3 nodes are available"
    status = {
        "phase": "Provisioning",
        "message": f"waiting for the Ray cluster to be ready: {why}",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "Provisioning", "message": f"waiting: {why}"},
            {"type": "Reconciling", "status": "True", "reason": "Provisioning", "message": f"waiting: {why}"},
            {"type": "ClusterReady", "status": "False", "reason": "Unschedulable", "message": why},
        ],
    }
    text = render_status({"metadata": {"name": "geo", "namespace": "team"}, "status": status}, [])
    assert text.count(f"waiting: {why}") == 1 and text.count(why) == 3  # job message, first condition, ClusterReady
    assert "Unschedulable" in text


def test_the_preflight_is_listed_as_attempt_zero() -> None:
    j = job({"spec": {"preflight": True}})
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    text = render_status({"metadata": {"name": "geo", "namespace": "team"}, "status": j.status.wire()}, [])
    assert "#0 geo-a0 preflight -> Running" in text


def test_a_multi_turn_jobs_episodes_are_shown() -> None:
    progress = {"step": 3, "episodes": {"successRate": 0.5, "turns": 4.25, "tokens": 96.0}}
    text = render_status({"metadata": {"name": "maze", "namespace": "team"}, "status": {"progress": progress}}, [])
    assert "episodes: success 0.5  turns 4.25  tokens 96.0" in text
    assert "episodes" not in render_status({"metadata": {"name": "geo", "namespace": "team"}, "status": {}}, [])


def test_the_adapters_evaluation_and_the_gates_verdict_are_shown() -> None:
    status = {
        "adapter": {"evaluation": {"heldOutReward": 0.62, "baselineReward": 0.31, "step": 30}},
        "conditions": [{"type": "Promoted", "status": "False", "reason": "GateMissed", "message": "not promoted"}],
    }
    text = render_status({"metadata": {"name": "geo", "namespace": "team"}, "status": status}, [])
    assert "held-out reward: adapter 0.62 (step 30), base model 0.31  promoted: False" in text


def test_the_tracking_runs_survive_the_operators_passes_and_are_shown() -> None:
    tracking = {
        "tensorboard": "/mnt/checkpoints/team/geo-0f1e2d3c/tracking/tensorboard",
        "mlflow": {"runId": "abc", "experimentId": "3", "url": "http://mlflow:5000/#/experiments/3/runs/abc"},
        "wandb": {"runId": "team-geo-0f1e2d3c"},
    }
    j = job(status={"phase": "Running", "attempt": 1, "tracking": tracking})
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j)), T0))
    assert j.status.wire()["tracking"] == tracking  # the trainer's field: the operator never rewrites it
    text = render_status({"metadata": {"name": "geo", "namespace": "team"}, "status": j.status.wire()}, [])
    assert "tensorboard: /mnt/checkpoints/team/geo-0f1e2d3c/tracking/tensorboard" in text
    assert "mlflow: http://mlflow:5000/#/experiments/3/runs/abc" in text
    assert "wandb: run team-geo-0f1e2d3c (offline)" in text
