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

from typing import Any

import yaml
from kubernetes import client

from mmrl_local.addons.incluster import InClusterController
from mmrl_local.addons.kuberay_operator import install_rayservice_crd
from mmrl_local.cluster import nodes
from mmrl_local.common import promtext
from mmrl_local.common.apply import apply_objects
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.toolchain import build, images_build
from mmrl_local.toolchain.images_build import ImageFacts

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


class KubeRayInCluster(InClusterController):
    """``start()`` (or a context manager): the Deployment up and its pod Ready; ``stop()`` deletes it."""

    NAMESPACE, ROLE, CONTAINER, WHAT = NAMESPACE, ROLE, "kuberay-operator", "the KubeRay operator"

    def __init__(self, api: client.ApiClient, kubelet: Kubelet, namespaces: list[str] | None = None) -> None:
        super().__init__(api, kubelet, "kuberay")
        self.namespaces = list(namespaces or [])
        self.image: ImageFacts | None = None

    def start(self, timeout: float = 120.0) -> KubeRayInCluster:
        self.image = images_build.build_kuberay(build.build_kuberay(verbose=False), verbose=False)
        install_rayservice_crd(self.api)
        self._ensure_namespace()
        apply_objects(self.api, [*rbac(), deployment(self.name, self.image.image, self.namespaces)])
        self._place_and_wait(timeout)
        return self

    def metric(self, name: str) -> float:
        pod = self.pod()
        if pod is None or not pod.status.pod_ip:
            raise OSError("the KubeRay operator's pod has no IP")
        return promtext.metric_sum(f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics", name)
