"""Fake SageMaker HyperPod nodes (run by kwok) and the things HyperPod does to them: health-status labels and
the NoSchedule taint, a kubelet going NotReady, reboot, deletion, and replacement by a new instance with a
new name in the same instance group. Every helper takes a ``kubernetes.client.CoreV1Api``.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from mmrl_local.cluster import hyperpod as hp
from mmrl_local.common.clock import now_iso

DEFAULT_CLUSTER = "mmrl-local"
GPU_INSTANCE_TYPE = "ml.p5.48xlarge"
CPU_INSTANCE_TYPE = "ml.m5.12xlarge"
GPU_CAPACITY = {"cpu": "192", "memory": "2Ti", "pods": "110", hp.GPU: "8", hp.EFA: "32", "ephemeral-storage": "3Ti"}
CPU_CAPACITY = {"cpu": "48", "memory": "192Gi", "pods": "110", "ephemeral-storage": "500Gi"}


def new_node_name() -> str:
    """A HyperPod-style node name: ``hyperpod-i-`` + an EC2 instance id (17 hex digits)."""
    return f"hyperpod-i-{secrets.token_hex(9)[:17]}"


def node_body(
    name: str,
    *,
    instance_group: str,
    instance_type: str,
    capacity: dict[str, str],
    cluster: str = DEFAULT_CLUSTER,
    labels: dict[str, str] | None = None,
    kubelet: bool = False,
) -> dict:
    """A HyperPod node; kwok fakes it, or with ``kubelet`` mmrl_local.node.kubelet runs its pods for real."""
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        hp.INSTANCE_TYPE: instance_type,
        hp.NODE_HEALTH_STATUS: hp.NodeHealth.SCHEDULABLE.value,
        hp.INSTANCE_GROUP_NAME: instance_group,
        hp.CLUSTER_NAME: cluster,
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {hp.KUBELET_ANNOTATION: "true"}
            if kubelet
            else {hp.KWOK_NODE_ANNOTATION: hp.KWOK_NODE_VALUE},
        },
        "spec": {},
        # Status survives node creation; kwok's initialize stage keeps capacity/allocatable as given.
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def create_gpu_nodes(
    api: client.CoreV1Api,
    count: int,
    *,
    instance_group: str = "gpu-workers",
    cluster: str = DEFAULT_CLUSTER,
    wait: bool = True,
    labels: dict[str, str] | None = None,
    kubelet: bool = False,
) -> list[str]:
    """Join ``count`` ml.p5.48xlarge nodes (8 GPUs, 32 EFA) to ``instance_group``, with extra ``labels`` (e.g. a
    deep-health-check-status); returns their names."""
    names = [new_node_name() for _ in range(count)]
    for name in names:
        api.create_node(
            node_body(
                name,
                instance_group=instance_group,
                instance_type=GPU_INSTANCE_TYPE,
                capacity=GPU_CAPACITY,
                cluster=cluster,
                labels=labels,
                kubelet=kubelet,
            )
        )
    if wait:
        for name in names:
            wait_ready(api, name)
    return names


def create_cpu_node(
    api: client.CoreV1Api,
    *,
    instance_group: str = "controller",
    cluster: str = DEFAULT_CLUSTER,
    wait: bool = True,
    kubelet: bool = False,
) -> str:
    """Join one CPU node (for Ray heads); returns its name."""
    name = new_node_name()
    api.create_node(
        node_body(
            name,
            instance_group=instance_group,
            instance_type=CPU_INSTANCE_TYPE,
            capacity=CPU_CAPACITY,
            cluster=cluster,
            kubelet=kubelet,
        )
    )
    if wait:
        wait_ready(api, name)
    return name


DEDICATED_LABEL = "mmrl.dev/dedicated"


def dedicated_taint(role: str) -> dict[str, str]:
    return {"key": DEDICATED_LABEL, "value": role, "effect": "NoSchedule"}


def create_dedicated_node(core: client.CoreV1Api, role: str, *, kubelet: bool = True) -> str:
    """Join a CPU node kept for one role (the tracking server, the operator): labelled ``DEDICATED_LABEL=role`` and
    tainted so that only pods that tolerate the role land there (no Ray pod does); returns its name."""
    name = new_node_name()
    body = node_body(
        name,
        instance_group=role,
        instance_type=CPU_INSTANCE_TYPE,
        capacity=CPU_CAPACITY,
        labels={DEDICATED_LABEL: role},
        kubelet=kubelet,
    )
    body["spec"] = {"taints": [dedicated_taint(role)]}
    core.create_node(body)
    wait_ready(core, name)
    return name


def is_ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


# Taints the controller-manager's node lifecycle controller keeps on a node until it has seen the node Ready: a node
# can report Ready seconds before the scheduler may use it (on a loaded machine once more than 30 s, so only the
# tests whose claim depends on where pods land wait for it).
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def schedulable_ready(node) -> bool:
    """Ready, and without the lifecycle controller's not-ready/unreachable taints."""
    return is_ready(node) and not any(t.key in LIFECYCLE_TAINTS for t in (node.spec.taints or []))


