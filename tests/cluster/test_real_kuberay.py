"""The RayCluster and RayJobs the operator builds, run by the REAL KubeRay operator (ray-operator v1.5.1 built from
its Go module, see mmrl_local.addons.kuberay_operator) instead of the stand-in, on fake HyperPod nodes run by kwok.

The first test in a session on a cold cache compiles KubeRay (3 to 5 minutes on 2 cores; cached under
~/.cache/mmrl/bin/kuberay-<key>/ afterwards, milliseconds): `make test` stays as fast as before for every other
test, and this one still runs in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.cluster import storage
from tests.cluster.test_trainer_status_policy import (
    LONG_GROUP,
    LONG_JOB,
    assert_every_ray_pod_may_report,
    long_named_job,
)
from tests.support.corpus import example
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

CHECKPOINT_CLAIM = "fsx-claim"  # examples/job.yaml's FSx for Lustre claim


@pytest.fixture
def fsx_claim(core: client.CoreV1Api, namespace: str, tmp_path: Path) -> Iterator[str]:
    """examples/job.yaml checkpoints to an FSx claim: a bound claim, or the scheduler keeps every Ray pod Pending."""
    storage.create_hostpath_claim(core, namespace, CHECKPOINT_CLAIM, tmp_path / "fsx")
    yield CHECKPOINT_CLAIM
    storage.delete_hostpath_claim(core, namespace, CHECKPOINT_CLAIM)


def contains(got: Any, want: Any) -> bool:
    """`want` is part of `got`: the apiserver and KubeRay add defaults and fields of their own, never drop ours."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and contains(got[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and all(any(contains(g, w) for g in got) for w in want)
    return got == want


def ray_pods(core: client.CoreV1Api, api_client: client.ApiClient, namespace: str, job: str) -> dict[str, dict]:
    items = core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={job}").items
    running = [api_client.sanitize_for_serialization(p) for p in items if p.status.phase == "Running"]
    return {p["metadata"]["labels"][c.LABEL_COMPONENT]: p for p in running}


