"""The operator against the real apiserver with the KubeRay stand-in: children, phases, updates, suspend, ttl,
deletion. The operator runs as a subprocess exactly as it would in its Deployment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_operator.core.names import TRAINER_IDENTITY
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.operator import phases_until_done, wait_until

pytestmark = pytest.mark.cluster


def test_job_creates_every_child_with_the_expected_fields(jobs, operator, kuberay, nodes_ready, core, api_client):
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.ray_names("rayjobs") == ["geo-a1"], 60, what="RayJob geo-a1")
    ns = jobs.ns
    (rc,) = jobs.ray("rayclusters")
    assert rc["metadata"]["name"] == "geo" and rc["metadata"]["ownerReferences"][0]["kind"] == "MultimodalRLJob"
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"][c.GPU_RESOURCE] == "8"
    (rj,) = jobs.ray("rayjobs")
    assert rj["spec"]["clusterSelector"] == {c.RAY_CLUSTER_LABEL: "geo"} and rj["spec"]["backoffLimit"] == 0
    cm = core.read_namespaced_config_map("geo-trainer-config", ns)
    assert '"name": "geo"' in cm.data["trainer.json"]
    # The pods run as the namespace's trainer identity, which no job owns and which may only patch job status.
    role = client.RbacAuthorizationV1Api(api_client).read_namespaced_role(TRAINER_IDENTITY, ns)
    assert [(r.resources, r.verbs, r.resource_names) for r in role.rules] == [
        (["multimodalrljobs/status"], ["patch"], None)
    ]
    account = core.read_namespaced_service_account(TRAINER_IDENTITY, ns)
    assert account.metadata.owner_references is None and c.LABEL_JOB not in account.metadata.labels
    assert rc["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == TRAINER_IDENTITY
    # Pods really scheduled onto HyperPod GPU nodes that satisfy the affinity.
    pods = core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}=ray-worker").items
    assert pods and all(p.spec.node_name in nodes_ready for p in pods)
    status = wait_until(lambda: jobs.status("geo") if jobs.status("geo").get("phase") == "Running" else None, 30)
    assert status["observedGeneration"] == jobs.get("geo")["metadata"]["generation"]
    assert status["rayCluster"] == "geo" and status["rayJob"] == "geo-a1" and status["attempt"] == 1


def test_successful_attempt_walks_the_phases_in_order(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a*", "succeed-after=1")
    jobs.create(cluster_job("geo"))
    seen = phases_until_done(jobs, "geo")
    assert seen[-1] == "Succeeded"
    assert [p for p in seen if p in ("Provisioning", "Running", "Succeeded")] == [
        "Provisioning",
        "Running",
        "Succeeded",
    ]
    assert jobs.condition("geo", "Complete") == "True" and jobs.condition("geo", "Ready") == "True"
    assert jobs.condition("geo", "Reconciling") == "False"
    events = wait_until(lambda: (e := jobs.events("geo")) and "Succeeded" in e and e, 10)
    assert events.index("RayClusterCreated") < events.index("AttemptStarted") < events.index("Succeeded")
    assert jobs.ray_names("rayjobs") == ["geo-a1"]


def test_kubectl_columns_and_mmrl_status_show_the_job(jobs, operator, kuberay, nodes_ready, control_plane):
    kuberay.script("geo-a*", "succeed-after=1")
    jobs.create(cluster_job("geo"))
    phases_until_done(jobs, "geo")
    jobs.patch_status("geo", {"progress": {"step": 40, "totalSteps": 40, "rewardMean": 0.75}})
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    kubectl = str(control_plane.binaries["kubectl"])
    table = subprocess.run([kubectl, "get", "mmrl", "-n", jobs.ns], env=env, capture_output=True, text=True, check=True)
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "STEP", "REWARD", "ATTEMPT", "AGE"]
    assert row.split()[:5] == ["geo", "Succeeded", "40", "0.75", "1"]
    out = subprocess.run(
        [sys.executable, "-m", "mmrl_operator.cli", "status", "geo", "-n", jobs.ns],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "phase=Succeeded" in out and "step 40/40" in out and "#1 geo-a1 initial -> Succeeded" in out
    assert "AttemptStarted" in out


def test_spec_update_propagates_and_immutable_fields_are_rejected(jobs, operator, kuberay, hyperpod_nodes):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(3)
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo", MULTI_NODE))
    wait_until(lambda: jobs.ray_names("rayjobs") == ["geo-a1"], 60)
    spec = cluster_job("geo", MULTI_NODE)["spec"]["cluster"]["workerGroups"]
    spec[0]["replicas"] = 2
    jobs.patch("geo", {"spec": {"cluster": {"workerGroups": spec}}})
    # The running attempt keeps the cluster it started on; the change is reported and waits for the attempt to end
    # (tests/cluster/test_safety.py follows it through to the next attempt).
    wait_until(lambda: jobs.condition("geo", "SpecChangePending") == "True", 30, what="SpecChangePending")
    assert jobs.ray("rayclusters")[0]["spec"]["workerGroupSpecs"][0]["replicas"] == 1
    with pytest.raises(client.exceptions.ApiException) as err:
        jobs.patch("geo", {"spec": {"model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}}})
    assert err.value.status == 422 and "model is immutable" in err.value.body


def test_suspend_deletes_ray_objects_and_resume_starts_a_free_attempt(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.status("geo").get("phase") == "Running", 60)
    jobs.patch("geo", {"spec": {"suspend": True}})
    wait_until(lambda: jobs.status("geo").get("phase") == "Suspended", 30)
    wait_until(lambda: not jobs.ray_names("rayclusters") and not jobs.ray_names("rayjobs"), 30, what="Ray objects gone")
    assert jobs.condition("geo", "Suspended") == "True"
    kuberay.script("geo-a2", "succeed-after=1")
    jobs.patch("geo", {"spec": {"suspend": False}})
    assert phases_until_done(jobs, "geo")[-1] == "Succeeded"
    status = jobs.status("geo")
    assert [a["cause"] for a in status["attempts"]] == ["initial", "resume"]
    assert status["attempts"][0]["result"] == "Stopped" and not status.get("restarts")


def test_ttl_deletes_the_cluster_and_keeps_the_rest(jobs, operator, kuberay, nodes_ready, core):
    kuberay.script("geo-a*", "succeed-after=1")
    jobs.create(cluster_job("geo", {"spec": {"ttlSecondsAfterFinished": 2}}))
    assert phases_until_done(jobs, "geo")[-1] == "Succeeded"
    wait_until(lambda: not jobs.ray_names("rayclusters"), 30, what="RayCluster deleted after ttl")
    assert core.read_namespaced_config_map("geo-trainer-config", jobs.ns)
    assert jobs.status("geo")["phase"] == "Succeeded"


def test_deleting_the_job_garbage_collects_every_child(jobs, operator, kuberay, nodes_ready, core):
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.ray_names("rayjobs") == ["geo-a1"], 60)
    jobs.delete("geo")

    def gone() -> bool:
        cms = core.list_namespaced_config_map(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo").items
        sas = core.list_namespaced_service_account(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo").items
        return not (jobs.ray_names("rayclusters") or jobs.ray_names("rayjobs") or cms or sas)

    wait_until(gone, 60, what="children garbage-collected")


def test_liveness_and_metrics_endpoints_answer(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a*", "succeed-after=1")
    jobs.create(cluster_job("geo"))
    phases_until_done(jobs, "geo")
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=5) as r:
        assert r.status == 200 and json.loads(r.read())["leader"] is True
    assert operator.metric("mmrl_attempts_started_total") == 1
    assert operator.metric("mmrl_reconcile_duration_seconds_count") > 0
    # One line per record: the start-up handler (used until kopf's logging takes over) is gone once kopf runs.
    passes = [line for line in operator.log_path.read_text().splitlines() if "reconciled job=" in line]
    assert passes and len(passes) == len(set(passes)), passes
