"""Status tells the user why nothing happens: pods the scheduler cannot place (a missing claim, no node with the
GPUs) and containers the kubelet cannot start show up on the job, as ClusterReady's reason and message and in the
phase message, within one resync."""

from __future__ import annotations

import pytest

from mmrl_local.cluster import hyperpod as hp
from mmrl_operator.cli.status import render_status
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def cluster_ready(jobs, name: str) -> dict | None:
    return next((c for c in jobs.status(name).get("conditions") or [] if c["type"] == "ClusterReady"), None)


def reason_is(jobs, name: str, reason: str):
    def check():
        cond = cluster_ready(jobs, name)
        return cond if cond and cond["status"] == "False" and cond["reason"] == reason else None

    return check


def test_a_missing_checkpoint_claim_is_reported_with_the_schedulers_message(jobs, operator, kuberay, nodes_ready):
    missing = {"spec": {"checkpoint": {"s3": None, "pvc": {"claimName": "no-such-claim", "mountPath": "/fsx"}}}}
    jobs.create(cluster_job("geo", missing))

    cond = wait_until(reason_is(jobs, "geo", "Unschedulable"), 30, what="ClusterReady=False/Unschedulable")

    assert 'persistentvolumeclaim "no-such-claim" not found' in cond["message"]
    status = jobs.status("geo")
    assert status["phase"] == "Provisioning" and "no-such-claim" in status["message"]
    text = render_status(jobs.get("geo"), [])
    assert text.count('persistentvolumeclaim "no-such-claim" not found') == 2  # the job's message, ClusterReady's


def test_no_node_with_enough_gpus_is_reported(jobs, operator, kuberay, hyperpod_nodes):
    hyperpod_nodes.cpu()  # no GPU node at all
    jobs.create(cluster_job("geo"))
    cond = wait_until(reason_is(jobs, "geo", "Unschedulable"), 30, what="ClusterReady=False/Unschedulable")
    assert "nvidia.com/gpu" in cond["message"] or "node(s) didn't match" in cond["message"]


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "CrashLoopBackOff"])
def test_containers_that_cannot_start_are_reported(jobs, operator, kuberay, nodes_ready, reason):
    stuck = {"spec": {"cluster": {"podTemplate": {"annotations": {hp.CONTAINER_WAITING: reason}}}}}
    jobs.create(cluster_job("geo", stuck))
    cond = wait_until(reason_is(jobs, "geo", reason), 30, what=f"ClusterReady=False/{reason}")
    assert cond["message"].startswith("pod geo-") and reason in cond["message"]
    assert reason in jobs.status("geo")["message"]
