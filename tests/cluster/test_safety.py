"""The safety core on the real control plane: an operator restart never mistakes an unseen node for a deleted
one, and never stops healthy training."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_local.operator_process import OperatorProcess
from mmrl_operator import constants as c
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def static_nodes(core: client.CoreV1Api, count: int, prefix: str) -> list[str]:
    """Plain Node objects no kubelet runs and nothing may schedule on. Named to sort first, they make the
    operator's initial node watch deliver the job's real nodes late."""
    names = [f"{prefix}-{i:04d}" for i in range(count)]
    for name in names:
        core.create_node(
            {
                "metadata": {"name": name, "labels": {"mmrl-test/static": "true"}},
                "spec": {"taints": [{"key": "mmrl-test/static", "value": "true", "effect": "NoSchedule"}]},
            }
        )
    return names


def passes(op: OperatorProcess) -> float:
    """Reconcile passes the operator finished so far (0 while its metrics endpoint is not up yet)."""
    try:
        return op.metric("mmrl_reconcile_duration_seconds_count")
    except OSError:
        return 0.0


def ray_pods(core: client.CoreV1Api, ns: str, job: str) -> set[str]:
    pods = core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}={job}").items
    return {p.metadata.name for p in pods if not p.metadata.deletion_timestamp}


def test_operator_restarts_never_stop_training_on_nodes_its_caches_have_not_seen(
    jobs, kuberay, hyperpod_nodes, control_plane, namespace, core, tmp_path
):
    fillers = static_nodes(core, 400, "aaa-static")
    try:
        hyperpod_nodes.cpu()
        hyperpod_nodes.gpu(2)
        kuberay.script("geo-a*", "hang")
        with OperatorProcess(control_plane.kubeconfig, tmp_path / "op-0.log", namespaces=[namespace]):
            jobs.create(cluster_job("geo"))
            wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
        before = ray_pods(core, namespace, "geo")
        for i in range(1, 4):
            with OperatorProcess(control_plane.kubeconfig, tmp_path / f"op-{i}.log", namespaces=[namespace]) as op:
                wait_until(lambda op=op: passes(op) >= 3, 60, what="three reconcile passes")
        status = jobs.status("geo")
        assert status["attempt"] == 1 and status["attempts"][0]["result"] == "Running"
        assert status.get("restarts", {}) == {} and not status.get("degradedNodes")
        assert ray_pods(core, namespace, "geo") == before
        assert jobs.ray_names("rayjobs") == ["geo-a1"]
    finally:
        for name in fillers:
            core.delete_node(name)


def test_a_cordoned_node_does_not_make_an_application_failure_infra(jobs, operator, kuberay, hyperpod_nodes, core):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    kuberay.script("geo-a1", "fail-after=4,message=loss is NaN")
    kuberay.script("geo-a2", "succeed-after=1")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    worker = next(
        p for p in core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo").items if p.spec.node_name
    )
    core.patch_node(worker.spec.node_name, {"spec": {"unschedulable": True}})  # kubectl cordon
    try:
        wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 90, what="the job to succeed")
    finally:
        core.patch_node(worker.spec.node_name, {"spec": {"unschedulable": False}})
    status = jobs.status("geo")
    assert status["attempts"][0]["failure"] == "application" and status["restarts"] == {"application": 1}


def test_raising_maxrestarts_resumes_a_job_that_ran_out_of_restarts(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a1", "fail-after=1,message=CUDA error")
    kuberay.script("geo-a2", "succeed-after=1")
    jobs.create(cluster_job("geo", {"spec": {"resilience": {"maxRestarts": 0}}}))
    wait_until(lambda: jobs.status("geo").get("phase") == "Failed", 60, what="the budget to run out")
    assert next(x for x in jobs.status("geo")["conditions"] if x["type"] == "Stalled")["reason"] == (
        "RestartBudgetExhausted"
    )
    job_dir = jobs.status("geo")["jobDir"]

    jobs.patch("geo", {"spec": {"resilience": {"maxRestarts": 1}}})

    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 60, what="the resumed job to succeed")
    status = jobs.status("geo")
    assert [a["result"] for a in status["attempts"]] == ["Failed", "Succeeded"]
    assert status["jobDir"] == job_dir and jobs.ray_names("rayjobs") == ["geo-a1", "geo-a2"]
    assert "Resumed" in jobs.events("geo")
