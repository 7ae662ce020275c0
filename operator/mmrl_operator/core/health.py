"""Node health as mmrl sees it: HyperPod's labels, taint and conditions (or plain Kubernetes signals) → a verdict.

The verdict answers two questions for a training job whose pods run on the node: is something wrong (report it,
condition `NodeFaults`), and must the running attempt stop now (the node is going away or its pods are already
lost) rather than wait for NCCL collectives to time out. A fault label or a cordon alone degrades but does not stop:
HyperPod escalates to PendingReboot/PendingReplacement when the node really has to go. A deep health check in
progress is no fault at all (HyperPod is vetting the node), and nothing here tolerates or overrides HyperPod's taint.
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
    DeepHealthCheckFailed, FaultReported, Unschedulable, Cordoned, HealthCheckInProgress (healthy)."""
    message: str
    uid: str | None = None
    """The Node object's uid; None when the node is gone."""

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


def _first(labels: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((str(labels[k]) for k in keys if labels.get(k)), "")


def hyperpod_fault(labels: dict[str, Any]) -> str:
    """HyperPod's own words for a node's fault, from its fault-type and fault-reason labels (either spelling, see
    `constants`), e.g. "fault-types=GpuXid, fault-reasons=Xid79"; empty when the node carries neither."""
    found = (
        ("fault-types", _first(labels, c.HYPERPOD_FAULT_TYPE_KEYS)),
        ("fault-reasons", _first(labels, c.HYPERPOD_FAULT_REASON_KEYS)),
    )
    return ", ".join(f"{key}={value}" for key, value in found if value)


def node_verdict(name: str, node: dict[str, Any] | None, *, hyperpod: bool = True) -> NodeVerdict:
    """Judge one node. `node is None` means it no longer exists (deleted or replaced)."""
    if node is None:
        return NodeVerdict(name, "stop", "NodeDeleted", f"node {name} was deleted; its pods are lost")
    labels = (node.get("metadata") or {}).get("labels") or {}
    uid = (node.get("metadata") or {}).get("uid")
    fault = hyperpod_fault(labels) if hyperpod else ""

    def verdict(severity: Severity, reason: str, message: str) -> NodeVerdict:
        # Every verdict on a node HyperPod labelled with a fault says which, so the NodeFault event and the
        # attempt's message carry HyperPod's classification, not only ours.
        return NodeVerdict(name, severity, reason, f"{message} (HyperPod {fault})" if fault else message, uid)

    if _ready_condition(node) in ("False", "Unknown"):
        return verdict("stop", "NotReady", f"node {name} is NotReady")
    # Set while HyperPod's deep health check runs; it also sets Unschedulable and taints the node (see
    # docs/hyperpod.md). The check is HyperPod vetting the node, not a fault: pods already there keep training,
    # and a failed check shows as deep-health-check-status=Failed or a Pending* health status.
    checking = hyperpod and labels.get(c.HYPERPOD_DEEP_HEALTH_LABEL) == c.DEEP_HEALTH_IN_PROGRESS
    if hyperpod:
        health = labels.get(c.HYPERPOD_HEALTH_LABEL)
        if health == c.HEALTH_PENDING_REPLACEMENT:
            return verdict("stop", "PendingReplacement", f"HyperPod is replacing node {name}")
        if health == c.HEALTH_PENDING_REBOOT:
            return verdict("stop", "PendingReboot", f"HyperPod is rebooting node {name}")
        if labels.get(c.HYPERPOD_DEEP_HEALTH_LABEL) == c.DEEP_HEALTH_FAILED:
            return verdict("stop", "DeepHealthCheckFailed", f"node {name} failed HyperPod's deep health check")
        if fault:
            return verdict("degraded", "FaultReported", f"HyperPod reported a fault on node {name}")
        if (health == c.HEALTH_UNSCHEDULABLE or _has_hyperpod_taint(node)) and not checking:
            return verdict("degraded", "Unschedulable", f"node {name}: HyperPod marked it Unschedulable")
    if (node.get("spec") or {}).get("unschedulable"):
        return verdict("degraded", "Cordoned", f"node {name} is cordoned")
    if checking:
        return verdict("healthy", "HealthCheckInProgress", f"node {name}: HyperPod is running a deep health check")
    return verdict("healthy", "Healthy", f"node {name} is healthy")


def health_signature(node: dict[str, Any] | None) -> tuple[Any, ...]:
    """Everything `node_verdict` reads, and nothing else: two nodes with the same signature get the same
    verdict, so a heartbeat-only update (new timestamps) need not wake any job."""
    if node is None:
        return ("deleted",)
    labels = (node.get("metadata") or {}).get("labels") or {}
    keys = (
        c.HYPERPOD_HEALTH_LABEL,
        c.HYPERPOD_DEEP_HEALTH_LABEL,
        *c.HYPERPOD_FAULT_TYPE_KEYS,
        *c.HYPERPOD_FAULT_REASON_KEYS,
    )
    return (
        (node.get("metadata") or {}).get("uid"),
        _ready_condition(node),
        _has_hyperpod_taint(node),
        bool((node.get("spec") or {}).get("unschedulable")),
        tuple(labels.get(k) for k in keys),
    )
