"""HyperPod's recovery model on the real control plane. HyperPod's own Ray support reboots or replaces nodes and
never resubmits a Ray job; Kueue (task governance) may evict or delete a whole RayCluster. Here: a RayCluster
deleted or evicted under a running attempt is recreated (or readmitted) and the job resumes from its latest
complete checkpoint without spending the application budget; a deep health check in progress is no fault, while
HyperPod's fault labels reach the NodeFault event; and Ray pods prefer nodes whose deep health check Passed."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.addons.kueue_incluster import queues
from mmrl_local.cluster import hyperpod as hp
from mmrl_local.cluster import nodes
from tests.cluster.test_faults import ray_notices_later, ray_pod, start_training
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.kueue import quota_for, set_active, workload_condition, workload_of
from tests.support.operator import Jobs, phases_until_done, wait_until
from tests.support.standin_trainer import StandInTrainer

pytestmark = pytest.mark.cluster

CHECKPOINT = {"step": 10, "path": "s3://mmrl-test/ckpt/global_step_10"}


@pytest.fixture
def kuberay(kuberay_strict):
    """KubeRay's deletion and termination timing; fails the test if two attempts ever overlap."""
    return kuberay_strict


def events(jobs: Jobs, name: str, reason: str) -> list[str]:
    """Messages of the job's events with this reason, oldest first."""
    items = jobs.core.list_namespaced_event(jobs.ns, field_selector=f"involvedObject.name={name}").items
    ordered = sorted(items, key=lambda e: int(e.metadata.resource_version))
    return [e.message for e in ordered if e.reason == reason]


def cluster_uid(jobs: Jobs) -> str | None:
    clusters = jobs.ray("rayclusters")
    return clusters[0]["metadata"]["uid"] if clusters else None


def delete_raycluster(custom: client.CustomObjectsApi, ns: str, name: str) -> None:
    """What Kueue does to preempt a workload on HyperPod task governance, or a person with kubectl."""
    custom.delete_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, ns, "rayclusters", name)


def checkpoints_of_attempt_1(trainer: StandInTrainer) -> None:
    """What attempt 1 left in the job's checkpoint directory: step 10 complete, step 12 cut short by the loss."""
    trainer.save(10)
    trainer.save(12, sealed=False)


def assert_resumes_from_the_checkpoint(jobs: Jobs, trainer: StandInTrainer, name: str, attempt: int) -> None:
    """Attempt `attempt` is training: its trainer starts (reads the config the operator rendered, finds the newest
    complete checkpoint, reports it), and the job's status records, for this attempt, the step it resumed from:
    the last complete checkpoint's, not the half-written newer one."""
    assert trainer.config().checkpoint.dir == jobs.status(name)["jobDir"]  # the job's own directory
    resumed = trainer.start(attempt)
    assert resumed is not None and resumed.step == 10
    recorded = wait_until(
        lambda: jobs.status(name)["attempts"][attempt - 1].get("resumedFromStep"),
        30,
        what=f"attempt {attempt}'s resumedFromStep in the job's status",
    )
    assert recorded == 10 == jobs.status(name)["progress"]["lastCheckpoint"]["step"]


def test_a_raycluster_deleted_under_a_running_attempt_is_recreated_and_resumes_on_the_infra_budget(
    control_plane, jobs, operator, kuberay, hyperpod_nodes, custom, tmp_path
):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    start_training(jobs, kuberay)  # attempt 1 hangs at step 12 with step 10 checkpointed
    kuberay.script("geo-a2", "hang")  # attempt 2 runs until its trainer has said where it resumed
    trainer = StandInTrainer(jobs, "geo", tmp_path / "s3", control_plane.kubeconfig)
    checkpoints_of_attempt_1(trainer)
    before = cluster_uid(jobs)
    delete_raycluster(custom, jobs.ns, "geo")
    wait_until(
        lambda: jobs.status("geo").get("attempt") == 2 and jobs.condition("geo", "Training") == "True",
        90,
        what="attempt 2 training",
    )
    assert_resumes_from_the_checkpoint(jobs, trainer, "geo", 2)
    kuberay.script("geo-a2", "succeed-after=0")
    assert phases_until_done(jobs, "geo", timeout=120)[-1] == "Succeeded"
    status = jobs.status("geo")
    first, second = status["attempts"]
    assert (first["result"], first["failure"]) == ("Stopped", "infra")
    assert "RayCluster was deleted" in first["message"]
    assert (second["cause"], second["result"]) == ("infra", "Succeeded")
    # No application budget: without Kueue nothing in the platform deletes a cluster to schedule work, so the
    # loss is the infrastructure's (docs/hyperpod.md).
    assert status["restarts"] == {"infra": 1}
    assert cluster_uid(jobs) not in (None, before) and jobs.ray_names("rayclusters") == ["geo"]
    assert [a.get("resumedFromStep") for a in status["attempts"]] == [None, 10]


