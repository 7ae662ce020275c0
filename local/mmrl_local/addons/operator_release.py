"""The operator installed as a platform team installs it: ``helm install charts/mmrl-operator`` with
``image.repository`` set to the image ``make images`` built, on a node kept for it (``nodes.create_dedicated_node``)
whose pods the local kubelet runs from their images. The operator then runs as the chart's Deployment's pod: under
the chart's ServiceAccount, RBAC and restricted pod security, reaching the apiserver the way a pod does (its
projected ServiceAccount token and the ``kubernetes`` Service), with nothing of this checkout in its root filesystem.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from mmrl_local.addons import kuberay_incluster
from mmrl_local.cluster import nodes
from mmrl_local.common.helm import CHART, Helm
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.standin.standin_cluster import pod_is_ready
from mmrl_local.toolchain.images_build import ImageFacts

ROLE = "operator"  # the dedicated node's role: only the operator's pods tolerate it
# The release namespace enforces the restricted Pod Security Standard, as docs/install.md asks of it.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def values(
    image: ImageFacts,
    *,
    watch: list[str] | None = None,
    replicas: int = 1,
    cluster_objects: bool = True,
    trainer_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Chart values for the built image on the dedicated node. ``cluster_objects`` False leaves the CRD and the
    admission policies out (a cluster that has them already, as the test session does). Each job's
    NetworkPolicy admits the in-cluster KubeRay (``kuberay_incluster``) from its namespace. ``trainer_annotations``
    go on every namespace's mmrl-trainer ServiceAccount (the chart's trainerIdentity.annotations)."""
    repository, tag = image.image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "replicaCount": replicas,
        "watchNamespaces": list(watch or []),
        "crds": {"enabled": cluster_objects},
        "trainerStatusPolicy": {"enabled": cluster_objects},
        "serverPodPolicy": {"enabled": cluster_objects},
        "networkPolicy": {"kuberay": {"namespace": kuberay_incluster.NAMESPACE}},
        "nodeSelector": {nodes.DEDICATED_LABEL: ROLE},
        "tolerations": [{**nodes.dedicated_taint(ROLE), "operator": "Equal"}],
        "trainerIdentity": {"annotations": dict(trainer_annotations or {}), "namespaces": {}},
    }


class Release:
    """One Helm release of the operator chart."""

    def __init__(self, helm: Helm, namespace: str, name: str) -> None:
        self.helm, self.namespace, self.name = helm, namespace, name

    def install(self, chart_values: dict[str, Any]) -> None:
        self.helm.run("install", self.name, CHART, "-n", self.namespace, "-f", self.helm.values_file(chart_values))

    def uninstall(self) -> None:
        self.helm.run("uninstall", self.name, "-n", self.namespace, "--wait", "--timeout", "60s")

    @property
    def lease(self) -> str:
        return self.name if "mmrl-operator" in self.name else f"{self.name}-mmrl-operator"

    def pods(self, core: client.CoreV1Api) -> list[client.V1Pod]:
        selector = f"app.kubernetes.io/name=mmrl-operator,app.kubernetes.io/instance={self.name}"
        return core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def ready_pods(self, core: client.CoreV1Api) -> list[client.V1Pod]:
        """Running, Ready and not being deleted."""
        return [p for p in self.pods(core) if pod_is_ready(core.api_client.sanitize_for_serialization(p))]

    def wait_ready(self, core: client.CoreV1Api, count: int, timeout: float = 180.0) -> list[client.V1Pod]:
        """Wait until ``count`` of the release's pods are Ready (their readiness probe: kopf's /healthz)."""
        deadline = time.monotonic() + timeout
        while len(pods := self.ready_pods(core)) != count:
            if time.monotonic() > deadline:
                states = {p.metadata.name: p.status.container_statuses for p in self.pods(core)}
                raise TimeoutError(f"{count} operator pods not Ready after {timeout:.0f} s: {states}")
            time.sleep(0.5)
        return pods

    def crash(self, kubelet: Kubelet, core: client.CoreV1Api, pod: client.V1Pod) -> Path:
        """Crash one operator pod as a lost node does: SIGKILL its container's PID 1 (the container's PID namespace
        goes with it), then force-delete the pod. Nothing releases its Lease. Returns the pod's log file."""
        worker = kubelet.workers[pod.metadata.uid]
        pid = worker.containers[0].pid_one()
        if pid is None:
            raise RuntimeError(f"operator pod {pod.metadata.name} runs no container")
        os.kill(pid, signal.SIGKILL)
        core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        return worker.workdir / "logs" / "operator.log"

    def leader(self, api: client.ApiClient) -> str | None:
        """The pod that holds the operator's Lease (the chart names it after the release), or None."""
        try:
            lease = client.CoordinationV1Api(api).read_namespaced_lease(self.lease, self.namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return lease.spec.holder_identity