def test_kuberay_turns_our_raycluster_for_the_example_job_into_pods_with_our_placement_and_volumes(
    jobs, operator, real_kuberay, hyperpod_nodes, fsx_claim, core, api_client
):
    cpu_node, gpu_nodes = hyperpod_nodes.cpu(), hyperpod_nodes.gpu(1)
    manifest = example()
    name = manifest["metadata"]["name"]
    jobs.create(manifest)

    # KubeRay made head and worker pods, kwok ran them, KubeRay reported the cluster ready, so the operator started
    # attempt 1 on it.
    wait_until(lambda: jobs.ray_names("rayjobs") == [f"{name}-a1"], 120, what="RayJob a1 on a ready cluster")
    (rc,) = jobs.ray("rayclusters")
    assert rc["status"]["state"] == "ready" and rc["status"]["readyWorkerReplicas"] == 1
    assert rc["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] == manifest["spec"]["cluster"]["kueue"]["queueName"]
    pods = wait_until(lambda: (p := ray_pods(core, api_client, jobs.ns, name)) and len(p) == 2 and p, 30)

    templates = {
        "ray-head": rc["spec"]["headGroupSpec"]["template"],
        "ray-worker": rc["spec"]["workerGroupSpecs"][0]["template"],
    }
    for component, template in templates.items():
        pod, want = pods[component], template["spec"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "RayCluster", component
        assert contains(pod["metadata"]["labels"], template["metadata"]["labels"]), component  # Kueue + job labels
        assert pod["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] == "hyperpod-ns-research-localqueue"
        assert contains(pod["spec"]["containers"][0]["resources"], want["containers"][0]["resources"]), component
        assert pod["spec"]["affinity"] == want["affinity"], component
        assert contains(pod["spec"].get("tolerations") or [], want.get("tolerations") or []), component
        assert contains(pod["spec"]["volumes"], want["volumes"]), component
        assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": fsx_claim}} in [
            {k: v for k, v in vol.items() if k in ("name", "persistentVolumeClaim")} for vol in pod["spec"]["volumes"]
        ]
        assert contains(pod["spec"]["containers"][0]["volumeMounts"], want["containers"][0]["volumeMounts"])
        assert pod["spec"]["nodeName"] in [cpu_node, *gpu_nodes], component
    # The head offers Ray no CPU, so SkyRL's entry task lands on a worker: KubeRay passes rayStartParams on
    # instead of deriving --num-cpus from the head's 8-CPU request.
    head_start = " ".join(pods["ray-head"]["spec"]["containers"][0].get("args") or [])
    assert "--num-cpus=0" in head_start and "--num-gpus=0" in head_start, head_start
    worker = pods["ray-worker"]
    assert worker["spec"]["nodeName"] in gpu_nodes  # the p5 instance-type selector, 8 GPUs and 32 EFA requested
    assert worker["spec"]["containers"][0]["resources"]["limits"][c.GPU_RESOURCE] == "8"
    assert worker["spec"]["containers"][0]["resources"]["limits"][c.EFA_RESOURCE] == "32"
    # The pass creates the RayJob before it writes the status that records it (a RayJob created but not recorded is
    # adopted by the next pass), so the phase may trail the RayJob by that pass's event and status writes.
    wait_until(lambda: jobs.status(name)["phase"] == "Running", 30, what="phase Running once attempt 1 runs")


def test_kuberay_submits_our_rayjob_but_cannot_reach_a_ray_dashboard_under_kwok(
    jobs, operator, real_kuberay, nodes_ready, api_client
):
    """What real KubeRay does with our RayJob when no Ray runs in the pods: it finds the ready cluster, sets the
    dashboard URL, creates its submitter Job (kwok completes the Job's pod at once), then every GetJobInfo call to
    the head Service's DNS name fails; 30 s after the submitter finished it fails the RayJob with
    JobDeploymentStatusTransitionGracePeriodExceeded, and the operator ends the attempt as a failure."""
    jobs.create(cluster_job("dash", {"spec": {"resilience": {"maxRestarts": 0}}}))
    rayjob = wait_until(
        lambda: (
            (rj := next(iter(jobs.ray("rayjobs")), None))
            and (rj.get("status") or {}).get("jobDeploymentStatus") == "Running"
            and rj
        ),
        90,
        what="KubeRay to move RayJob dash-a1 to Running",
    )
    assert rayjob["status"]["dashboardURL"].startswith(f"dash-head-svc.{jobs.ns}.svc")
    assert rayjob["status"].get("jobStatus", "") == ""  # no Ray job info: the dashboard never answered
    batch = client.BatchV1Api(api_client)
    submitter = wait_until(lambda: batch.read_namespaced_job("dash-a1", jobs.ns), 30, what="the submitter Job")
    assert submitter.metadata.owner_references[0].kind == "RayJob"

    failed = wait_until(
        lambda: (st := jobs.ray("rayjobs")[0].get("status") or {}).get("jobDeploymentStatus") == "Failed" and st,
        150,
        interval=1.0,
        what="KubeRay to give up on the RayJob",
    )
    assert failed["reason"] == "JobDeploymentStatusTransitionGracePeriodExceeded"
    assert failed["jobStatus"] == "FAILED"
    status = wait_until(lambda: (s := jobs.status("dash")).get("phase") == "Failed" and s, 30, what="job Failed")
    (attempt,) = status["attempts"]
    assert attempt["result"] == "Failed" and "JobDeploymentStatusTransitionGracePeriodExceeded" in attempt["message"]


def test_the_pods_kuberay_makes_have_names_the_trainer_status_policy_accepts_for_their_job(
    jobs, operator, real_kuberay, nodes_ready, api_client
):
    """The policy matches KubeRay v1.5's pod names (`utils.PodName`): `<job>-head-xxxxx` and, for the longest job and
    group names, `<job>-<group>` cut to 50 characters, then `-worker-xxxxx`."""
    jobs.create(long_named_job())
    assert_every_ray_pod_may_report(api_client, jobs.ns, LONG_JOB, [LONG_GROUP])
