"""What the controllers run in the local cluster have in common (``kuberay_incluster``, ``kueue_incluster``): one
Deployment in the controller's own namespace, its pod run by the local kubelet on a node kept for it (a dedicated
role and taint), found by the Deployment's instance label; up when that pod is Ready; gone with the Deployment."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Self

from kubernetes import client

from mmrl_local.cluster import nodes
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.standin.standin_cluster import pod_is_ready


def ignore_missing(call, *args: object, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
    """Delete (``call``) something that may already be gone."""
    try:
        call(*args, **kwargs)
    except client.ApiException as err:
        if err.status != 404:
            raise


class InClusterController:
    """Subclasses set NAMESPACE, ROLE (the dedicated node's role), CONTAINER and WHAT, and implement ``start()``
    (install, then ``_place_and_wait``); ``stop()`` runs ``_uninstall`` first, then removes the Deployment."""

    NAMESPACE = ""
    ROLE = ""
    CONTAINER = ""
    WHAT = ""

    def __init__(self, api: client.ApiClient, kubelet: Kubelet, prefix: str) -> None:
        self.api, self.kubelet = api, kubelet
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.name = f"{prefix}-{secrets.token_hex(3)}"
        self.node: str | None = None

    def start(self, timeout: float = 120.0) -> Self:
        raise NotImplementedError

    def _ensure_namespace(self) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": self.NAMESPACE}})
        except client.ApiException as err:
            if err.status != 409:
                raise

    def _place_and_wait(self, timeout: float) -> None:
        """The node kept for the controller (its Deployment selects and tolerates it), then its pod Ready."""
        self.node = nodes.create_dedicated_node(self.core, self.ROLE)
        deadline = time.monotonic() + timeout
        while True:
            pod = self.pod()
            if pod is not None and pod_is_ready(self.api.sanitize_for_serialization(pod)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.WHAT}'s pod is not Ready after {timeout:.0f} s: {pod and pod.status}")
            time.sleep(0.3)

    def pod(self) -> client.V1Pod | None:
        selector = f"app.kubernetes.io/instance={self.name}"
        pods = self.core.list_namespaced_pod(self.NAMESPACE, label_selector=selector).items
        return next((p for p in pods if not p.metadata.deletion_timestamp), None)

    @property
    def log_path(self) -> Path | None:
        """Where the kubelet writes the controller's container log."""
        pod = self.pod()
        worker = self.kubelet.workers.get(pod.metadata.uid) if pod is not None else None
        return worker.workdir / "logs" / f"{self.CONTAINER}.log" if worker is not None else None

    def _uninstall(self) -> None:
        """What goes before the Deployment (objects the controller must still be running to release)."""

    def stop(self) -> None:
        self._uninstall()
        ignore_missing(
            self.apps.delete_namespaced_deployment, self.name, self.NAMESPACE, propagation_policy="Foreground"
        )
        deadline = time.monotonic() + 60
        while self.pod() is not None and time.monotonic() < deadline:
            time.sleep(0.3)
        if self.node is not None:
            nodes.delete_node(self.core, self.node)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
