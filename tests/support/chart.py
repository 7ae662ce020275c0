"""The Helm chart in tests: run helm with throwaway homes (``mmrl_local.common.helm.Helm``), render the chart to
objects, apply or delete rendered objects with the admin client, and give a chart ServiceAccount its own kubeconfig (a
TokenRequest token)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from mmrl_local.common import apply
from mmrl_local.common.helm import Helm
from mmrl_operator.codegen.chart import CHART_DIR as CHART

__all__ = [
    "CHART",
    "RBAC_KINDS",
    "Helm",
    "apply_objects",
    "client_for",
    "delete_objects",
    "of_kind",
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