def wait_ready(api: client.CoreV1Api, name: str, *, ready: bool = True, timeout: float = 30.0) -> None:
    """Until the node reports Ready (or, `ready=False`, NotReady). The scheduler may still refuse it for a while:
    see `schedulable_ready`."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ApiException):
            if is_ready(api.read_node(name)) == ready:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {name} did not become {'Ready' if ready else 'NotReady'} in {timeout}s")
        time.sleep(0.2)


def set_health(api: client.CoreV1Api, name: str, status: hp.NodeHealth | str) -> None:
    """Set the health label as HyperPod does: any status but Schedulable also carries the NoSchedule taint."""
    status = hp.NodeHealth(status)
    node = api.read_node(name)
    taints = [t for t in (node.spec.taints or []) if t.key != hp.NODE_HEALTH_STATUS]
    body_taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
    if status is not hp.NodeHealth.SCHEDULABLE:
        body_taints.append(dict(hp.UNHEALTHY_TAINT))
    # A merge patch replaces the whole taint list, so untouched taints are written back explicitly.
    api.patch_node(
        name, {"metadata": {"labels": {hp.NODE_HEALTH_STATUS: status.value}}, "spec": {"taints": body_taints or None}}
    )


def start_deep_health_check(api: client.CoreV1Api, name: str) -> None:
    """HyperPod running a deep health check on the node: deep-health-check-status=InProgress, and the node
    Unschedulable with the NoSchedule taint until the check ends."""
    api.patch_node(name, {"metadata": {"labels": {hp.DEEP_HEALTH_CHECK_STATUS: hp.DeepHealth.IN_PROGRESS.value}}})
    set_health(api, name, hp.NodeHealth.UNSCHEDULABLE)


def finish_deep_health_check(api: client.CoreV1Api, name: str, *, passed: bool = True) -> None:
    """The check's end: Passed and Schedulable (taint removed), or Failed and pending replacement."""
    result = hp.DeepHealth.PASSED if passed else hp.DeepHealth.FAILED
    api.patch_node(name, {"metadata": {"labels": {hp.DEEP_HEALTH_CHECK_STATUS: result.value}}})
    set_health(api, name, hp.NodeHealth.SCHEDULABLE if passed else hp.NodeHealth.PENDING_REPLACEMENT)


def report_fault(
    api: client.CoreV1Api,
    name: str,
    fault_type: str,
    reason: str,
    *,
    health: hp.NodeHealth | None = None,
    message: str = "",
) -> None:
    """What HyperPod's health-monitoring agent writes on a node where it found a fault: the fault-types and
    fault-reasons labels and the fault-details annotation (JSON); with ``health``, also that health status (and
    the taint that goes with it)."""
    details = [{"type": fault_type, "reason": reason, "message": message or reason, "timestamp": now_iso()}]
    labels = {hp.FAULT_TYPES: fault_type, hp.FAULT_REASONS: reason}
    api.patch_node(name, {"metadata": {"labels": labels, "annotations": {hp.FAULT_DETAILS: json.dumps(details)}}})
    if health is not None:
        set_health(api, name, health)


