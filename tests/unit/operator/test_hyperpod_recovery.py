"""HyperPod's recovery model as the decision sees it: a RayCluster deleted under a running attempt (Kueue preempting
or evicting it, or a person) is recreated and the job resumes without touching the application budget; a deep
health check in progress is no fault; HyperPod's fault labels reach the NodeFault event and the attempt."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api import constants as c
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed, PodInfo
from tests.support.factories import T0, node, rayjob, verdicts
from tests.unit.operator.test_reconcile import PODS, advance, cond, kinds, ready_cluster, running_attempt

NO_KUEUE = {"spec": {"cluster": {"kueue": None}}}


def test_a_deleted_raycluster_is_recreated_and_the_attempt_stops_on_the_infra_budget_without_kueue() -> None:
    j = running_attempt(NO_KUEUE)
    plan = decide(j, 1, Observed(raycluster=None, rayjobs={1: rayjob()}), T0)
    assert "RayCluster/geo" in kinds(plan) and [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    (first,) = plan.status["attempts"]
    assert (first["result"], first["failure"]) == ("Stopped", "infra") and "RayCluster was deleted" in first["message"]
    assert plan.status["restarts"] == {"infra": 1}
    j = advance(j, plan)
    again = decide(j, 1, Observed(raycluster=ready_cluster(j), pods=PODS), T0 + timedelta(hours=1))  # past backoff
    assert "RayJob/geo-a2" in kinds(again) and again.status["attempts"][1]["cause"] == "infra"
    assert again.status["restarts"] == {"infra": 1}


def test_a_raycluster_deleted_under_kueue_is_a_preemption_that_spends_no_budget() -> None:
    j = running_attempt()  # the example job submits through Kueue
    plan = decide(j, 1, Observed(raycluster=None, rayjobs={1: rayjob("Failed", "FAILED", message="cluster gone")}), T0)
    (first,) = plan.status["attempts"]
    assert (first["result"], first["failure"]) == ("Stopped", "preemption")
    assert plan.status.get("restarts", {}) == {} and plan.status["phase"] == "Queued"
    assert "RayCluster/geo" in kinds(plan)


def test_a_raycluster_being_deleted_stops_the_attempt_before_ray_reports_anything() -> None:
    j = running_attempt(NO_KUEUE)
    going = ready_cluster(j)
    going["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    plan = decide(j, 1, Observed(raycluster=going, rayjobs={1: rayjob()}, pods=PODS), T0)
    assert plan.status["attempts"][0]["failure"] == "infra" and plan.status.get("restarts") == {"infra": 1}


def test_a_deep_health_check_in_progress_is_not_a_fault() -> None:
    j = running_attempt()
    checking = node("hyperpod-i-1", c.HEALTH_UNSCHEDULABLE, **{c.HYPERPOD_DEEP_HEALTH_LABEL: "InProgress"})
    checking["spec"] = {"taints": [{"key": c.HYPERPOD_TAINT_KEY, "value": "Unschedulable", "effect": "NoSchedule"}]}
    plan = decide(j, 1, Observed(ready_cluster(j), {1: rayjob()}, PODS, verdicts(checking)), T0)
    assert cond(plan, "NodeFaults") == "False" and not plan.status.get("degradedNodes")
    assert not any(e.reason == "NodeFault" for e in plan.events) and plan.status["phase"] == "Running"
    j = advance(j, plan)
    # The trainer then fails on its own: the check it ran beside does not make that the infrastructure's fault.
    failed = decide(j, 1, Observed(ready_cluster(j), {1: rayjob("Complete", "FAILED")}, PODS), T0)
    assert failed.status["attempts"][0]["failure"] == "application"


def test_hyperpod_fault_labels_are_in_the_node_fault_event_and_the_stopped_attempt() -> None:
    j = running_attempt()
    labels = {c.HYPERPOD_FAULT_TYPES_LABEL: "GpuXid", c.HYPERPOD_FAULT_REASONS_LABEL: "Xid79"}
    bad = verdicts(node("hyperpod-i-1", c.HEALTH_PENDING_REPLACEMENT, **labels))
    pods = [PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0, "Running")]
    plan = decide(j, 1, Observed(ready_cluster(j), {1: rayjob()}, pods, bad), T0)
    (event,) = [e for e in plan.events if e.reason == "NodeFault"]
    assert "fault-types=GpuXid, fault-reasons=Xid79" in event.message
    assert "fault-reasons=Xid79" in plan.status["attempts"][0]["message"]


def test_a_raycluster_deleted_under_kueue_is_recreated_only_once_kueue_removed_its_workload() -> None:
    # Kueue finds a job's Workloads by the owner's name: a cluster recreated while its predecessor's Workload is still
    # there is admitted with it, stopped when it goes, and never starts under its own (tests/cluster/test_kueue.py).
    j = running_attempt()
    lost = Observed(raycluster=None, rayjobs={1: rayjob()}, kueue_leftover="raycluster-geo-a7520")
    plan = decide(j, 1, lost, T0)
    assert "RayCluster/geo" not in kinds(plan) and [(d.kind, d.name) for d in plan.delete] == [("RayJob", "geo-a1")]
    assert plan.status["attempts"][0]["failure"] == "preemption" and plan.status.get("restarts", {}) == {}
    assert plan.requeue_after is not None and plan.requeue_after <= 1
    j = advance(j, plan)
    waiting = decide(j, 1, Observed(raycluster=None, kueue_leftover="raycluster-geo-a7520"), T0 + timedelta(seconds=1))
    assert "RayCluster/geo" not in kinds(waiting) and waiting.status["phase"] == "Queued"
    assert "once Kueue has removed Workload raycluster-geo-a7520" in waiting.status["message"]
    gone = decide(j, 1, Observed(raycluster=None), T0 + timedelta(seconds=2))
    assert "RayCluster/geo" in kinds(gone)
