"""Each namespace's trainer identity on the real control plane, with the operator running under the chart's RBAC and
reading the chart's rendered trainerIdentity settings: one `mmrl-trainer` per namespace, made by the first job's pass
and by no later job's (the audit log counts every request), carrying the platform's annotations (per namespace where
the values say so), and put back when a tenant edits or deletes it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_operator.core.names import TRAINER_IDENTITY
from tests.cluster.test_operator_rbac import ChartIdentity
from tests.support.audit import Request, requests_by
from tests.support.chart import of_kind
from tests.support.jobspecs import cluster_job
from tests.support.operator import Jobs, OperatorProcess, wait_until

pytestmark = pytest.mark.cluster

ROLE_ARN = "arn:aws:iam::111122223333:role/mmrl-trainer"
VISION_ARN = "arn:aws:iam::111122223333:role/mmrl-trainer-vision"
ARN_KEY = "eks.amazonaws.com/role-arn"


def settings_file(helm, release_ns: str, values: dict, path: Path) -> Path:
    """The trainerIdentity settings as the chart renders them into the ConfigMap the operator's pod mounts."""
    (config,) = [
        o
        for o in of_kind(helm.template("identity", release_ns, values), "ConfigMap")
        if "trainer" in o["metadata"]["name"]
    ]
    (text,) = config["data"].values()
    path.write_text(text)
    return path


def of_job(requests: list[Request], namespace: str, job: str) -> Counter[str]:
    """The job's requests: on the job, its status and its children (named after it), and on its Events."""
    mine = [r for r in requests if r.namespace == namespace and r.name and r.name.split(".")[0].startswith(job)]
    return Counter(f"{r.verb} {r.resource}" for r in mine)


def identity_of(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    return core.read_namespaced_service_account(TRAINER_IDENTITY, namespace).metadata.annotations or {}


def test_one_identity_per_namespace_with_the_platforms_annotations_kept_and_nothing_per_job(
    control_plane, api_client, core, cluster_helm, audited_namespace, namespace, other_namespace, mmrl_crd, tmp_path
) -> None:
    watch = [namespace, other_namespace]
    ident = ChartIdentity(api_client, cluster_helm, audited_namespace, watch, tmp_path)
    values = {
        "trainerIdentity": {
            "annotations": {ARN_KEY: ROLE_ARN},
            "namespaces": {other_namespace: {"annotations": {ARN_KEY: VISION_ARN}}},
        }
    }
    env = {
        "POD_NAMESPACE": ident.namespace,
        "MMRL_LEASE_NAME": ident.lease,
        "MMRL_TRAINER_IDENTITY_FILE": str(settings_file(cluster_helm, audited_namespace, values, tmp_path / "ti.json")),
    }
    jobs, vision = Jobs(api_client, namespace), Jobs(api_client, other_namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    try:
        with OperatorProcess(ident.kubeconfig, tmp_path / "operator.log", standalone=False, namespaces=watch, env=env):
            for name in ("first", "second", "third"):
                jobs.create(cluster_job(name))
                wait_until(lambda n=name: jobs.status(n).get("phase") == "Provisioning", 60, what=f"{name} applied")
            assert identity_of(core, namespace)[ARN_KEY] == ROLE_ARN
            vision.create(cluster_job("seg"))
            wait_until(lambda: vision.status("seg").get("phase") == "Provisioning", 60, what="seg applied")
            assert identity_of(core, other_namespace)[ARN_KEY] == VISION_ARN  # that namespace's own role

            made = requests_by(control_plane.audit_log, ident.username)
            writes = [r for r in made if r.name == TRAINER_IDENTITY and r.verb == "patch" and r.namespace == namespace]
            assert sorted(r.resource for r in writes) == ["rolebindings", "roles", "serviceaccounts"]  # once, all
            costs = {name: of_job(made, namespace, name) for name in ("second", "third")}
            for cost in costs.values():
                assert not any(k.endswith(("serviceaccounts", "roles", "rolebindings")) for k in cost), cost
            print(
                json.dumps(
                    {
                        "first (with the identity)": of_job(made, namespace, "first")
                        + Counter(f"{r.verb} {r.resource}" for r in writes),
                        **costs,
                    },
                    indent=1,
                )
            )

            # A tenant points the account at another role, and removes the binding: both are put back.
            theirs = {"metadata": {"annotations": {ARN_KEY: "arn:aws:iam::999999999999:role/theirs"}}}
            core.patch_namespaced_service_account(TRAINER_IDENTITY, namespace, theirs)
            rbac.delete_namespaced_role_binding(TRAINER_IDENTITY, namespace)
            wait_until(lambda: identity_of(core, namespace)[ARN_KEY] == ROLE_ARN, 30, what="the role ARN put back")
            binding = wait_until(lambda: rbac.read_namespaced_role_binding(TRAINER_IDENTITY, namespace), 30)
            assert [s.name for s in binding.subjects] == [TRAINER_IDENTITY]
            # The identity outlives the jobs.
            for name in ("first", "second", "third"):
                jobs.delete(name)
            wait_until(lambda: not jobs.ray_names("rayclusters"), 60, what="the jobs' clusters gone")
            assert identity_of(core, namespace)[ARN_KEY] == ROLE_ARN
            labels = core.read_namespaced_service_account(TRAINER_IDENTITY, namespace).metadata.labels
            assert labels[c.LABEL_MANAGED_BY] == c.MANAGED_BY
    finally:
        ident.delete()
