"""Built-in controllers really run: Deployments get Ready pods on fake nodes, Jobs complete, and the garbage
collector deletes children of a deleted owner."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.cluster


def deployment(name: str, replicas: int = 2, node_selector: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def test_deployment_pods_become_ready(api_client, core, namespace, hyperpod_nodes, wait) -> None:
    hyperpod_nodes.cpu()
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=3))
    status = wait(
        lambda: (s := apps.read_namespaced_deployment_status("web", namespace).status) and s.ready_replicas == 3 and s,
        what="3 ready replicas",
    )
    assert status.available_replicas == 3
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert {p.status.phase for p in pods} == {"Running"}
    assert all(p.status.pod_ip and p.spec.node_name in hyperpod_nodes.names for p in pods)


def test_job_pod_completes(api_client, namespace, hyperpod_nodes, wait) -> None:
    hyperpod_nodes.cpu()
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "once"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
            },
        },
    )
    status = wait(
        lambda: batch.read_namespaced_job_status("once", namespace).status.succeeded, what="the Job to succeed"
    )
    assert status == 1


def test_deleting_an_owner_garbage_collects_its_children(api_client, core, namespace, hyperpod_nodes, wait) -> None:
    hyperpod_nodes.cpu()
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, deployment("owned", replicas=2))
    wait(
        lambda: len(core.list_namespaced_pod(namespace, label_selector="app=owned").items) == 2,
        what="pods of the Deployment",
    )
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "child",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
                ],
            }
        },
    )

    apps.delete_namespaced_deployment("owned", namespace)  # background propagation: the GC's job
    core.delete_namespaced_config_map("owner", namespace)

    wait(lambda: not apps.list_namespaced_replica_set(namespace).items, what="ReplicaSets to be collected")
    wait(lambda: not core.list_namespaced_pod(namespace, label_selector="app=owned").items, what="pods to be collected")

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    wait(child_gone, what="the child ConfigMap to be collected")
