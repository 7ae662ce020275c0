"""The informer's store (no apiserver: its list/watch is tested in tests/cluster/test_informer.py): newer versions
win over late deliveries, our own deletes read as terminating, the per-job index follows every change, and the
slim copies give every decision reader the same answer as the whole object."""

from __future__ import annotations

import pytest

from mmrl_api import constants as c
from mmrl_operator.core.builders.inference import build_deployment, build_service, default_adapter
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.health import health_signature, node_verdict
from mmrl_operator.core.names import job_uid
from mmrl_operator.core.observed import (
    adapter_check_failure,
    desired_workers,
    pod_problem,
    queued_by_kueue,
    ray_container_started,
    raycluster_ready,
    rayjob_outcome,
)
from mmrl_operator.core.ownership import controlled_by
from mmrl_operator.core.serving import deployment_state, out_of_date
from mmrl_operator.runtime.caches import (
    PODS,
    job_of,
    slim_deployment,
    slim_node,
    slim_pod,
    slim_raycluster,
    slim_rayjob,
    slim_service,
)
from mmrl_operator.runtime.informer import Informer, Kind
from mmrl_operator.runtime.permissions import Undeclared
from tests.support.factories import job, node, rayjob


def obj(name: str, rv: int, job_name: str = "geo", **extra: object) -> dict:
    meta = {"name": name, "namespace": "team", "resourceVersion": str(rv), "labels": {c.LABEL_JOB: job_name}}
    return {"metadata": meta, **extra}


@pytest.fixture
def informer() -> Informer:
    return Informer(None, PODS, ["team"], label_selector=c.LABEL_JOB, index=job_of)


def test_a_late_older_delivery_does_not_undo_our_newer_write(informer: Informer) -> None:
    informer.wrote(obj("p", 7, status={"phase": "Running"}))
    informer._put(obj("p", 5, status={"phase": "Pending"}))  # the watch catching up
    assert informer.get("team", "p")["status"]["phase"] == "Running"
    informer._put(obj("p", 9, status={"phase": "Failed"}))
    assert informer.get("team", "p")["status"]["phase"] == "Failed"


def test_our_delete_reads_as_terminating_until_the_watch_says_it_is_gone(informer: Informer) -> None:
    informer._put(obj("p", 3))
    informer.deleting("team", "p")
    assert informer.get("team", "p")["metadata"]["deletionTimestamp"]
    informer._put(obj("p", 3))  # the same version delivered again keeps the mark
    assert informer.get("team", "p")["metadata"]["deletionTimestamp"]
    informer._remove(obj("p", 4))
    assert informer.get("team", "p") is None and informer.indexed(("team", "geo")) == []
    informer.deleting("team", "never-seen")  # nothing to mark, nothing invented
    assert informer.get("team", "never-seen") is None


def test_the_job_index_follows_creates_relabels_and_replacements(informer: Informer) -> None:
    informer._put(obj("a", 1))
    informer._put(obj("b", 2))
    informer._put(obj("c", 3, job_name="other"))
    assert {o["metadata"]["name"] for o in informer.indexed(("team", "geo"))} == {"a", "b"}
    informer._put(obj("b", 4, job_name="other"))
    assert {o["metadata"]["name"] for o in informer.indexed(("team", "other"))} == {"b", "c"}
    informer._replace([obj("c", 5, job_name="other")])
    assert informer.indexed(("team", "geo")) == [] and len(informer) == 1


def test_an_informer_on_a_kind_the_chart_does_not_grant_is_refused() -> None:
    with pytest.raises(Undeclared, match="secrets"):
        Informer(None, Kind("", "v1", "secrets"))


def _kuberay_status(cluster: dict, ready: int, state: str = "ready") -> dict:
    cluster["metadata"] |= {"generation": 2, "resourceVersion": "10", "managedFields": [{"manager": "kuberay"}]}
    cluster["status"] = {
        "state": state,
        "readyWorkerReplicas": ready,
        "observedGeneration": 2,
        "conditions": [{"type": "HeadPodReady", "status": "True"}],
    }
    return cluster


