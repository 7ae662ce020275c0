"""The chart's server-pod policies (mmrl_operator.codegen.server_pod_policy) on the real apiserver, with the real
controller-manager: the operator, authenticated as the chart's ServiceAccount with only the chart's RBAC, still gets
its ModelServer's Deployment, ReplicaSet and Ready replica through them,
while a tenant of the namespace (the built-in `edit` role: pods, Deployments, ReplicaSets) cannot put a pod behind the
server's Service by any route: a look-alike pod, one naming the server's own ReplicaSet as its owner, a label added
later, a Deployment or a ReplicaSet of its own, or an edit of the server's Deployment. The Service's endpoints stay the
server's replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.cluster import storage
from tests.cluster.test_model_server import CHILD, NAME, Servers, server_doc, wait_phase
from tests.support.chart import client_for, token_kubeconfig
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

TENANT = "tenant"


@pytest.fixture
def servers(api_client, namespace, mmrl_crd) -> Servers:
    return Servers(api_client, namespace)


def tenant_client(api_client: client.ApiClient, ns: str, tmp_path: Path) -> client.ApiClient:
    """A ServiceAccount of the namespace with the built-in `edit` role there, as a team member would have."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(ns, {"metadata": {"name": TENANT}})
    binding = {
        "metadata": {"name": TENANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": ns}],
    }
    rbac.create_namespaced_role_binding(ns, binding)
    return client_for(token_kubeconfig(api_client, ns, TENANT, tmp_path / "tenant-kubeconfig"))


def refused(call: Any, *args: Any) -> str:
    """The apiserver's refusal of `call(*args)` (its message); fails when it is admitted."""
    with pytest.raises(client.exceptions.ApiException) as err:
        call(*args)
    assert err.value.status in (403, 422), err.value.body
    return str(json.loads(err.value.body)["message"])


def pod(name: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {"containers": [{"name": "vllm", "image": "look-alike:1"}]}}


def workload(name: str, labels: dict[str, str]) -> dict[str, Any]:
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "vllm", "image": "look-alike:1"}]}}
    return {
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


def test_only_the_servers_own_chain_puts_a_pod_behind_its_service(
    servers: Servers, server_pod_policy, chart_operator, hyperpod_nodes, core, api_client, tmp_path
) -> None:
    hyperpod_nodes.cpu()
    storage.create_hostpath_claim(core, servers.ns, "fsx-claim", tmp_path / "fsx")
    servers.create(server_doc())
    wait_phase(servers, "Ready", 90)  # the operator's Deployment, its ReplicaSet and its pod, each admitted
    labels = dict(servers.service().spec.selector)
    assert labels[c.LABEL_SERVER] == NAME
    (replica,) = core.list_namespaced_pod(servers.ns, label_selector=f"{c.LABEL_SERVER}={NAME}").items
    (rs_ref,) = [o for o in replica.metadata.owner_references if o.kind == "ReplicaSet"]

    tenant = tenant_client(api_client, servers.ns, tmp_path)
    pods, apps = client.CoreV1Api(tenant), client.AppsV1Api(tenant)
    ns = servers.ns
    says = refused(pods.create_namespaced_pod, ns, pod("look-alike", labels))
    assert f"{c.LABEL_SERVER}={NAME}" in says and f"{CHILD})" in says, says
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_ref.name, "uid": rs_ref.uid, "controller": True}
    refused(pods.create_namespaced_pod, ns, pod("adopted", labels, owner))
    pods.create_namespaced_pod(ns, pod("plain", {"app": "notebook"}))  # unlabelled: none of the server's business
    says = refused(pods.patch_namespaced_pod, "plain", ns, {"metadata": {"labels": labels}})
    assert "cannot be added to a pod" in says, says
    says = refused(apps.create_namespaced_deployment, ns, workload("fake", labels))
    assert f"status of ModelServer {NAME}" in says, says
    refused(apps.create_namespaced_replica_set, ns, workload(f"{CHILD}-fake", labels))
    hand_edit = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "elsewhere:1"}]}}}}
    refused(apps.patch_namespaced_deployment, CHILD, ns, hand_edit)

    # What the Service sends clients to: the server's replica, and nothing the tenant made.
    def endpoints() -> set[str]:
        slices = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
            ns, label_selector=f"kubernetes.io/service-name={CHILD}"
        )
        return {e.target_ref.name for s in slices.items for e in s.endpoints or [] if e.target_ref}

    wait_until(lambda: endpoints() == {replica.metadata.name}, 30, what=lambda: f"endpoints {endpoints()}")
    assert {p.metadata.name for p in core.list_namespaced_pod(ns).items} == {replica.metadata.name, "plain"}
