"""The local control plane is a real Kubernetes API server: pinned version, schema validation of built-in and
KubeRay objects, RBAC with working service-account tokens."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from mmrl_local.toolchain import build
from tests.cluster.ray_factories import RAY, raycluster

pytestmark = pytest.mark.cluster


def test_version_reports_the_pinned_kubernetes(api_client: client.ApiClient) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.git_version == build.kubernetes_version()
    assert info.minor == build.kubernetes_version().split(".")[1]


def test_malformed_pod_is_rejected(core: client.CoreV1Api, namespace: str) -> None:
    bad = {"metadata": {"name": "Not_A_DNS_Name"}, "spec": {"containers": []}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, bad)
    assert err.value.status == 422
    assert "spec.containers" in err.value.body
    assert core.list_namespaced_pod(namespace).items == []


def test_raycluster_with_wrong_types_is_rejected_by_kuberays_crd(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = raycluster("typo")
    body["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(*RAY, namespace, "rayclusters", body)
    assert err.value.status == 422
    assert "replicas" in err.value.body


def test_rbac_denies_a_service_account_without_roles(
    core: client.CoreV1Api, namespace: str, api_client: client.ApiClient
) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    config = client.Configuration()
    config.host = api_client.configuration.host
    config.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    as_nobody = client.CoreV1Api(client.ApiClient(config))
    with pytest.raises(ApiException) as err:
        as_nobody.list_namespaced_secret(namespace)
    assert err.value.status == 403  # authenticated (the token is valid), but not authorized
    with pytest.raises(ApiException) as err:
        as_nobody.list_node()
    assert err.value.status == 403
