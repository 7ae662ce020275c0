"""A job whose GPU memory plan does not fit passes the apiserver (no CEL rule can compute the plan) and never gets a
RayCluster: the operator, at its production resync, refuses it before its first child, phase Failed with Stalled
InvalidSpec and the plan's message naming the field, as `mmrl validate` refuses it. Fixed, it starts."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api import validate_manifest
from tests.support.jobspecs import cluster_job
from tests.support.operator import Jobs, wait_until

pytestmark = pytest.mark.cluster
FIELD = "spec.algorithm.rolloutGpuMemoryUtilization"
# Qwen3-VL-8B's bf16 weights and vLLM's profile fill the engines' share of a 24 GB A10G: no KV cache is left.
ON_A10G = {"spec": {"cluster": {"workerGroups": [{"name": "g5", "instanceType": "ml.g5.48xlarge"}]}}}


def children(jobs: Jobs, name: str) -> list[str]:
    """Every object of the kinds the operator creates for a job, labelled as this job's or named after it."""
    core, rbac = jobs.core, client.RbacAuthorizationV1Api(jobs.core.api_client)
    label = f"{c.LABEL_JOB}={name}"
    found = [f"RayCluster/{n}" for n in jobs.ray_names("rayclusters") if n == name]
    found += [f"RayJob/{n}" for n in jobs.ray_names("rayjobs") if n.startswith(f"{name}-a")]
    for kind, items in (
        ("ConfigMap", core.list_namespaced_config_map(jobs.ns, label_selector=label).items),
        ("ServiceAccount", core.list_namespaced_service_account(jobs.ns, label_selector=label).items),
        ("Role", rbac.list_namespaced_role(jobs.ns, label_selector=label).items),
        ("RoleBinding", rbac.list_namespaced_role_binding(jobs.ns, label_selector=label).items),
    ):
        found += [f"{kind}/{o.metadata.name}" for o in items]
    return found


def stalled(jobs: Jobs, name: str) -> dict | None:
    return next((x for x in jobs.status(name).get("conditions") or [] if x["type"] == "Stalled"), None)


def test_a_job_whose_plan_does_not_fit_never_gets_a_raycluster(jobs: Jobs, operator) -> None:
    body = cluster_job("big", ON_A10G)
    refused, errors = validate_manifest(body)
    assert refused is None and [e.path for e in errors] == [FIELD]  # what `mmrl validate` says
    jobs.create(body)  # the apiserver accepts it

    wait_until(lambda: (stalled(jobs, "big") or {}).get("reason") == "InvalidSpec", 60, what="Stalled InvalidSpec")
    status, condition = jobs.status("big"), stalled(jobs, "big")
    assert status["phase"] == "Failed" and condition["status"] == "True"
    assert FIELD in condition["message"] and "does NOT fit" in condition["message"]
    assert errors[0].message in condition["message"]
    assert jobs.condition("big", "Failed") == "True"
    # The event is posted after the status is written: wait for it, as for the condition.
    wait_until(lambda: any(FIELD in m for m in jobs.event_messages("big", "InvalidSpec")), 30, what="the event")

    # A job that fits, created afterwards, gets its RayCluster: the operator has passed over both since.
    jobs.create(cluster_job("fits"))
    wait_until(lambda: "fits" in jobs.ray_names("rayclusters"), 60, what="the fitting job's RayCluster")
    assert children(jobs, "big") == []
    assert jobs.status("big")["phase"] == "Failed"

    # Fixed (the workers move to H100s, a mutable field), the job starts from Pending and gets its RayCluster.
    jobs.patch("big", {"spec": {"cluster": {"workerGroups": cluster_job("big")["spec"]["cluster"]["workerGroups"]}}})
    wait_until(lambda: "big" in jobs.ray_names("rayclusters"), 60, what="the fixed job's RayCluster")
    # The status is written after the child is created: wait for it to leave Failed, as for the RayCluster.
    wait_until(
        lambda: jobs.status("big")["phase"] != "Failed" and (stalled(jobs, "big") or {}).get("reason") != "InvalidSpec",
        30,
        what="the fixed job's status to leave Failed",
    )
    workers = next(r for r in jobs.ray("rayclusters") if r["metadata"]["name"] == "big")["spec"]["workerGroupSpecs"]
    assert workers[0]["template"]["spec"]["containers"][0]["resources"]["limits"][c.GPU_RESOURCE] == "8"
