"""Faulty-node memory: a node whose fault ended one of a job's attempts is avoided by that job's next attempts.

The memory lives in `status.avoidedNodes` (bounded, oldest dropped first) and reaches the scheduler as a preferred
node anti-affinity on the RayCluster's pod templates (see builders/raycluster.py): preferred, not required, so a job
on an instance group with no spare node still runs on the rebooted node rather than staying Pending. A node is
forgotten once it is replaced by a new instance: its name is gone (HyperPod replaces `hyperpod-i-<id>` with a node
of another name) or a Node of the same name came back with another uid.
"""

from __future__ import annotations

from mmrl_api.status import MAX_AVOIDED_NODES, Attempt, AvoidedNode
from mmrl_operator.core.decision import Decision, ts
from mmrl_operator.core.observed import PodInfo


def remember(d: Decision, attempt: Attempt, node: str | None) -> None:
    """Record `node` (known, and still there) as the node an infrastructure fault ended `attempt` on."""
    verdict = d.obs.nodes.get(node or "")
    if verdict is None or verdict.uid is None:
        return  # not a node of this job's pods, or already gone: nothing left to avoid
    kept = [a for a in d.status.avoided_nodes if a.node != verdict.node]
    reason = verdict.reason if verdict.fault else "PodLost"
    kept.append(AvoidedNode(node=verdict.node, uid=verdict.uid, attempt=attempt.index, reason=reason, since=ts(d.now)))
    d.status.avoided_nodes = kept[-MAX_AVOIDED_NODES:]
    d.event("Normal", "NodeAvoided", f"attempt {attempt.index + 1} and later prefer other nodes than {verdict.node}")


def forget_replaced(d: Decision) -> None:
    """Drop remembered nodes that were replaced by a new instance since."""
    kept = []
    for a in d.status.avoided_nodes:
        if a.node in d.obs.avoided_now and d.obs.avoided_now[a.node] != a.uid:
            d.event("Normal", "AvoidedNodeReplaced", f"node {a.node} was replaced; it is no longer avoided")
            continue
        kept.append(a)
    d.status.avoided_nodes = kept


def pods_placed_without_knowing(d: Decision) -> list[tuple[PodInfo, AvoidedNode]]:
    """Live Ray pods on a remembered node whose template did not yet avoid it: created before the fault, or by
    KubeRay before the RayCluster carried the preference. Pods placed there with the preference stay: the scheduler
    had no other node for them."""
    remembered = {a.node: a for a in d.status.avoided_nodes}
    return [
        (pod, remembered[pod.node])
        for pod in d.obs.pods
        if pod.node in remembered and pod.node not in pod.avoids and not pod.terminating
    ]
