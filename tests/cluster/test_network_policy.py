"""Each job's NetworkPolicy, made by the live operator and checked against the pods the REAL KubeRay (v1.5.1, on
kwok's nodes) makes for the job: the policy selects the head and the workers, admits them to each other, and admits
KubeRay's submitter pod (built from our submitterPodTemplate) to the dashboard port and no other pod.

The local cluster has no network plugin that enforces NetworkPolicy (pods here get their addresses from mmrl_local,
not from a CNI): these tests prove the objects, their owner and their selectors against real pods' labels, not that
traffic is dropped. On EKS the VPC CNI's network policy agent enforces them (docs/security.md, "Network")."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_operator.core.builders.network_policy import DASHBOARD_PORT
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def selects(selector: dict[str, Any], pod: dict[str, Any]) -> bool:
    """A matchLabels selector's verdict on a pod (the only selector form the policy uses)."""
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_the_operator_guards_each_jobs_ray_pods_and_the_policy_selects_what_kuberay_made(
    jobs, operator, real_kuberay, nodes_ready, api_client, core
) -> None:
    created = jobs.create(cluster_job("guard", {"spec": {"resilience": {"maxRestarts": 0}}}))
    jobs.create(cluster_job("other"))
    networking = client.NetworkingV1Api(api_client)

    def policy(name: str) -> dict[str, Any] | None:
        try:
            return api_client.sanitize_for_serialization(networking.read_namespaced_network_policy(name, jobs.ns))
        except client.exceptions.ApiException as err:
            if err.status == 404:
                return None
            raise

    guard = wait_until(lambda: policy("guard-ray"), 60, what="the job's NetworkPolicy")
    assert wait_until(lambda: policy("other-ray"), 60, what="the other job's NetworkPolicy")
    (owner,) = guard["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (c.KIND, created["metadata"]["uid"], True)
    assert guard["metadata"]["labels"][c.LABEL_JOB] == "guard"

    # KubeRay made the head, the worker and (with the cluster ready and the attempt's RayJob) the submitter's pod.
    def pods() -> list[dict[str, Any]]:
        return [api_client.sanitize_for_serialization(p) for p in core.list_namespaced_pod(jobs.ns).items]

    def made() -> dict[str, dict[str, Any]] | None:
        found = {}
        for pod in pods():
            labels = pod["metadata"].get("labels") or {}
            if labels.get(c.RAY_CLUSTER_LABEL) == "guard":
                found[labels.get("ray.io/node-type", "")] = pod
            elif labels.get("batch.kubernetes.io/job-name") == "guard-a1":
                found["submitter"] = pod
        return found if {"head", "worker", "submitter"} <= set(found) else None

    mine = wait_until(made, 120, what="KubeRay's head, worker and submitter pods of the job")
    theirs = [p for p in pods() if (p["metadata"].get("labels") or {}).get(c.RAY_CLUSTER_LABEL) == "other"]
    assert theirs, "the other job's Ray pods"

    spec = guard["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    own, dashboard = spec["ingress"]
    assert selects(spec["podSelector"], mine["head"]) and selects(spec["podSelector"], mine["worker"])
    assert not any(selects(spec["podSelector"], p) for p in [mine["submitter"], *theirs])
    # Between the cluster's own pods: every port. From the other job's pods: nothing.
    assert "ports" not in own
    assert all(selects(own["from"][0]["podSelector"], mine[k]) for k in ("head", "worker"))
    assert not any(selects(own["from"][0]["podSelector"], p) for p in theirs)
    # The dashboard (Ray's Jobs API): this job's submitter pod, and KubeRay from its namespace.
    submitter, kuberay = dashboard["from"]
    assert dashboard["ports"] == [{"protocol": "TCP", "port": DASHBOARD_PORT}]
    assert selects(submitter["podSelector"], mine["submitter"])
    assert not any(selects(submitter["podSelector"], p) for p in [mine["head"], mine["worker"], *theirs])
    assert kuberay["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "default"}}

    # KubeRay kept the restricted securityContext of our templates (and copied the worker's to its init container).
    for pod in (mine["head"], mine["worker"], mine["submitter"]):
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, pod["metadata"]["name"]
        for container in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, container["name"]
            assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
    assert mine["submitter"]["spec"]["automountServiceAccountToken"] is False