def test_kueue_evicting_then_deleting_the_raycluster_resumes_twice_without_spending_any_budget(
    control_plane, jobs, operator, kuberay, hyperpod_nodes, custom, kueue, tmp_path
):
    """Through the real Kueue: an eviction (here a deactivated Workload; a preemption or Kueue's own pods-ready
    timeout evict by the same suspension) and then HyperPod's task governance deleting the RayCluster, which it does
    to preempt and to requeue a workload whose node outlasted its recovery timeout."""
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    kuberay.script("geo-a*", "hang,fail-on-node-loss")  # attempt 3 succeeds once its trainer has started (below)
    queue = "hyperpod-ns-team-localqueue"
    kueue.apply(queues(queue, jobs.ns, {"cpu": "0"}))  # no quota yet: admitted once it fits what the job asks
    jobs.create(cluster_job("geo", {"spec": {"cluster": {"kueue": {"queueName": queue}}}}))
    workload = wait_until(lambda: workload_of(custom, jobs.ns, "geo"), 30, what="Kueue's Workload")
    kueue.apply(queues(queue, jobs.ns, quota_for(workload, times=2))[1:2])
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    jobs.patch_status("geo", {"progress": {"step": 12, "lastCheckpoint": CHECKPOINT}})
    trainer = StandInTrainer(jobs, "geo", tmp_path / "s3", control_plane.kubeconfig)
    checkpoints_of_attempt_1(trainer)

    # Kueue evicts the workload by suspending the RayCluster; KubeRay then deletes its pods. Readmitted later.
    set_active(custom, jobs.ns, "geo", False)
    wait_until(lambda: jobs.status("geo")["attempts"][0]["result"] == "Stopped", 30, what="attempt 1 stopped")
    assert jobs.status("geo")["phase"] == "Queued" and workload_condition(custom, jobs.ns, "geo", "Evicted") == "True"
    set_active(custom, jobs.ns, "geo", True)
    wait_until(
        lambda: jobs.status("geo").get("attempt") == 2 and jobs.condition("geo", "Training") == "True",
        60,
        what="attempt 2 training",
    )
    assert_resumes_from_the_checkpoint(jobs, trainer, "geo", 2)

    # HyperPod's task governance preempts by deleting the whole RayCluster, head included.
    before = cluster_uid(jobs)
    delete_raycluster(custom, jobs.ns, "geo")
    # Recreated once Kueue has removed the deleted cluster's Workload (Observed.kueue_leftover says why).
    wait_until(
        lambda: jobs.status("geo").get("attempt") == 3 and jobs.condition("geo", "Training") == "True",
        120,
        what="attempt 3 training",
    )
    assert_resumes_from_the_checkpoint(jobs, trainer, "geo", 3)
    kuberay.script("geo-a3", "succeed-after=0")
    assert phases_until_done(jobs, "geo", timeout=120)[-1] == "Succeeded"
    status = jobs.status("geo")
    assert [(a["cause"], a["result"], a.get("failure")) for a in status["attempts"]] == [
        ("initial", "Stopped", "preemption"),
        ("preemption", "Stopped", "preemption"),
        ("preemption", "Succeeded", None),
    ]
    assert status.get("restarts", {}) == {}
    assert cluster_uid(jobs) not in (None, before)
    assert [a.get("resumedFromStep") for a in status["attempts"]] == [None, 10, 10]


