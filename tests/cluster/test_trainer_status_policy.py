"""The trainer status policy on the real apiserver: the namespace's `mmrl-trainer` may patch a job's status only with a
token bound to one of that job's Ray pods, and only the trainer's fields.

Pods here are real Pod objects named as KubeRay names a RayCluster's pods; they are never scheduled (nothing has to
run for a token to be bound to a pod). The policy's CEL is also checked against `ray_pod_of_job`, the Python the unit
tests hold to the no-two-jobs claim, on generated names, through a copy of its variables on ConfigMaps."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.common.apply import apply_objects
from mmrl_operator.codegen.trainer_status_policy import POD_NAME_EXTRA, pod_match_variables, ray_pod_of_job
from mmrl_operator.core.builders.identity import build_trainer_identity
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_operator.core.names import TRAINER_IDENTITY
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.operator import wait_until
from tests.unit.operator.test_trainer_status_policy import group_lists, job_names, pod_of

pytestmark = pytest.mark.cluster
JOBS = (c.GROUP, c.VERSION)
UNSCHEDULED = "mmrl-test-never-scheduled"  # no scheduler has this name: the pods stay Pending, and still exist


def as_token(api: client.ApiClient, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = api.configuration.host, api.configuration.ssl_ca_cert
    cfg.api_key, cfg.api_key_prefix = {"authorization": token}, {"authorization": "Bearer"}
    return client.ApiClient(cfg)


class Trainers:
    """The namespace's trainer identity, jobs, pods named like their Ray pods, and tokens bound to those pods."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        apply_objects(api, build_trainer_identity(namespace, {}), field_manager="mmrl-test")

    def job(self, name: str, groups: list[str]) -> str:
        groups_patch = {"spec": {"cluster": {"workerGroups": [{"name": g} for g in groups]}}}
        body = cluster_job(name, merge_patch(MULTI_NODE, groups_patch))  # several groups: the local backend
        self.custom.create_namespaced_custom_object(*JOBS, self.ns, c.PLURAL, body)
        self.custom.patch_namespaced_custom_object_status(
            *JOBS, self.ns, c.PLURAL, name, {"status": {"phase": "Running"}}
        )
        return name

    def pod(self, name: str, account: str = TRAINER_IDENTITY) -> client.V1Pod:
        spec = {
            "serviceAccountName": account,
            "schedulerName": UNSCHEDULED,
            "containers": [{"name": "c", "image": "x"}],
        }
        return self.core.create_namespaced_pod(self.ns, {"metadata": {"name": name}, "spec": spec})

    def token(self, pod: client.V1Pod | None = None, account: str = TRAINER_IDENTITY) -> str:
        spec: dict = {"expirationSeconds": 600}
        if pod is not None:
            ref = {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}
            spec["boundObjectRef"] = ref
        return self.core.create_namespaced_service_account_token(account, self.ns, {"spec": spec}).status.token

    def patch(self, token: str, job: str, status: dict) -> client.ApiException | None:
        """Patch the job's status as `token`; the refusal, or None when it was accepted."""
        api = client.CustomObjectsApi(as_token(self.api, token))
        try:
            api.patch_namespaced_custom_object_status(*JOBS, self.ns, c.PLURAL, job, {"status": status})
        except client.ApiException as refused:
            return refused
        return None

    def progress(self, job: str) -> dict:
        obj = self.custom.get_namespaced_custom_object(*JOBS, self.ns, c.PLURAL, job)
        return (obj.get("status") or {}).get("progress") or {}


@pytest.fixture
def trainers(api_client: client.ApiClient, namespace: str, mmrl_crd: None) -> Trainers:
    return Trainers(api_client, namespace)


def test_a_pod_bound_token_carries_the_pod_name_the_policy_reads(trainers: Trainers) -> None:
    pod = trainers.pod("geo-head-b2c4d")
    authn = client.AuthenticationV1Api(as_token(trainers.api, trainers.token(pod)))
    user = authn.create_self_subject_review({}).status.user_info
    assert user.username == f"system:serviceaccount:{trainers.ns}:{TRAINER_IDENTITY}"
    assert user.extra[POD_NAME_EXTRA] == ["geo-head-b2c4d"]
    unbound = client.AuthenticationV1Api(as_token(trainers.api, trainers.token()))
    assert POD_NAME_EXTRA not in (unbound.create_self_subject_review({}).status.user_info.extra or {})


