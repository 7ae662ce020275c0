"""The KubeRay stand-in makes RayClusters and RayJobs behave like KubeRay v1.5 on the fake nodes: pods with
KubeRay's labels, lost pods recreated, ready status, suspend, and scripted or really-run RayJob outcomes."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_local.common import procs
from mmrl_local.standin import kuberay_standin
from tests.cluster.ray_factories import RAY, raycluster, rayjob

pytestmark = pytest.mark.cluster


def get(custom: client.CustomObjectsApi, namespace: str, plural: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(*RAY, namespace, plural, name)


def ready_cluster(custom, namespace: str, name: str, wait, **kwargs) -> dict:
    custom.create_namespaced_custom_object(*RAY, namespace, "rayclusters", raycluster(name, **kwargs))
    return wait(
        lambda: (c := get(custom, namespace, "rayclusters", name)).get("status", {}).get("state") == "ready" and c,
        what=f"RayCluster {name} ready",
    )


def finished_job(custom, namespace: str, name: str, wait, timeout: float = 30) -> dict:
    return wait(
        lambda: (
            (j := get(custom, namespace, "rayjobs", name).get("status", {})).get("jobDeploymentStatus")
            in ("Complete", "Failed")
            and j
        ),
        timeout=timeout,
        what=f"RayJob {name} to finish",
    )


@pytest.fixture
def ray_nodes(hyperpod_nodes):
    hyperpod_nodes.cpu()
    return hyperpod_nodes.gpu(2)


def test_raycluster_becomes_ready_through_the_standin(custom, core, namespace, kuberay, ray_nodes, wait) -> None:
    cluster = ready_cluster(custom, namespace, "rc", wait, workers=2)

    status = cluster["status"]
    assert status["readyWorkerReplicas"] == status["desiredWorkerReplicas"] == 2
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "HeadPodReady": "True",
        "RayClusterProvisioned": "True",
    }
    pods = core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=rc").items
    assert sorted(p.metadata.labels["ray.io/node-type"] for p in pods) == ["head", "worker", "worker"]
    head = next(p for p in pods if p.metadata.labels["ray.io/node-type"] == "head")
    assert status["head"]["podName"] == head.metadata.name and status["head"]["podIP"] == head.status.pod_ip
    for pod in pods:
        assert pod.metadata.labels["app.kubernetes.io/created-by"] == "kuberay-operator"
        assert pod.metadata.labels["mmrl.dev/job"] == "test"  # template labels are kept
        assert pod.metadata.owner_references[0].uid == cluster["metadata"]["uid"]
        assert pod.status.phase == "Running"
    workers = [p for p in pods if p.metadata.labels["ray.io/node-type"] == "worker"]
    assert {p.spec.node_name for p in workers} == set(ray_nodes)  # 8 GPUs each: one worker per node
    assert core.read_namespaced_service("rc-head-svc", namespace).spec.selector["ray.io/cluster"] == "rc"


def test_lost_worker_pod_is_recreated(custom, core, namespace, kuberay, ray_nodes, wait) -> None:
    ready_cluster(custom, namespace, "rc", wait, workers=2)
    victim = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=worker").items[0]
    core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)

    def replaced() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=worker").items
        names = {p.metadata.name for p in pods if p.status.phase == "Running"}
        return len(names) == 2 and victim.metadata.name not in names

    wait(replaced, what="a new worker pod")


def test_suspended_raycluster_has_no_pods(custom, core, namespace, kuberay, ray_nodes, wait) -> None:
    ready_cluster(custom, namespace, "rc", wait, workers=1)
    custom.patch_namespaced_custom_object(*RAY, namespace, "rayclusters", "rc", {"spec": {"suspend": True}})
    wait(
        lambda: get(custom, namespace, "rayclusters", "rc")["status"].get("state") == "suspended",
        what="state suspended",
    )
    wait(lambda: not core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=rc").items, what="pods deleted")


def test_scripted_rayjob_succeeds(custom, namespace, kuberay, ray_nodes, wait) -> None:
    ready_cluster(custom, namespace, "rc", wait)
    custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", rayjob("ok", "rc", script="succeed-after=1"))

    status = finished_job(custom, namespace, "ok", wait)

    assert status["jobDeploymentStatus"] == "Complete"
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["rayClusterName"] == "rc"
    assert status["jobId"].startswith("ok-")
    assert status["startTime"] <= status["endTime"]


def test_scripted_rayjob_fails_with_app_failed(custom, namespace, kuberay, ray_nodes, wait) -> None:
    ready_cluster(custom, namespace, "rc", wait)
    kuberay.script("bad-a*", "fail-after=0.5,message=loss is NaN")
    custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", rayjob("bad-a1", "rc"))

    status = finished_job(custom, namespace, "bad-a1", wait)

    assert (status["jobDeploymentStatus"], status["jobStatus"], status["reason"]) == ("Failed", "FAILED", "AppFailed")
    assert status["message"] == "loss is NaN"


def test_rayjob_waits_in_initializing_until_its_cluster_is_ready(custom, namespace, kuberay, wait) -> None:
    custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", rayjob("early", "missing"))
    status = wait(lambda: get(custom, namespace, "rayjobs", "early").get("status"), what="a status")
    assert status["jobDeploymentStatus"] == "Initializing"


def test_rayjob_fails_when_a_node_of_its_cluster_is_lost(
    custom, namespace, kuberay, ray_nodes, hyperpod_nodes, wait
) -> None:
    ready_cluster(custom, namespace, "rc", wait)
    custom.create_namespaced_custom_object(
        *RAY, namespace, "rayjobs", rayjob("fragile", "rc", script="succeed-after=600,fail-on-node-loss")
    )
    wait(
        lambda: get(custom, namespace, "rayjobs", "fragile").get("status", {}).get("jobStatus") == "RUNNING",
        what="RayJob running",
    )

    new = hyperpod_nodes.replace(ray_nodes[0])

    status = finished_job(custom, namespace, "fragile", wait)
    assert (status["jobStatus"], status["reason"]) == ("FAILED", "AppFailed")
    assert ray_nodes[0] in status["message"] or "deleted" in status["message"]
    # KubeRay replaces the lost worker; it lands on the new instance.
    wait(
        lambda: get(custom, namespace, "rayclusters", "rc")["status"]["readyWorkerReplicas"] == 2,
        what="the cluster to heal",
    )
    assert new in hyperpod_nodes.names


@pytest.mark.parametrize(
    ("entrypoint", "expected"),
    [
        ('test "$MMRL_TEST_VALUE" = from-head-template && echo trained', "SUCCEEDED"),
        ("echo boom >&2; exit 3", "FAILED"),
    ],
)
def test_run_mode_executes_the_entrypoint(custom, namespace, kuberay, ray_nodes, wait, entrypoint, expected) -> None:
    ready_cluster(custom, namespace, "rc", wait, head_env={"MMRL_TEST_VALUE": "from-head-template"})
    custom.create_namespaced_custom_object(
        *RAY, namespace, "rayjobs", rayjob("real", "rc", entrypoint=entrypoint, script="run")
    )

    status = finished_job(custom, namespace, "real", wait)

    assert status["jobStatus"] == expected
    if expected == "FAILED":
        # Ray's own wording, which KubeRay copies into the RayJob: the operator reads the exit code from it. The
        # log Ray quotes starts with its own two lines and keeps the driver's newlines.
        assert status["message"].startswith("Job entrypoint command failed with exit code 3, last available logs")
        assert "\nRunning entrypoint for job real-" in status["message"]
        assert status["message"].endswith("\nboom\n")


def test_run_mode_job_fails_and_stops_when_its_node_is_lost(
    custom, namespace, kuberay, ray_nodes, hyperpod_nodes, wait
) -> None:
    ready_cluster(custom, namespace, "rc", wait)
    custom.create_namespaced_custom_object(
        *RAY, namespace, "rayjobs", rayjob("long", "rc", entrypoint="sleep 600", script="run")
    )
    pid = wait(lambda: kuberay.entrypoint_pids().get(f"{namespace}/long"), what="the entrypoint to start")

    hyperpod_nodes.delete(ray_nodes[1])

    status = finished_job(custom, namespace, "long", wait)
    assert (status["jobStatus"], status["reason"]) == ("FAILED", "AppFailed")
    assert procs.wait_gone([pid], timeout=10) == []


def test_run_mode_reruns_the_job_on_a_recreated_head(
    custom, core, namespace, kuberay_run, ray_nodes, hyperpod_nodes, wait, monkeypatch
) -> None:
    """As KubeRay and Ray do (tests/cluster/test_kuberay_contract.py): the Ray job dies with its head, the RayJob
    stays Running, the submitter's retry submits it again on the new head, and the workers restart on its GCS."""
    # The first retry finds no head yet; the last leaves a loaded machine time to start one (its node is new).
    monkeypatch.setattr(kuberay_standin, "SUBMITTER_RETRIES", (0.5, 20.0))
    ready_cluster(custom, namespace, "rc", wait)
    custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", rayjob("long", "rc", entrypoint="sleep 600"))
    pid = wait(lambda: kuberay_run.entrypoint_pids().get(f"{namespace}/long"), what="the entrypoint to start")

    hyperpod_nodes.replace(hyperpod_nodes.names[0])  # the controller node, the head's

    rerun = wait(
        lambda: (p := kuberay_run.entrypoint_pids().get(f"{namespace}/long")) not in (None, pid) and p,
        timeout=60,
        what=lambda: f"the entrypoint to run again; RayJob {get(custom, namespace, 'rayjobs', 'long')['status']}",
    )
    assert procs.wait_gone([pid], timeout=10) == [] and rerun
    assert get(custom, namespace, "rayjobs", "long")["status"]["jobDeploymentStatus"] == "Running"

    def workers_restarted() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=worker").items
        return all(p.status.container_statuses[0].restart_count == 1 for p in pods)

    wait(workers_restarted, what="the workers to restart on the new head's GCS")
    wait(
        lambda: get(custom, namespace, "rayclusters", "rc")["status"].get("readyWorkerReplicas") == 2,
        what="the workers ready again",
    )


def test_run_mode_fails_the_submission_when_no_head_comes_back(
    custom, namespace, kuberay_run, ray_nodes, hyperpod_nodes, wait, monkeypatch
) -> None:
    """The submitter Job's retries run out while the head cannot be scheduled: KubeRay fails the RayJob with
    SubmissionFailed and leaves jobStatus as Ray last reported it."""
    monkeypatch.setattr(kuberay_standin, "SUBMITTER_RETRIES", (0.5, 1.0))
    ready_cluster(custom, namespace, "rc", wait)
    custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", rayjob("long", "rc", entrypoint="sleep 600"))
    pid = wait(lambda: kuberay_run.entrypoint_pids().get(f"{namespace}/long"), what="the entrypoint to start")
    wait(lambda: get(custom, namespace, "rayjobs", "long")["status"].get("jobStatus") == "RUNNING", what="RUNNING")

    hyperpod_nodes.delete(hyperpod_nodes.names[0])  # the only controller node: the new head stays Pending

    status = finished_job(custom, namespace, "long", wait)
    assert (status["jobDeploymentStatus"], status["reason"], status["jobStatus"]) == (
        "Failed",
        "SubmissionFailed",
        "RUNNING",
    )
    assert procs.wait_gone([pid], timeout=10) == []
