"""Faults: nodes going away or degraded, lost Ray pods, and what must settle before the next attempt starts."""

from __future__ import annotations

from mmrl_api.status import Attempt
from mmrl_operator.core import avoidance
from mmrl_operator.core.decision import Decision, Delete
from mmrl_operator.core.names import rayjob_name
from mmrl_operator.core.observed import PodInfo, desired_workers, pod_set_digest, rayjob_outcome
from mmrl_operator.core.shape import dig


def watch_nodes(d: Decision) -> None:
    avoidance.forget_replaced(d)
    faulted = sorted(n for n, v in d.obs.nodes.items() if v.fault)
    for name in faulted:
        if name not in d.status.degraded_nodes:
            v = d.obs.nodes[name]
            d.event("Warning", "NodeFault", f"{v.message} (status {v.reason})")
    d.status.degraded_nodes = faulted
    # Pods on a node that is going away are deleted now so KubeRay recreates them on healthy nodes at once,
    # instead of after the 5-minute not-ready eviction; gone/NotReady kubelets cannot confirm, hence grace 0.
    for pod in d.obs.pods:
        verdict = d.obs.nodes.get(pod.node or "")
        if verdict is not None and verdict.stop:
            grace = 0 if verdict.reason in ("NodeDeleted", "NotReady") else None
            d.plan.delete.append(Delete("v1", "Pod", pod.name, grace))


def record_attempt_nodes(d: Decision) -> None:
    """Remember where the running attempt's Ray pods ran. A node deleted together with its pods (HyperPod's
    replacement, or the pod garbage collector after a node is gone) leaves no pod that names it: without this
    memory the attempt would end as a lost pod on an unknown node, and the faulty node would go unreported."""
    cur = d.current()
    if cur is None or cur.result != "Running":
        d.status.attempt_nodes = []
        return
    d.status.attempt_nodes = sorted({*d.status.attempt_nodes, *(p.node for p in d.obs.pods if p.node)})


def infra_signal(d: Decision, attempt: Attempt) -> tuple[str | None, str | None]:
    """(node, message) when the infrastructure is to blame for this attempt's trouble, else (None, None)."""
    if d.stopping:
        return d.stopping[0].node, d.stopping[0].message
    if attempt.node:
        return attempt.node, f"node {attempt.node} reported a fault during the attempt"
    for pod in d.obs.pods:
        if pod.evicted_or_lost:
            return pod.node, f"pod {pod.name} was {pod.reason}"
    if attempt.pod_set and d.obs.pods and pod_set_digest(d.obs.pods) != attempt.pod_set:
        return None, "a Ray pod of the attempt was lost or recreated"
    # A pod deleted (evicted, lost with its node) that KubeRay has not replaced yet.
    if d.obs.raycluster is not None:
        heads = [p for p in d.obs.pods if p.component == "ray-head"]
        workers = [p for p in d.obs.pods if p.component == "ray-worker"]
        if not heads:
            return None, "the Ray head pod is gone"
        if len(workers) < desired_workers(d.obs.raycluster):
            return None, "a Ray worker pod is gone"
    return None, None


def previous_attempt_lingers(d: Decision) -> str | None:
    """Why the next attempt must not start yet. One attempt at a time: an earlier RayJob still running or held
    by KubeRay's finalizer, a Ray pod still terminating (it may still hold GPUs, NCCL peers and checkpoint
    files), or a Ray pod on a node that is going away. KubeRay counts Terminating pods that still say Ready as
    ready replicas, so cluster readiness alone does not tell."""
    for attempt, rayjob in sorted(d.obs.rayjobs.items()):
        name = rayjob_name(d.job.name, attempt)
        if dig(rayjob, "metadata", "deletionTimestamp"):
            return f"RayJob {name} is still being deleted"
        if rayjob_outcome(rayjob)[0] in ("Pending", "Running"):
            return f"RayJob {name} is still active"
    for pod in d.obs.pods:
        if pod.terminating:
            return f"Ray pod {pod.name} is still terminating"
        verdict = d.obs.nodes.get(pod.node or "")
        if verdict is not None and verdict.stop:
            return f"Ray pod {pod.name} is still on node {pod.node} ({verdict.reason})"
    return None


def ray_pods_not_in_place(d: Decision) -> str | None:
    """After an attempt ended, the next one waits for a full set of Running, scheduled Ray pods: KubeRay's
    ready counts lag behind pods the operator (or a node fault) just removed, and a replacement pod not yet
    scheduled could still land on a node whose fault the scheduler has not been told about."""
    live = [p for p in d.obs.pods if p.component in ("ray-head", "ray-worker") and not p.terminating]
    waiting = [p.name for p in live if p.phase != "Running" or not p.node]
    if waiting:
        return f"Ray pod {waiting[0]} is not running yet"
    want = 1 + desired_workers(d.obs.raycluster or {})
    if len(live) < want:
        return f"{len(live)} of {want} Ray pods exist"
    return None


def workers_of_a_previous_head(d: Decision) -> list[PodInfo]:
    """Worker pods whose Ray container started before the live head pod was created: they joined a head that is
    gone. Without GCS fault tolerance Ray cannot move them to the new head; their raylets only exit once they give
    up on the old GCS, and until then their readiness probe passes and KubeRay counts them ready."""
    heads = [p for p in d.obs.pods if p.component == "ray-head" and not p.terminating and p.created]
    if len(heads) != 1:
        return []
    born = heads[0].created
    return [
        p
        for p in d.obs.pods
        if p.component == "ray-worker" and not p.terminating and p.started is not None and p.started < born
    ]
