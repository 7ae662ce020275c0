"""Node health as mmrl sees it: HyperPod's labels, taint and conditions (or plain Kubernetes signals) → a verdict.

The verdict answers two questions for a training job whose pods run on the node: is something wrong (report it,
condition `NodeFaults`), and must the running attempt stop now (the node is going away or its pods are already
lost) rather than wait for NCCL collectives to time out. A deep health check in progress or a fault label alone
degrades but does not stop: HyperPod escalates to PendingReboot/PendingReplacement when the node really has to go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mmrl_api import constants as c

Severity = Literal["healthy", "degraded", "stop"]


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    severity: Severity
    reason: str
    """CamelCase, machine readable: Healthy, NodeDeleted, NotReady, PendingReplacement, PendingReboot,
    DeepHealthCheckFailed, HealthCheckInProgress, FaultReported, Unschedulable."""
    message: str

    @property
    def fault(self) -> bool:
        return self.severity != "healthy"

    @property
    def stop(self) -> bool:
        return self.severity == "stop"


def _ready_condition(node: dict[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


def _has_hyperpod_taint(node: dict[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == c.HYPERPOD_TAINT_KEY and t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)


def node_verdict(name: str, node: dict[str, Any] | None, *, hyperpod: bool = True) -> NodeVerdict:
    """Judge one node. `node is None` means it no longer exists (deleted or replaced)."""
    if node is None:
        return NodeVerdict(name, "stop", "NodeDeleted", f"node {name} was deleted; its pods are lost")
    labels = (node.get("metadata") or {}).get("labels") or {}
    if _ready_condition(node) in ("False", "Unknown"):
        return NodeVerdict(name, "stop", "NotReady", f"node {name} is NotReady")
    if hyperpod:
        health = labels.get(c.HYPERPOD_HEALTH_LABEL)
        if health == c.HEALTH_PENDING_REPLACEMENT:
            return NodeVerdict(name, "stop", "PendingReplacement", f"HyperPod is replacing node {name}")
        if health == c.HEALTH_PENDING_REBOOT:
            return NodeVerdict(name, "stop", "PendingReboot", f"HyperPod is rebooting node {name}")
        if labels.get(c.HYPERPOD_DEEP_HEALTH_LABEL) == "Failed":
            return NodeVerdict(
                name, "stop", "DeepHealthCheckFailed", f"node {name} failed HyperPod's deep health check"
            )
        faults = labels.get(c.HYPERPOD_FAULT_TYPES_LABEL)
        if health == c.HEALTH_UNSCHEDULABLE or _has_hyperpod_taint(node):
            why = (
                "a deep health check is running"
                if labels.get(c.HYPERPOD_DEEP_HEALTH_LABEL) == "InProgress"
                else ("HyperPod marked it Unschedulable")
            )
            reason = "HealthCheckInProgress" if "deep health" in why else "Unschedulable"
            return NodeVerdict(name, "degraded", reason, f"node {name}: {why}")
        if faults:
            why = labels.get(c.HYPERPOD_FAULT_REASONS_LABEL) or faults
            return NodeVerdict(name, "degraded", "FaultReported", f"HyperPod reported a fault on node {name}: {why}")
    if (node.get("spec") or {}).get("unschedulable"):
        return NodeVerdict(name, "degraded", "Cordoned", f"node {name} is cordoned")
    return NodeVerdict(name, "healthy", "Healthy", f"node {name} is healthy")


def health_signature(node: dict[str, Any] | None) -> tuple[Any, ...]:
    """Everything `node_verdict` reads, and nothing else: two nodes with the same signature get the same
    verdict, so a heartbeat-only update (new timestamps) need not wake any job."""
    if node is None:
        return ("deleted",)
    labels = (node.get("metadata") or {}).get("labels") or {}
    keys = (
        c.HYPERPOD_HEALTH_LABEL,
        c.HYPERPOD_DEEP_HEALTH_LABEL,
        c.HYPERPOD_FAULT_TYPES_LABEL,
        c.HYPERPOD_FAULT_REASONS_LABEL,
    )
    return (
        _ready_condition(node),
        _has_hyperpod_taint(node),
        bool((node.get("spec") or {}).get("unschedulable")),
        tuple(labels.get(k) for k in keys),
    )
