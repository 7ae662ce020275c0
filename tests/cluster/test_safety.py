"""The safety core on the real control plane: an operator restart never mistakes an unseen node for a deleted
one, and never stops healthy training."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.addons.operator_process import OperatorProcess
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def static_nodes(core: client.CoreV1Api, count: int, prefix: str) -> list[str]:
    """Plain Node objects no kubelet runs and nothing may schedule on. Named to sort first, they make the
    operator's initial node watch deliver the job's real nodes late."""
    names = [f"{prefix}-{i:04d}" for i in range(count)]
    for name in names:
        core.create_node(
            {
                "metadata": {"name": name, "labels": {"mmrl-test/static": "true"}},
                "spec": {"taints": [{"key": "mmrl-test/static", "value": "true", "effect": "NoSchedule"}]},
            }
        )
    return names


def passes(op: OperatorProcess) -> float:
    """Reconcile passes the operator finished so far (0 while its metrics endpoint is not up yet)."""
    try:
        return op.metric("mmrl_reconcile_duration_seconds_count")
    except OSError:
        return 0.0


def ray_pods(core: client.CoreV1Api, ns: str, job: str) -> set[str]:
    pods = core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}={job}").items
    return {p.metadata.name for p in pods if not p.metadata.deletion_timestamp}


def test_operator_restarts_never_stop_training_on_nodes_its_caches_have_not_seen(
    jobs, kuberay, hyperpod_nodes, control_plane, namespace, core, tmp_path
):
    fillers = static_nodes(core, 400, "aaa-static")
    try:
        hyperpod_nodes.cpu()
        hyperpod_nodes.gpu(2)
        kuberay.script("geo-a*", "hang")
        with OperatorProcess(control_plane.kubeconfig, tmp_path / "op-0.log", namespaces=[namespace]):
            jobs.create(cluster_job("geo"))
            wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
        before = ray_pods(core, namespace, "geo")
        for i in range(1, 4):
            with OperatorProcess(control_plane.kubeconfig, tmp_path / f"op-{i}.log", namespaces=[namespace]) as op:
                # The first pass runs on the start-up LIST; two more are woken by events on a child (the operator
                # runs at its production resync, so waiting for resyncs would take a minute a restart).
                wait_until(lambda op=op: passes(op) >= 1, 60, what="the first reconcile pass")
                for poke in range(2):
                    done = passes(op)
                    jobs.poke_child("rayclusters", "geo", f"{i}-{poke}")
                    wait_until(lambda op=op, done=done: passes(op) > done, 30, what="a pass woken by the child")
        status = jobs.status("geo")
        assert status["attempt"] == 1 and status["attempts"][0]["result"] == "Running"
        assert status.get("restarts", {}) == {} and not status.get("degradedNodes")
        assert ray_pods(core, namespace, "geo") == before
        assert jobs.ray_names("rayjobs") == ["geo-a1"]
    finally:
        for name in fillers:
            core.delete_node(name)


def test_a_cordoned_node_does_not_make_an_application_failure_infra(jobs, operator, kuberay, hyperpod_nodes, core):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    kuberay.script("geo-a1", "hang")  # fails only once the operator has seen the cordon (below)
    kuberay.script("geo-a2", "succeed-after=1")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    pods = core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}=ray-worker")
    node = next(p.spec.node_name for p in pods.items if p.spec.node_name)
    core.patch_node(node, {"spec": {"unschedulable": True}})  # kubectl cordon
    try:
        assert core.read_node(node).spec.unschedulable is True
        # The operator has judged the cordoned node while attempt 1 still trains on it (one status snapshot), so
        # the failure below happens on a node it knows to be cordoned.
        status = wait_until(
            lambda: (st := jobs.status("geo")).get("degradedNodes") == [node] and st,
            30,
            what=f"the operator to report the cordoned node {node}",
        )
        assert status["attempts"][0]["result"] == "Running" and jobs.condition("geo", "NodeFaults") == "True"
        kuberay.script("geo-a1", "fail-after=0,message=loss is NaN")
        wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 90, what="the job to succeed")
    finally:
        core.patch_node(node, {"spec": {"unschedulable": False}})
    status = jobs.status("geo")
    assert status["attempts"][0]["failure"] == "application" and status["restarts"] == {"application": 1}
    assert "loss is NaN" in status["attempts"][0]["message"]


def test_raising_maxrestarts_resumes_a_job_that_ran_out_of_restarts(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a1", "fail-after=1,message=CUDA error")
    kuberay.script("geo-a2", "succeed-after=1")
    jobs.create(cluster_job("geo", {"spec": {"resilience": {"maxRestarts": 0}}}))
    wait_until(lambda: jobs.status("geo").get("phase") == "Failed", 60, what="the budget to run out")
    assert next(x for x in jobs.status("geo")["conditions"] if x["type"] == "Stalled")["reason"] == (
        "RestartBudgetExhausted"
    )
    job_dir = jobs.status("geo")["jobDir"]

    jobs.patch("geo", {"spec": {"resilience": {"maxRestarts": 1}}})

    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 60, what="the resumed job to succeed")
    status = jobs.status("geo")
    assert [a["result"] for a in status["attempts"]] == ["Failed", "Succeeded"]
    assert status["jobDir"] == job_dir and jobs.ray_names("rayjobs") == ["geo-a1", "geo-a2"]
    assert "Resumed" in jobs.events("geo")


class AdmissionPolicy:
    """A ValidatingAdmissionPolicy + binding limited to one namespace, standing in for a Kueue or policy webhook."""

    def __init__(self, api_client: client.ApiClient, namespace: str, resource: str, expression: str, why: str):
        self.api = client.AdmissionregistrationV1Api(api_client)
        self.name = f"mmrl-test-{namespace}"[:63]
        self.api.create_validating_admission_policy(
            {
                "metadata": {"name": self.name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": ["ray.io"],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": [resource],
                            }
                        ]
                    },
                    "validations": [{"expression": expression, "message": why}],
                },
            }
        )
        self.api.create_validating_admission_policy_binding(
            {
                "metadata": {"name": self.name},
                "spec": {
                    "policyName": self.name,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                    },
                },
            }
        )

    def wait_active(self, custom: client.CustomObjectsApi, namespace: str, plural: str, probe: dict) -> None:
        def refused() -> bool:
            try:
                custom.create_namespaced_custom_object("ray.io", "v1", namespace, plural, probe, dry_run="All")
            except client.ApiException as exc:
                return exc.status in (400, 403, 422)
            return False

        wait_until(refused, 30, what="the admission policy to take effect")

    def delete(self) -> None:
        self.api.delete_validating_admission_policy_binding(self.name)
        self.api.delete_validating_admission_policy(self.name)


def test_a_refused_raycluster_is_reported_as_apply_failed_with_the_apiservers_message(
    jobs, operator, kuberay, nodes_ready, api_client, custom
):
    why = "hostIPC is not allowed in this namespace"
    expr = "!has(object.spec.headGroupSpec.template.spec.hostIPC) || !object.spec.headGroupSpec.template.spec.hostIPC"
    policy = AdmissionPolicy(api_client, jobs.ns, "rayclusters", expr, why)
    try:
        probe = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "probe"},
            "spec": {"headGroupSpec": {"template": {"spec": {"hostIPC": True, "containers": [{"name": "x"}]}}}},
        }
        policy.wait_active(custom, jobs.ns, "rayclusters", probe)
        jobs.create(cluster_job("geo", {"spec": {"cluster": {"podTemplate": {"specPatch": {"hostIPC": True}}}}}))

        def stalled():
            cond = next((x for x in jobs.status("geo").get("conditions") or [] if x["type"] == "Stalled"), None)
            return cond if cond and cond["status"] == "True" and cond["reason"] == "ApplyFailed" else None

        cond = wait_until(stalled, 30, what="Stalled=True/ApplyFailed")
        assert "RayCluster geo was refused" in cond["message"] and why in cond["message"]
        status = jobs.status("geo")
        assert status["observedGeneration"] == jobs.get("geo")["metadata"]["generation"]
        assert jobs.condition("geo", "Ready") == "False" and jobs.ray_names("rayclusters") == []
        assert jobs.events("geo").count("ApplyFailed") == 1
    finally:
        policy.delete()


def test_fault_handling_goes_on_while_the_next_rayjob_is_refused(
    jobs, operator, kuberay, hyperpod_nodes, api_client, custom
):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    kuberay.script("geo-a1", "hang,fail-on-node-loss")
    kuberay.script("geo-a2", "succeed-after=1")
    policy = AdmissionPolicy(
        api_client, jobs.ns, "rayjobs", "!object.metadata.name.endsWith('-a2')", "the team's quota is used up"
    )
    try:
        probe = {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "probe-a2"},
            "spec": {"entrypoint": "x", "clusterSelector": {"ray.io/cluster": "x"}},
        }
        policy.wait_active(custom, jobs.ns, "rayjobs", probe)
        jobs.create(cluster_job("geo"))
        wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
        pods = client.CoreV1Api(api_client).list_namespaced_pod(
            jobs.ns, label_selector=f"{c.LABEL_COMPONENT}=ray-worker"
        )
        worker_node = next(p.spec.node_name for p in pods.items if p.spec.node_name)
        hyperpod_nodes.set_health(worker_node, "UnschedulablePendingReboot")

        def refused(st: dict) -> bool:
            stalled = next((x for x in st.get("conditions") or [] if x["type"] == "Stalled"), {})
            return st["attempts"][0]["result"] == "Stopped" and stalled.get("reason") == "ApplyFailed"

        # One snapshot: a pass that finds the cluster not ready yet does not try (and fail) to apply again.
        status = wait_until(
            lambda: (st := jobs.status("geo")) and refused(st) and st, 60, what="attempt 1 stopped, attempt 2 refused"
        )
        assert status["attempt"] == 1 and status["restarts"] == {"infra": 1}
        assert "the team's quota is used up" in status["message"]
    finally:
        policy.delete()
    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 90, what="attempt 2 once the policy is gone")
    assert jobs.status("geo")["restarts"] == {"infra": 1}


def test_trainer_heartbeats_do_not_cost_reconcile_passes(jobs, operator, kuberay, nodes_ready):
    kuberay.script("geo-a*", "hang")
    jobs.create(cluster_job("geo", {"spec": {"resilience": {"hangTimeoutSeconds": 600}}}))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    wait_until(lambda: passes(operator) > 0, 30, what="metrics")
    before = passes(operator)
    seen = operator.metric("mmrl_progress_only_events_total")
    for step in range(1, 31):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        jobs.patch_status("geo", {"progress": {"attempt": 1, "step": step, "heartbeat": now}})
    # The operator has handled the heartbeats' events (kopf may batch a few of one object's events into one).
    wait_until(
        lambda: operator.metric("mmrl_progress_only_events_total") - seen >= 25, 30, what="the heartbeats' events"
    )
    # At most one pass: a resync (every 30 s) may fall inside the window.
    assert jobs.status("geo")["phase"] == "Running", jobs.status("geo")
    assert passes(operator) - before <= 1, "heartbeats triggered reconcile passes"
    assert jobs.status("geo")["phase"] == "Running"


def test_a_pod_template_change_during_an_attempt_is_pending_then_applied_between_attempts(
    jobs, operator, kuberay, hyperpod_nodes, core
):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    kuberay.script("geo-a1", "hang,fail-on-node-loss")
    kuberay.script("geo-a2", "hang")
    jobs.create(cluster_job("geo"))
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    template_before = jobs.ray("rayclusters")[0]["spec"]["workerGroupSpecs"][0]["template"]

    jobs.patch("geo", {"spec": {"cluster": {"podTemplate": {"labels": {"team": "vision"}}}}})

    wait_until(lambda: jobs.condition("geo", "SpecChangePending") == "True", 30, what="SpecChangePending")
    assert jobs.ray("rayclusters")[0]["spec"]["workerGroupSpecs"][0]["template"] == template_before
    assert jobs.status("geo")["attempt"] == 1
    worker = next(
        p.spec.node_name
        for p in core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_COMPONENT}=ray-worker").items
        if p.spec.node_name
    )
    hyperpod_nodes.set_health(worker, "UnschedulablePendingReboot")  # attempt 1 ends

    def training_on_new_pods() -> bool:
        pods = core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo").items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        return (
            jobs.condition("geo", "Training") == "True"
            and jobs.status("geo")["attempt"] >= 2
            and bool(live)
            and all(p.metadata.labels.get("team") == "vision" for p in live)
        )

    wait_until(training_on_new_pods, 90, what="the next attempt training on pods built from the new template")
    assert jobs.condition("geo", "SpecChangePending") == "False"
    assert jobs.status("geo").get("restarts") == {"infra": 1}
