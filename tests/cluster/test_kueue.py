"""Kueue owns RayCluster.spec.suspend: a cluster it has not admitted shows as Queued, a preemption stops the attempt
without spending a restart, and nothing mmrl applies ever touches the field (checked through managedFields)."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_operator.jsonmerge import merge_patch
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def kueue_sets_suspend(custom: client.CustomObjectsApi, ns: str, name: str, suspend: bool) -> None:
    """What Kueue's controller does on admission and preemption, under its own field manager."""
    custom.patch_namespaced_custom_object(
        "ray.io", "v1", ns, "rayclusters", name, {"spec": {"suspend": suspend}}, field_manager="kueue"
    )


def suspend_managers(rc: dict) -> set[str]:
    return {
        m["manager"]
        for m in rc["metadata"].get("managedFields") or []
        if "f:suspend" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    }


def test_kueue_queues_admits_and_preempts_without_spending_budgets(jobs, operator, kuberay, nodes_ready, custom):
    kuberay.script("geo-a1", "hang")
    kuberay.script("geo-a2", "succeed-after=1")
    queued = {"spec": {"cluster": {"kueue": {"queueName": "team-queue"}}}}
    jobs.create(cluster_job("geo", merge_patch(MULTI_NODE, queued)))
    wait_until(lambda: jobs.ray_names("rayclusters") == ["geo"], 30, what="the RayCluster")
    kueue_sets_suspend(custom, jobs.ns, "geo", True)  # not admitted yet
    wait_until(lambda: jobs.status("geo").get("phase") == "Queued", 30, what="phase Queued")
    assert "team-queue" in jobs.status("geo")["message"] and jobs.ray_names("rayjobs") == []

    kueue_sets_suspend(custom, jobs.ns, "geo", False)  # admitted
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    kueue_sets_suspend(custom, jobs.ns, "geo", True)  # preempted
    wait_until(lambda: jobs.status("geo")["attempts"][0]["result"] == "Stopped", 30, what="attempt 1 stopped")
    status = jobs.status("geo")
    assert status["phase"] == "Queued" and status["attempts"][0]["failure"] == "preemption"
    # A worker-count change makes mmrl re-apply the RayCluster: it must not take spec.suspend from Kueue.
    groups = jobs.get("geo")["spec"]["cluster"]["workerGroups"]
    jobs.patch("geo", {"spec": {"cluster": {"workerGroups": [{**groups[0], "replicas": 2}]}}})
    wait_until(lambda: jobs.ray("rayclusters")[0]["spec"]["workerGroupSpecs"][0]["replicas"] == 2, 30, what="re-apply")
    assert jobs.ray("rayclusters")[0]["spec"]["suspend"] is True

    kueue_sets_suspend(custom, jobs.ns, "geo", False)  # re-admitted
    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 60, what="attempt 2 to succeed")
    status = jobs.status("geo")
    assert [a["cause"] for a in status["attempts"]] == ["initial", "preemption"]
    assert status.get("restarts", {}) == {}
    (rc,) = jobs.ray("rayclusters")
    assert suspend_managers(rc) == {"kueue"}