@pytest.mark.parametrize("ready", [0, 1])
@pytest.mark.parametrize("suspend", [None, True])
def test_a_slim_raycluster_gives_the_decisions_the_same_answers(ready: int, suspend: bool | None) -> None:
    full = _kuberay_status(build_raycluster(job()), ready)
    if suspend is not None:
        full["spec"]["suspend"] = suspend
    slim = slim_raycluster(full)
    for reader in (desired_workers, queued_by_kueue, raycluster_ready):
        assert reader(slim) == reader(full), reader.__name__
    assert slim["metadata"]["annotations"] == full["metadata"]["annotations"]  # the spec hash
    assert len(str(slim)) < len(str(full)) / 3  # the pod templates are most of it


@pytest.mark.parametrize("available", [False, True])
def test_a_slim_deployment_and_service_give_the_serving_decision_the_same_answers(available: bool) -> None:
    j = job(status={"phase": "Serving"})
    dep, svc = build_deployment(j, default_adapter(j)), build_service(j)
    dep["metadata"] |= {"uid": "d-1", "generation": 2, "managedFields": [{}]}
    dep["status"] = {
        "observedGeneration": 2,
        "replicas": 1,
        "updatedReplicas": 1,
        "availableReplicas": int(available),
        "conditions": [{"type": "Available", "status": str(available)}],
    }
    for full, slim in ((dep, slim_deployment(dep)), (svc, slim_service(svc))):
        assert not out_of_date(slim, full)  # the digest and the replicas are kept
        assert job_of(slim) == job_of(full) == ("team", "geo")
        assert controlled_by(slim, job_uid(j))
    assert deployment_state(slim_deployment(dep), 1) == deployment_state(dep, 1)
    assert slim_deployment(dep)["metadata"]["uid"] == "d-1"
    assert len(str(slim_deployment(dep))) < len(str(dep)) / 3  # the pod template is most of it


def test_a_slim_rayjob_pod_and_node_give_the_same_answers() -> None:
    for state in (rayjob(), rayjob("Complete", "FAILED", "AppFailed", "boom"), rayjob("Complete", "SUCCEEDED")):
        assert rayjob_outcome(slim_rayjob({**state, "metadata": {"name": "x"}})) == rayjob_outcome(state)
    stuck = {
        "metadata": {"name": "p", "labels": {c.LABEL_JOB: "geo"}, "managedFields": [{}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "ray-head", "image": "x"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "ray-head", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
            "initContainerStatuses": [{"name": "check", "state": {"terminated": {"exitCode": 3, "message": "bad"}}}],
        },
    }
    assert pod_problem(slim_pod(stuck)) == pod_problem(stuck) is not None
    assert adapter_check_failure(slim_pod(stuck)) == adapter_check_failure(stuck)
    running = {
        **stuck,
        "spec": {**stuck["spec"], "containers": [{"name": "ray-head", "image": "x"}, {"name": "sidecar"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "sidecar", "state": {"running": {"startedAt": "2026-12-01T12:00:09Z"}}},
                {"name": "ray-head", "state": {"running": {"startedAt": "2026-12-01T12:00:05Z"}}},
            ],
        },
    }
    assert ray_container_started(slim_pod(running)) == ray_container_started(running) == "2026-12-01T12:00:05Z"
    for whole in (
        node("n1"),
        node("n2", health=c.HEALTH_PENDING_REPLACEMENT),
        node("n3", ready=False),
        node("n4", **{c.HYPERPOD_FAULT_TYPES_LABEL: "NvidiaGpuXid"}),
        {**node("n5"), "spec": {"unschedulable": True, "podCIDR": "10.0.0.0/24"}},
        {**node("n6"), "spec": {"taints": [{"key": c.HYPERPOD_TAINT_KEY, "effect": "NoSchedule"}]}},
    ):
        whole["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
        whole["status"]["images"] = [{"names": ["x" * 100]}] * 20
        name = whole["metadata"]["name"]
        assert node_verdict(name, slim_node(whole)) == node_verdict(name, whole)
        assert health_signature(slim_node(whole)) == health_signature(whole)
        assert "images" not in slim_node(whole)["status"]
