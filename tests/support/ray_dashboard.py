"""Ray's own view of a RayCluster's jobs, read from its head's dashboard through the apiserver's service proxy (as a
user on the cluster would, and without any route from this process to a pod's address)."""

from __future__ import annotations

from kubernetes import client

from mmrl_local.common import rest


def ray_jobs(api_client: client.ApiClient, namespace: str, cluster: str) -> dict[str, str]:
    """Ray's job list on ``cluster``'s head: submission id -> status (PENDING, RUNNING, STOPPED, ...)."""
    path = f"/api/v1/namespaces/{namespace}/services/{cluster}-head-svc:dashboard/proxy/api/jobs/"
    listed = rest.request(api_client, "GET", path)
    return {j["submission_id"]: j["status"] for j in listed if j.get("submission_id")}
