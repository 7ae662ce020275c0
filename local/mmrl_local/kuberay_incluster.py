"""The REAL KubeRay operator (ray-operator v1.5.1) in the cluster, as a platform team runs it: a Deployment in its
own namespace, its pod run by the local kubelet from an image of the binary ``build.build_kuberay`` compiles
(``images_build.build_kuberay``), under a ServiceAccount bound to the ClusterRole KubeRay publishes in its module
(config/rbac/role.yaml), reaching the apiserver with that account's token and each Ray head's dashboard by the head
Service's DNS name, as in a cluster (no ``--use-kubernetes-proxy``). The pod's /etc/hosts stands in for cluster DNS
(``etchosts``: every namespace's Services by their qualified names).

Flags are ray-operator's own, as ``kuberay_operator.KubeRayOperator`` passes them (leader election off, webhooks off,
``--watch-namespace`` for the namespaces given); the pod runs under restricted pod security (uid 65532 as in
KubeRay's image, no capabilities, read-only root) on a node kept for it.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from mmrl_local import build, images_build, nodes, promtext
from mmrl_local.apply import apply_objects
from mmrl_local.images_build import ImageFacts
from mmrl_local.kubelet import Kubelet
from mmrl_local.kuberay_operator import install_rayservice_crd
from mmrl_local.standin_cluster import pod_is_ready

NAMESPACE = "kuberay-system"
ROLE = "kuberay"  # the dedicated node's role
SERVICE_ACCOUNT = "kuberay-operator"
METRICS_PORT, PROBE_PORT = 8080, 8082


def cluster_role() -> dict[str, Any]:
    """KubeRay's ClusterRole as its module publishes it (config/rbac/role.yaml)."""
    path = build.module_dir(build.KUBERAY_MODULE, build.KUBERAY_VERSION) / "config" / "rbac" / "role.yaml"
    (role,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "ClusterRole"]
    return role


def deployment(name: str, image: str, namespaces: list[str]) -> dict[str, Any]:
    args = [
        "--enable-leader-election=false",
        f"--metrics-addr=:{METRICS_PORT}",
        f"--health-probe-bind-address=:{PROBE_PORT}",
        "--log-stdout-encoder=console",
    ]
    if namespaces:
        args.append(f"--watch-namespace={','.join(namespaces)}")
    labels = {"app.kubernetes.io/name": "kuberay-operator", "app.kubernetes.io/instance": name}
    container = {
        "name": "kuberay-operator",
        "image": image,
        "imagePullPolicy": "Never",
        "args": args,
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT},
            {"name": "probes", "containerPort": PROBE_PORT},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probes"}, "periodSeconds": 1},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {nodes.DEDICATED_LABEL: ROLE},
        "tolerations": [{**nodes.dedicated_taint(ROLE), "operator": "Equal"}],
        "containers": [container],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def rbac() -> list[dict[str, Any]]:
    role = cluster_role()
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role["metadata"]["name"]},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
    ]


class KubeRayInCluster:
    """``start()`` (or a context manager): the Deployment up and its pod Ready; ``stop()`` deletes it."""

    def __init__(self, api: client.ApiClient, kubelet: Kubelet, namespaces: list[str] | None = None) -> None:
        self.api, self.kubelet, self.namespaces = api, kubelet, list(namespaces or [])
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.name = f"kuberay-{secrets.token_hex(3)}"
        self.image: ImageFacts | None = None
        self.node: str | None = None

    def start(self, timeout: float = 120.0) -> KubeRayInCluster:
        self.image = images_build.build_kuberay(build.build_kuberay(verbose=False), verbose=False)
        install_rayservice_crd(self.api)
        try:
            self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        except client.ApiException as err:
            if err.status != 409:
                raise
        apply_objects(self.api, [*rbac(), deployment(self.name, self.image.image, self.namespaces)])
        self.node = nodes.create_dedicated_node(self.core, ROLE)
        self._wait_ready(timeout)
        return self

    def pod(self) -> client.V1Pod | None:
        selector = f"app.kubernetes.io/instance={self.name}"
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        return next((p for p in pods if not p.metadata.deletion_timestamp), None)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            pod = self.pod()
            if pod is not None and pod_is_ready(self.api.sanitize_for_serialization(pod)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the KubeRay operator's pod is not Ready after {timeout:.0f} s: {pod and pod.status}"
                )
            time.sleep(0.3)

    @property
    def log_path(self) -> Path | None:
        """Where the kubelet writes the operator's container log."""
        pod = self.pod()
        worker = self.kubelet.workers.get(pod.metadata.uid) if pod is not None else None
        return worker.workdir / "logs" / "kuberay-operator.log" if worker is not None else None

    def metric(self, name: str) -> float:
        pod = self.pod()
        if pod is None or not pod.status.pod_ip:
            raise OSError("the KubeRay operator's pod has no IP")
        return promtext.metric_sum(f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics", name)

    def stop(self) -> None:
        try:
            self.apps.delete_namespaced_deployment(self.name, NAMESPACE, propagation_policy="Foreground")
        except client.ApiException as err:
            if err.status != 404:
                raise
        deadline = time.monotonic() + 60
        while self.pod() is not None and time.monotonic() < deadline:
            time.sleep(0.3)
        if self.node is not None:
            nodes.delete_node(self.core, self.node)

    def __enter__(self) -> KubeRayInCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
