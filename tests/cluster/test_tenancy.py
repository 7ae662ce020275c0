"""Tenants sharing a namespace, on the real control plane: objects that only look like a job's children (its label,
a child's name) are never adopted, taken over or acted on. Each case was reproduced against the operator before
children were recognised by their controller reference."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_api import constants as c
from tests.cluster.test_safety import passes
from tests.cluster.test_serving import serving_job
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def stalled(jobs, name: str) -> dict:
    return next((x for x in jobs.status(name).get("conditions") or [] if x["type"] == "Stalled"), {})


def test_a_rayjob_named_like_a_far_attempt_is_never_adopted(jobs, operator, kuberay, nodes_ready, custom):
    kuberay.script("geo-a*", "hang")
    # A stranger's RayJob with the job's label and the name of attempt 600000 (KubeRay validates its spec, so it
    # is a real one; nothing of it runs as the job's).
    stranger = {
        "apiVersion": c.RAY_API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": "geo-a600000", "labels": {c.LABEL_JOB: "geo"}},
        "spec": {"entrypoint": "python -c pass", "clusterSelector": {c.RAY_CLUSTER_LABEL: "elsewhere"}},
    }
    custom.create_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, jobs.ns, "rayjobs", stranger)
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    status = jobs.status("geo")
    assert status["attempt"] == 1 and [a["rayJob"] for a in status["attempts"]] == ["geo-a1"]
    assert status["foreignObjects"] == ["RayJob geo-a600000"]
    assert jobs.events("geo").count("NotAdopted") == 1
    # Left alone: not deleted, not patched by the operator.
    kept = custom.get_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, jobs.ns, "rayjobs", "geo-a600000")
    assert {m["manager"] for m in kept["metadata"]["managedFields"]} & {c.FIELD_MANAGER} == set()


def test_a_taken_configmap_name_stalls_the_job_until_it_is_freed(jobs, operator, kuberay, nodes_ready, core):
    kuberay.script("geo-a*", "hang")
    theirs = core.create_namespaced_config_map(
        jobs.ns,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="geo-trainer-config"), data={"trainer.json": "mine"}),
    )
    jobs.create(cluster_job("geo"))
    wait_until(lambda: stalled(jobs, "geo").get("reason") == "NameConflict", 60, what="Stalled NameConflict")
    assert "ConfigMap geo-trainer-config already exists" in stalled(jobs, "geo")["message"]
    # Nothing was written to it, and nothing else was made: no Ray cluster may start on someone else's config.
    cm = core.read_namespaced_config_map("geo-trainer-config", jobs.ns)
    assert cm.metadata.resource_version == theirs.metadata.resource_version and cm.data == {"trainer.json": "mine"}
    assert jobs.ray_names("rayclusters") == [] and jobs.events("geo").count("NameConflict") == 1
    core.delete_namespaced_config_map("geo-trainer-config", jobs.ns)
    # The conflict is re-checked on the retry period (30 s): then the job goes on as if nothing happened.
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 90, what="attempt 1 training")
    assert stalled(jobs, "geo")["status"] == "False"
    cm = core.read_namespaced_config_map("geo-trainer-config", jobs.ns)
    assert cm.metadata.owner_references[0].name == "geo"


def test_a_taken_service_name_is_not_taken_over_when_serving(jobs, operator, kuberay, hyperpod_nodes, core, api_client):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    kuberay.script("geo-a1", "succeed-after=1")
    theirs = core.create_namespaced_service(
        jobs.ns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="geo-inference", labels={c.LABEL_JOB: "geo"}),
            spec=client.V1ServiceSpec(selector={"app": "theirs"}, ports=[client.V1ServicePort(port=80)]),
        ),
    )
    jobs.create(serving_job())
    wait_until(lambda: stalled(jobs, "geo").get("reason") == "NameConflict", 90, what="Stalled NameConflict")
    assert "Service geo-inference already exists" in stalled(jobs, "geo")["message"]
    svc = core.read_namespaced_service("geo-inference", jobs.ns)
    assert svc.metadata.resource_version == theirs.metadata.resource_version and svc.spec.selector == {"app": "theirs"}
    # Serving creates its Deployment and Service together or not at all.
    deps = client.AppsV1Api(api_client).list_namespaced_deployment(jobs.ns).items
    assert [d.metadata.name for d in deps] == []


def test_a_pod_that_only_carries_the_jobs_labels_is_never_acted_on(jobs, operator, kuberay, hyperpod_nodes, core):
    hyperpod_nodes.cpu()
    (gpu,) = hyperpod_nodes.gpu(1)
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    # A stranger's pod labelled as the job's Ray head, on a node HyperPod then marks for replacement.
    spare = hyperpod_nodes.gpu(1, instance_group="spare")[0]
    labels = {c.LABEL_JOB: "geo", c.LABEL_COMPONENT: "ray-head"}
    core.create_namespaced_pod(
        jobs.ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="not-a-ray-head", labels=labels),
            spec=client.V1PodSpec(node_name=spare, containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    before = passes(operator)
    hyperpod_nodes.set_health(spare, c.HEALTH_PENDING_REPLACEMENT)
    wait_until(lambda: passes(operator) >= before + 2, 30, what="two passes after the fault")
    status = jobs.status("geo")
    assert spare not in (status.get("degradedNodes") or []) and status["attempt"] == 1
    assert core.read_namespaced_pod("not-a-ray-head", jobs.ns).metadata.deletion_timestamp is None
    assert gpu not in (status.get("degradedNodes") or [])
