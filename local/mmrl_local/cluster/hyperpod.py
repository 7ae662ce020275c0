"""SageMaker HyperPod's node vocabulary as the local fakes use it, plus the keys of mmrl-local's own
fault-injection annotations. HyperPod's strings are defined once, in ``mmrl_api.constants``, and only
re-exported here, so the fakes and the operator cannot drift apart.
"""

from __future__ import annotations

from enum import StrEnum

from mmrl_api import constants as c

# HyperPod's own strings live once, in the operator's constants; the test tool reuses them.
NODE_HEALTH_STATUS = c.HYPERPOD_HEALTH_LABEL
DEEP_HEALTH_CHECK_STATUS = c.HYPERPOD_DEEP_HEALTH_LABEL
INSTANCE_GROUP_NAME = c.HYPERPOD_INSTANCE_GROUP_LABEL
CLUSTER_NAME = c.HYPERPOD_CLUSTER_LABEL
FAULT_TYPES = c.HYPERPOD_FAULT_TYPES_LABEL
FAULT_REASONS = c.HYPERPOD_FAULT_REASONS_LABEL
FAULT_DETAILS = c.HYPERPOD_FAULT_DETAILS_ANNOTATION  # an annotation holding JSON

INSTANCE_TYPE = c.INSTANCE_TYPE_LABEL
GPU = c.GPU_RESOURCE
EFA = c.EFA_RESOURCE


class NodeHealth(StrEnum):
    """Values of the ``sagemaker.amazonaws.com/node-health-status`` label."""

    SCHEDULABLE = c.HEALTH_SCHEDULABLE
    UNSCHEDULABLE = c.HEALTH_UNSCHEDULABLE  # deep health check running
    PENDING_REBOOT = c.HEALTH_PENDING_REBOOT
    PENDING_REPLACEMENT = c.HEALTH_PENDING_REPLACEMENT


class DeepHealth(StrEnum):
    """Values of the ``sagemaker.amazonaws.com/deep-health-check-status`` label."""

    IN_PROGRESS = c.DEEP_HEALTH_IN_PROGRESS
    PASSED = c.DEEP_HEALTH_PASSED
    FAILED = c.DEEP_HEALTH_FAILED


# What HyperPod records about one instance's health; a replacement instance starts without any of it.
HEALTH_HISTORY_LABELS = (
    NODE_HEALTH_STATUS,
    DEEP_HEALTH_CHECK_STATUS,
    *c.HYPERPOD_FAULT_TYPE_KEYS,
    *c.HYPERPOD_FAULT_REASON_KEYS,
)

# HyperPod taints a node whose health status is not Schedulable.
UNHEALTHY_TAINT = {"key": NODE_HEALTH_STATUS, "value": "Unschedulable", "effect": "NoSchedule"}

# kwok manages only nodes carrying this annotation.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
# Nodes whose pods run for real: managed by mmrl_local.node.kubelet instead of kwok.
KUBELET_ANNOTATION = "mmrl-local.dev/kubelet"

# mmrl-local fault injection, read by the kwok stages in stages/ and by the KubeRay stand-in.
LOCAL = "mmrl-local.dev"
NOT_READY_ANNOTATION = f"{LOCAL}/not-ready"
POD_READY_AFTER = f"{LOCAL}/ready-after"
POD_COMPLETE = f"{LOCAL}/complete"
POD_COMPLETE_AFTER = f"{LOCAL}/complete-after"
RAYJOB_SCRIPT = f"{LOCAL}/script"
CONTAINER_WAITING = f"{LOCAL}/container-waiting"
# "true": a deleted pod stays Terminating (and Ready) until its deletionTimestamp, i.e. over its grace period.
GRACEFUL_DELETE = f"{LOCAL}/graceful-delete"  # value: the waiting reason, e.g. ImagePullBackOff