def test_a_ray_pod_of_a_job_may_report_its_progress_and_not_another_jobs(trainers: Trainers) -> None:
    geo, sibling = trainers.job("geo", ["p5", "g6"]), trainers.job("sibling", ["p5"])
    head, worker = trainers.pod("geo-head-b2c4d"), trainers.pod("geo-g6-worker-zz4k9")
    # The local backend reports from the Ray driver on the head, SkyRL from its entry task on a worker: both may.
    for n, pod in enumerate((head, worker), start=1):
        assert trainers.patch(trainers.token(pod), geo, {"progress": {"step": n, "attempt": 1}}) is None
        assert trainers.progress(geo)["step"] == n
    refused = trainers.patch(trainers.token(head), sibling, {"progress": {"step": 9, "attempt": 1}})
    assert refused is not None and refused.status in (403, 422)
    assert "mmrl-trainer-status-fields" in refused.body
    assert "bound to pod geo-head-b2c4d, which is not a Ray pod of job sibling" in refused.body
    assert trainers.progress(sibling) == {}


def test_a_token_not_bound_to_a_pod_is_refused(trainers: Trainers) -> None:
    geo = trainers.job("geo", ["p5"])
    refused = trainers.patch(trainers.token(), geo, {"progress": {"step": 1, "attempt": 1}})
    assert refused is not None and "only with a token bound to a pod" in refused.body
    assert trainers.progress(geo) == {}


def test_a_pod_named_like_another_jobs_is_that_jobs_only(trainers: Trainers) -> None:
    # With dashes in group names, job geo's group x-y and job geo-x's group y would share pod names; the API allows
    # no dash in a group name, so a pod of that name is geo-x's alone, whoever made it.
    geo, geo_x = trainers.job("geo", ["x"]), trainers.job("geo-x", ["y"])
    lookalike = trainers.token(trainers.pod("geo-x-y-worker-b2c4d"))
    refused = trainers.patch(lookalike, geo, {"progress": {"step": 1, "attempt": 1}})
    assert refused is not None and "is not a Ray pod of job geo:" in refused.body
    assert trainers.patch(lookalike, geo_x, {"progress": {"step": 2, "attempt": 1}}) is None
    geos_worker = trainers.token(trainers.pod("geo-x-worker-b2c4d"))  # geo's group x
    refused = trainers.patch(geos_worker, geo_x, {"progress": {"step": 3, "attempt": 1}})
    assert refused is not None and "is not a Ray pod of job geo-x:" in refused.body
    assert trainers.progress(geo) == {} and trainers.progress(geo_x)["step"] == 2


def test_a_jobs_own_ray_pod_still_writes_only_the_trainers_fields(trainers: Trainers) -> None:
    geo = trainers.job("geo", ["p5"])
    token = trainers.token(trainers.pod("geo-p5-worker-b2c4d"))
    for forged in ({"phase": "Succeeded"}, {"attempts": []}, {"restarts": {"infra": 0}}):
        refused = trainers.patch(token, geo, forged)
        assert refused is not None and refused.status in (403, 422)
        (field,) = forged
        assert f"status.{field} belongs to the operator" in refused.body
    status = trainers.custom.get_namespaced_custom_object(*JOBS, trainers.ns, c.PLURAL, geo)["status"]
    assert status["phase"] == "Running"


def test_a_job_from_before_the_namespace_identity_keeps_its_trainer_to_the_trainers_fields(trainers: Trainers) -> None:
    # Its own ServiceAccount and Role (by resourceNames) stay until the job is deleted; so do the field rules.
    geo = trainers.job("geo", ["p5"])
    legacy = f"{geo}-trainer"
    rbac = client.RbacAuthorizationV1Api(trainers.api)
    trainers.core.create_namespaced_service_account(trainers.ns, {"metadata": {"name": legacy}})
    rule = {"apiGroups": [c.GROUP], "resources": [f"{c.PLURAL}/status"], "resourceNames": [geo], "verbs": ["patch"]}
    rbac.create_namespaced_role(trainers.ns, {"metadata": {"name": legacy}, "rules": [rule]})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": legacy}
    subject = {"kind": "ServiceAccount", "name": legacy, "namespace": trainers.ns}
    rbac.create_namespaced_role_binding(
        trainers.ns, {"metadata": {"name": legacy}, "roleRef": ref, "subjects": [subject]}
    )
    token = trainers.token(trainers.pod("geo-head-b2c4d", account=legacy), account=legacy)
    assert wait_until(lambda: trainers.patch(token, geo, {"progress": {"step": 4, "attempt": 1}}) is None, 10)
    refused = trainers.patch(token, geo, {"phase": "Succeeded"})
    assert refused is not None and "status.phase belongs to the operator" in refused.body


# --- the names KubeRay gives the pods ------------------------------------------------------------------------------

LONG_JOB = "kuberay-names-" + "x" * 26  # 40 characters, the most a job name may have
LONG_GROUP = "g" * 20  # the longest group name: `<job>-<group>` is 61 characters, which KubeRay cuts to 50


