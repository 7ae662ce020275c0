"""The Helm chart in tests: run helm with throwaway homes (``mmrl_local.common.helm.Helm``), render the chart to
objects, apply or delete rendered objects with the admin client, give a chart ServiceAccount its own kubeconfig (a
TokenRequest token), and take the cluster-wide objects a release owns away before a real install (and back after)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from mmrl_api import constants as c
from mmrl_local.cluster.crd_install import install_mmrl_crd, install_trainer_status_policy
from mmrl_local.common import apply
from mmrl_local.common.helm import Helm
from mmrl_operator.codegen.chart import CHART_DIR as CHART
from mmrl_operator.codegen.trainer_status_policy import POLICY_NAME
from tests.support.polling import wait_until

__all__ = [
    "CHART",
    "RBAC_KINDS",
    "ChartIdentity",
    "Helm",
    "apply_objects",
    "client_for",
    "delete_objects",
    "is_gone",
    "of_kind",
    "remove_cluster_objects",
    "restore_cluster_objects",
    "token_kubeconfig",
]
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def of_kind(objects: Iterable[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in kinds]


def apply_objects(api: client.ApiClient, objects: Iterable[dict[str, Any]], dry_run: bool = False) -> None:
    """Server-side apply as an admin would; with `dry_run` the apiserver validates and admits but stores nothing."""
    apply.apply_objects(api, objects, field_manager="mmrl-test", dry_run=dry_run)


def delete_objects(api: client.ApiClient, objects: Iterable[dict[str, Any]]) -> None:
    dyn = DynamicClient(api)
    for obj in objects:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(NotFoundError):
            res.delete(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))


def token_kubeconfig(api: client.ApiClient, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a bound token, as its pod would."""
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(service_account, namespace, {"spec": {"expirationSeconds": 3600}})
        .status.token
    )
    cfg = api.configuration
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": service_account}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def client_for(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def is_gone(read: Callable[..., Any], *args: Any) -> bool:
    """Whether the apiserver answers 404 Not Found; any other error is raised, never taken for "gone"."""
    try:
        read(*args)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _delete_if_present(delete: Callable[..., Any], *args: Any) -> None:
    try:
        delete(*args)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


def remove_cluster_objects(api: client.ApiClient) -> None:
    """Start from a cluster without mmrl's CRDs and trainer status policy, as a first install does: the session's
    fixtures install them without Helm, and Helm refuses to take over objects it did not make."""
    ext = client.ApiextensionsV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    for name in (c.CRD_NAME, c.SERVER_CRD_NAME):
        _delete_if_present(ext.delete_custom_resource_definition, name)
    for delete in (admission.delete_validating_admission_policy, admission.delete_validating_admission_policy_binding):
        _delete_if_present(delete, POLICY_NAME)
    wait_until(
        lambda: all(is_gone(ext.read_custom_resource_definition, name) for name in (c.CRD_NAME, c.SERVER_CRD_NAME)),
        60,
        what="the old CRDs to be deleted",
    )


def restore_cluster_objects(api: client.ApiClient) -> None:
    """The CRDs and the policy as the session's other tests expect them, after a release was uninstalled."""
    install_mmrl_crd(api)
    install_trainer_status_policy(api)


class ChartIdentity:
    """The chart's RBAC objects applied to the cluster, and a client authenticated as its ServiceAccount."""

    def __init__(self, api: client.ApiClient, helm: Helm, release_ns: str, watch: list[str], tmp: Path) -> None:
        self.release = f"rbac-{secrets.token_hex(3)}"
        self.objects = of_kind(helm.template(self.release, release_ns, {"watchNamespaces": watch}), *RBAC_KINDS)
        self.api, self.namespace, self.watch = api, release_ns, watch
        (sa,) = of_kind(self.objects, "ServiceAccount")
        self.service_account = sa["metadata"]["name"]
        self.username = f"system:serviceaccount:{release_ns}:{self.service_account}"
        (leader,) = [o for o in of_kind(self.objects, "Role") if o["metadata"]["namespace"] == release_ns]
        self.lease = next(r["resourceNames"][0] for r in leader["rules"] if r.get("resourceNames"))
        apply_objects(api, self.objects)
        self.kubeconfig = token_kubeconfig(api, release_ns, self.service_account, tmp / "operator.kubeconfig")
        self.authz = client.AuthorizationV1Api(client_for(self.kubeconfig))

    def can(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None = None) -> bool:
        plural, _, sub = resource.partition("/")
        attrs = {"verb": verb, "group": group, "resource": plural, "subresource": sub, "namespace": namespace or ""}
        if name:
            attrs["name"] = name
        review = self.authz.create_self_subject_access_review({"spec": {"resourceAttributes": attrs}})
        return bool(review.status.allowed)

    def delete(self) -> None:
        delete_objects(self.api, self.objects)