def test_a_deep_health_check_in_progress_is_no_fault_and_fault_labels_reach_the_event(
    jobs, operator, kuberay, hyperpod_nodes, core
):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    kuberay.script("geo-a*", "hang")
    head_on_cpu = {"spec": {"cluster": {"head": {"nodeSelector": {hp.INSTANCE_GROUP_NAME: "controller"}}}}}
    jobs.create(cluster_job("geo", head_on_cpu))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    checked = ray_pod(core, jobs.ns, "geo", "ray-worker").spec.node_name
    faulty = ray_pod(core, jobs.ns, "geo", "ray-head").spec.node_name
    nodes.start_deep_health_check(core, checked)  # InProgress, Unschedulable and tainted: all by design
    # A fault on the other node, after the check started: once the operator has reported it, it has also judged
    # the node under the check (one watch of nodes, in order).
    nodes.report_fault(core, faulty, "GpuXid", "Xid79")
    wait_until(lambda: jobs.status("geo").get("degradedNodes"), 30, what="a degraded node")
    status = jobs.status("geo")
    assert status["degradedNodes"] == [faulty] and jobs.condition("geo", "NodeFaults") == "True"
    (fault,) = events(jobs, "geo", "NodeFault")
    assert faulty in fault and "fault-types=GpuXid, fault-reasons=Xid79" in fault and checked not in fault
    assert status["phase"] == "Running" and jobs.ray_names("rayjobs") == ["geo-a1"]


def test_ray_pods_prefer_nodes_whose_deep_health_check_passed(jobs, operator, kuberay, hyperpod_nodes, core):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(4)  # joined without a deep health check (no label)
    vetted = set(hyperpod_nodes.gpu(2, labels={hp.DEEP_HEALTH_CHECK_STATUS: hp.DeepHealth.PASSED.value}))
    (checking,) = hyperpod_nodes.gpu(1)
    nodes.start_deep_health_check(core, checking)
    # Both vetted nodes usable by the scheduler first: one still tainted not-ready would send a worker elsewhere.
    hyperpod_nodes.wait_schedulable(sorted(vetted), timeout=90)
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo", MULTI_NODE, workers=2))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    workers = core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_COMPONENT}=ray-worker").items
    # Two of seven GPU nodes: by chance both would land on the vetted ones once in 21 runs.
    assert {p.spec.node_name for p in workers} == vetted


def test_a_node_whose_fault_ended_an_attempt_is_avoided_until_it_is_replaced(
    jobs, operator, kuberay, hyperpod_nodes, core
):
    hyperpod_nodes.cpu()
    first, spare = hyperpod_nodes.gpu(2)
    core.patch_node(spare, {"spec": {"unschedulable": True}})  # attempt 1's worker can only go to `first`
    kuberay.script("geo-a*", "hang")
    head_on_cpu = {"spec": {"cluster": {"head": {"nodeSelector": {hp.INSTANCE_GROUP_NAME: "controller"}}}}}
    jobs.create(cluster_job("geo", head_on_cpu))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    assert ray_pod(core, jobs.ns, "geo", "ray-worker").spec.node_name == first
    # HyperPod reboots the node; it comes back healthy under the same name. KubeRay recreates the worker only once
    # both nodes are free: were one freed a moment before the other, the scheduler could place the worker there
    # with no choice to make, and the preference would go untested.
    with ray_notices_later(kuberay):
        nodes.start_reboot(core, first)
        wait_until(lambda: jobs.status("geo")["attempts"][0]["result"] != "Running", 60, what="attempt 1 to end")
        nodes.end_reboot(core, first)
        core.patch_node(spare, {"spec": {"unschedulable": False}})
    wait_until(
        lambda: jobs.status("geo").get("attempt") == 2 and jobs.condition("geo", "Training") == "True",
        120,
        what="attempt 2 training",
    )
    status = jobs.status("geo")
    ((avoided),) = status["avoidedNodes"]
    assert avoided["node"] == first and avoided["attempt"] == 1 and avoided["reason"] in ("PendingReboot", "NotReady")
    assert ray_pod(core, jobs.ns, "geo", "ray-worker").spec.node_name == spare
    (cluster,) = jobs.ray("rayclusters")
    assert cluster["metadata"]["annotations"]["mmrl.dev/avoided-nodes"] == first
    # HyperPod replaces the node: a new instance under another name. The job forgets it without any pod of its own
    # on that node (its RayCluster's annotation is what ties the node to the job).
    hyperpod_nodes.replace(first)  # the fixture deletes the new instance at teardown too
    wait_until(lambda: not jobs.status("geo").get("avoidedNodes"), 30, what="the replaced node forgotten")
    assert any(f"node {first} was replaced" in m for m in events(jobs, "geo", "AvoidedNodeReplaced"))
    assert jobs.status("geo")["attempt"] == 2 and jobs.ray_names("rayjobs") == ["geo-a2"]