def long_named_job() -> dict:
    return cluster_job(LONG_JOB, {"spec": {"cluster": {"workerGroups": [{"name": LONG_GROUP}]}}})


def assert_every_ray_pod_may_report(api: client.ApiClient, namespace: str, job: str, groups: list[str]) -> None:
    """Every pod KubeRay (or its stand-in) made for the job's RayCluster runs as the trainer identity, has a name the
    policy accepts for the job, and a token bound to it may patch the job's progress on the live apiserver."""
    trainers = Trainers(api, namespace)
    selector = f"{c.RAY_CLUSTER_LABEL}={job}"
    pods = wait_until(
        lambda: (
            (found := trainers.core.list_namespaced_pod(namespace, label_selector=selector).items)
            and {p.metadata.labels.get("ray.io/node-type") for p in found} == {"head", "worker"}
            and found
        ),
        120,
        what="the head and worker pods",
    )
    for n, pod in enumerate(pods, start=1):
        assert pod.spec.service_account_name == TRAINER_IDENTITY, pod.metadata.name
        assert ray_pod_of_job(pod.metadata.name, job, groups), pod.metadata.name
        assert trainers.patch(trainers.token(pod), job, {"progress": {"step": n, "attempt": 1}}) is None
        assert trainers.progress(job)["step"] == n


def test_the_kuberay_stand_in_names_pods_as_kuberay_and_their_tokens_may_report(
    jobs, operator, kuberay, nodes_ready, api_client
) -> None:
    # tests/cluster/test_real_kuberay.py checks the same of the real KubeRay.
    kuberay.script(f"{LONG_JOB}-a*", "hang")
    jobs.create(long_named_job())
    assert_every_ray_pod_may_report(api_client, jobs.ns, LONG_JOB, [LONG_GROUP])


# --- the policy's CEL against ray_pod_of_job ---------------------------------------------------------------------


class PodNameProbe:
    """The policy's pod-name variables in a policy of their own, on ConfigMaps that carry (pod, job, groups) and a
    label no one else uses: a server-side dry run of one is accepted exactly when the CEL accepts the pod for the job.
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.label = {"mmrl.dev/pod-name-probe": secrets.token_hex(4)}
        self.name = f"mmrl-test-pod-name-probe-{self.label['mmrl.dev/pod-name-probe']}"
        self.core = client.CoreV1Api(api)
        admission = "admissionregistration.k8s.io/v1"
        policy = {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": self.name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "objectSelector": {"matchLabels": self.label},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                },
                "variables": pod_match_variables("object.data.pod", "object.data.job", "object.data.groups.split(',')"),
                "validations": [{"expression": "variables.rayHead || variables.rayWorker", "message": "not the job's"}],
            },
        }
        binding = {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": self.name},
            "spec": {"policyName": self.name, "validationActions": ["Deny"]},
        }
        self.objects = [policy, binding]
        apply_objects(api, self.objects, field_manager="mmrl-test")
        # In force once a name no job has is refused.
        wait_until(lambda: not self.accepts("nobody", "geo", ["p5"]), 30, what="the probe policy in force")

    def accepts(self, pod: str, job: str, groups: list[str]) -> bool:
        body = {
            "metadata": {"generateName": "probe-", "labels": self.label},
            "data": {"pod": pod, "job": job, "groups": ",".join(groups)},
        }
        try:
            self.core.create_namespaced_config_map(self.ns, body, dry_run="All")
        except client.ApiException as refused:
            if refused.status == 422 or "not the job's" in (refused.body or ""):
                return False
            raise
        return True

    def delete(self) -> None:
        admission = client.AdmissionregistrationV1Api(self.api)
        admission.delete_validating_admission_policy_binding(self.name)
        admission.delete_validating_admission_policy(self.name)


@pytest.fixture
def probe(api_client: client.ApiClient, namespace: str) -> Iterator[PodNameProbe]:
    made = PodNameProbe(api_client, namespace)
    yield made
    made.delete()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_policys_cel_accepts_the_pod_names_ray_pod_of_job_accepts(probe: PodNameProbe, data: st.DataObject) -> None:
    job, groups = data.draw(job_names, "job"), data.draw(group_lists, "groups")
    pod = data.draw(pod_of(job, groups), "pod")
    # Its own job's name, a job named like the start of the pod's name, or any; a near miss of the pod's name.
    other = data.draw(st.sampled_from([job, pod.rsplit("-", 2)[0]]) | job_names, "job asked")
    asked = data.draw(st.sampled_from([pod, pod[:-1], pod + "x", pod.replace("-", "", 1), pod.upper()]), "pod asked")
    assert probe.accepts(asked, other, groups) == ray_pod_of_job(asked, other, groups)
