"""Why a Ray pod cannot start, read from what kube-scheduler and the kubelet wrote into its status."""

from __future__ import annotations

from mmrl_operator.core.observed import pod_problem


def pod(status: dict, deleting: bool = False) -> dict:
    meta = {"name": "geo-head-abc"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    return {"metadata": meta, "status": status}


def test_failed_scheduling_names_the_schedulers_reason() -> None:
    message = '0/3 nodes are available: persistentvolumeclaim "mmrl-checkpoints" not found.'
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    assert pod_problem(pod({"phase": "Pending", "conditions": [cond]})) == (
        "Unschedulable",
        f"pod geo-head-abc cannot be scheduled: {message}",
    )


def test_image_pull_and_crash_loop_reasons_in_a_pod_status_name_the_container() -> None:
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "mmrl/trainer:nope"'}
    cs = [{"name": "ray-head", "state": {"waiting": waiting}}]
    reason, message = pod_problem(pod({"phase": "Pending", "containerStatuses": cs}))
    assert reason == "ImagePullBackOff" and "container ray-head" in message and "mmrl/trainer:nope" in message
    crash = [{"name": "ray-head", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    assert pod_problem(pod({"phase": "Running", "containerStatuses": crash}))[0] == "CrashLoopBackOff"


def test_healthy_starting_finished_and_deleted_pods_have_no_problem() -> None:
    creating = [{"name": "ray-head", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    assert pod_problem(pod({"phase": "Pending", "containerStatuses": creating})) is None
    assert pod_problem(pod({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]})) is None
    backoff = [{"name": "ray-head", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    assert pod_problem(pod({"phase": "Failed", "containerStatuses": backoff})) is None
    assert pod_problem(pod({"phase": "Running", "containerStatuses": backoff}, deleting=True)) is None


def test_the_ray_containers_start_is_read_from_the_pod_specs_first_container() -> None:
    from mmrl_operator.core.observed import ray_container_started

    spec = {"containers": [{"name": "ray-worker"}, {"name": "log-shipper"}]}
    statuses = [
        {"name": "log-shipper", "state": {"running": {"startedAt": "2026-12-01T12:00:09Z"}}},
        {"name": "ray-worker", "state": {"running": {"startedAt": "2026-12-01T12:00:05Z"}}},
    ]
    running = {"metadata": {"name": "w"}, "spec": spec, "status": {"containerStatuses": statuses}}
    assert ray_container_started(running) == "2026-12-01T12:00:05Z"
    waiting = [{"name": "ray-worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    assert ray_container_started({"spec": spec, "status": {"containerStatuses": waiting}}) is None