def set_not_ready(api: client.CoreV1Api, name: str, reason: str = "KubeletNotReady", *, wait: bool = True) -> None:
    """Make the node's (fake) kubelet report Ready=False (kwok stage node-not-ready)."""
    api.patch_node(name, {"metadata": {"annotations": {hp.NOT_READY_ANNOTATION: reason}}})
    if wait:
        wait_ready(api, name, ready=False)


def set_ready(api: client.CoreV1Api, name: str, *, wait: bool = True) -> None:
    api.patch_node(name, {"metadata": {"annotations": {hp.NOT_READY_ANNOTATION: None}}})
    if wait:
        wait_ready(api, name)


def pods_on(api: client.CoreV1Api, name: str) -> list:
    return api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items


def delete_node(api: client.CoreV1Api, name: str, *, delete_pods: bool = True) -> None:
    """Remove the node. With ``delete_pods`` its pods are force-deleted at once, which is what the pod garbage
    collector does on a real cluster after its 40 s quarantine (too slow for tests)."""
    with contextlib.suppress(ApiException):
        api.delete_node(name)
    if delete_pods:
        for pod in pods_on(api, name):
            with contextlib.suppress(ApiException):
                api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)


def reboot_node(api: client.CoreV1Api, name: str, *, down_for: float = 1.0) -> None:
    """HyperPod reboot: PendingReboot + taint, NotReady for a while, then Ready and Schedulable, same name."""
    start_reboot(api, name)
    time.sleep(down_for)
    end_reboot(api, name)


def start_reboot(api: client.CoreV1Api, name: str) -> None:
    """The first half of `reboot_node`: PendingReboot + taint, and NotReady."""
    set_health(api, name, hp.NodeHealth.PENDING_REBOOT)
    set_not_ready(api, name, reason="Rebooting")


def end_reboot(api: client.CoreV1Api, name: str) -> None:
    """The second half of `reboot_node`: Ready again, and Schedulable."""
    set_ready(api, name)
    set_health(api, name, hp.NodeHealth.SCHEDULABLE)


def replace_node(api: client.CoreV1Api, name: str, *, wait: bool = True) -> str:
    """HyperPod replacement: the node is marked PendingReplacement (+ taint), goes NotReady, disappears with
    its pods, and a new instance with a different name joins the same instance group. Returns the new name."""
    old = api.read_node(name)
    labels = old.metadata.labels or {}
    capacity = {k: str(v) for k, v in (old.status.capacity or {}).items()}
    set_health(api, name, hp.NodeHealth.PENDING_REPLACEMENT)
    set_not_ready(api, name, reason="NodeReplacement", wait=wait)
    delete_node(api, name)
    new_name = new_node_name()
    # A new instance: it has no health history of the old one's (health status, deep health check, faults).
    fresh = {"kubernetes.io/hostname", *hp.HEALTH_HISTORY_LABELS}
    carried = {k: v for k, v in labels.items() if k not in fresh}
    api.create_node(
        node_body(
            new_name,
            instance_group=labels[hp.INSTANCE_GROUP_NAME],
            instance_type=labels[hp.INSTANCE_TYPE],
            capacity=capacity,
            cluster=labels.get(hp.CLUSTER_NAME, DEFAULT_CLUSTER),
            labels=carried,
            kubelet=hp.KUBELET_ANNOTATION in (old.metadata.annotations or {}),  # the same kind of machine
        )
    )
    if wait:
        wait_ready(api, new_name)
    return new_name


def delete_all_nodes(api: client.CoreV1Api) -> None:
    for node in api.list_node().items:
        delete_node(api, node.metadata.name)
