"""SageMaker HyperPod's node vocabulary (label, taint and resource names as HyperPod EKS uses them) plus
the keys of mmrl-local's own fault-injection annotations. HyperPod's strings appear here once; the operator's
constants module should import or mirror these, never retype them.
"""

from __future__ import annotations

from enum import StrEnum

SAGEMAKER = "sagemaker.amazonaws.com"
NODE_HEALTH_STATUS = f"{SAGEMAKER}/node-health-status"
DEEP_HEALTH_CHECK_STATUS = f"{SAGEMAKER}/deep-health-check-status"
INSTANCE_GROUP_NAME = f"{SAGEMAKER}/instance-group-name"
CLUSTER_NAME = f"{SAGEMAKER}/cluster-name"
FAULT_TYPES = f"{SAGEMAKER}/fault-types"
FAULT_REASONS = f"{SAGEMAKER}/fault-reasons"
FAULT_DETAILS = f"{SAGEMAKER}/fault-details"  # an annotation holding JSON

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"


class NodeHealth(StrEnum):
    """Values of the ``sagemaker.amazonaws.com/node-health-status`` label."""

    SCHEDULABLE = "Schedulable"
    UNSCHEDULABLE = "Unschedulable"  # deep health check running
    PENDING_REBOOT = "UnschedulablePendingReboot"
    PENDING_REPLACEMENT = "UnschedulablePendingReplacement"


# HyperPod taints a node whose health status is not Schedulable.
UNHEALTHY_TAINT = {"key": NODE_HEALTH_STATUS, "value": "Unschedulable", "effect": "NoSchedule"}

# kwok manages only nodes carrying this annotation.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"

# mmrl-local fault injection, read by the kwok stages in stages/ and by the KubeRay stand-in.
LOCAL = "mmrl-local.dev"
NOT_READY_ANNOTATION = f"{LOCAL}/not-ready"
POD_READY_AFTER = f"{LOCAL}/ready-after"
POD_COMPLETE = f"{LOCAL}/complete"
POD_COMPLETE_AFTER = f"{LOCAL}/complete-after"
RAYJOB_SCRIPT = f"{LOCAL}/script"
