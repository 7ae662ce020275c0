"""Every label key, annotation name, API coordinate and external string the operator depends on, in one place.

HyperPod's node labels and taint, KubeRay's API group and pod labels, and Kueue's labels are facts about other
systems; keeping them here means a rename upstream is a one-line change and tests import the same strings.
"""

from __future__ import annotations

# --- our API ---------------------------------------------------------------------------------------------
GROUP = "mmrl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MultimodalRLJob"
PLURAL = "multimodalrljobs"
SINGULAR = "multimodalrljob"
SHORT_NAMES = ["mmrl", "rljob"]
CRD_NAME = f"{PLURAL}.{GROUP}"

FIELD_MANAGER = "mmrl-operator"

# One vLLM server for one base model, shared by the adapters of many jobs (docs/serving.md, "Shared serving").
SERVER_KIND = "ModelServer"
SERVER_PLURAL = "modelservers"
SERVER_SINGULAR = "modelserver"
SERVER_SHORT_NAMES = ["msrv"]
SERVER_CRD_NAME = f"{SERVER_PLURAL}.{GROUP}"
# `<name>-vllm` (Deployment and Service) must be a DNS-1035 label of at most 63 characters.
MAX_SERVER_NAME_LENGTH = 58

# Labels and annotations mmrl puts on the objects it owns.
LABEL_JOB = "mmrl.dev/job"
LABEL_ATTEMPT = "mmrl.dev/attempt"
LABEL_COMPONENT = "mmrl.dev/component"
LABEL_SERVER = "mmrl.dev/server"
# On KubeRay's submitter pods (the RayJob's submitterPodTemplate), naming their job: the job's NetworkPolicy lets
# them reach the Ray dashboard. Not LABEL_JOB, whose pods the operator watches as the job's own.
LABEL_RAY_SUBMITTER = "mmrl.dev/ray-submitter"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "mmrl-operator"

# The longest job name for which every derived child name stays within Kubernetes' and KubeRay's limits:
# RayJob `<name>-a<N>` must fit KubeRay's 47 characters with room for a 4-digit attempt number, and the
# RayCluster head service `<name>-head-svc` / inference Service `<name>-inference` must be DNS-1035 labels.
MAX_JOB_NAME_LENGTH = 40
RAYJOB_NAME_LIMIT = 47

# Paths the operator mounts in the job's pods; a job's own volume must stay clear of them (and of /tmp, where
# Ray keeps its session files).
CONFIG_MOUNT = "/etc/mmrl"
DATA_MOUNT_ROOT = "/mnt/pvc"
"""Read-only data claims named by pvc:// URIs are mounted at <DATA_MOUNT_ROOT>/<claim>."""
SHM_MOUNT = "/dev/shm"
ADAPTER_MOUNT = "/mnt/adapter"
"""Where the inference pod copies an adapter from S3."""
RESERVED_MOUNT_PATHS = {
    SHM_MOUNT: "shared memory",
    CONFIG_MOUNT: "the trainer config",
    "/tmp": "Ray's session files",
    DATA_MOUNT_ROOT: "the data claims of pvc:// URIs",
    ADAPTER_MOUNT: "the adapter copied from S3",
}

# --- KubeRay (ray.io/v1) --------------------------------------------------------------------------------
RAY_GROUP = "ray.io"
RAY_VERSION = "v1"
RAY_API_VERSION = f"{RAY_GROUP}/{RAY_VERSION}"
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_GROUP_LABEL = "ray.io/group"
# The Ray in the trainer image (docker/trainer.Dockerfile): SkyRL 0.3.0's uv.lock pins ray==2.56.0 and its base image
# is novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8. A RayCluster's rayVersion must name the Ray its pods run,
# so spec.cluster.rayVersion defaults to this; tests/unit/packaging/test_dockerfiles.py checks the two agree.
TRAINER_RAY_VERSION = "2.56.0"

# --- Kueue / HyperPod task governance -------------------------------------------------------------------
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"

# --- SageMaker HyperPod node signals --------------------------------------------------------------------
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HYPERPOD_DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HYPERPOD_FAULT_TYPES_LABEL = "sagemaker.amazonaws.com/fault-types"
HYPERPOD_FAULT_REASONS_LABEL = "sagemaker.amazonaws.com/fault-reasons"
# HyperPod's health-monitoring-agent page names the plural keys above; its node-labels page calls them
# "fault-type" and "fault-reason" without spelling the key. Both are read, plural first (docs/hyperpod.md).
HYPERPOD_FAULT_TYPE_KEYS = (HYPERPOD_FAULT_TYPES_LABEL, "sagemaker.amazonaws.com/fault-type")
HYPERPOD_FAULT_REASON_KEYS = (HYPERPOD_FAULT_REASONS_LABEL, "sagemaker.amazonaws.com/fault-reason")
HYPERPOD_FAULT_DETAILS_ANNOTATION = "sagemaker.amazonaws.com/fault-details"
HYPERPOD_CLUSTER_LABEL = "sagemaker.amazonaws.com/cluster-name"
HYPERPOD_INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
HYPERPOD_TAINT_KEY = HYPERPOD_HEALTH_LABEL
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

HEALTH_SCHEDULABLE = "Schedulable"
HEALTH_UNSCHEDULABLE = "Unschedulable"
HEALTH_PENDING_REPLACEMENT = "UnschedulablePendingReplacement"
HEALTH_PENDING_REBOOT = "UnschedulablePendingReboot"
DEEP_HEALTH_IN_PROGRESS = "InProgress"
DEEP_HEALTH_PASSED = "Passed"
DEEP_HEALTH_FAILED = "Failed"
HEALTH_STATUSES = (
    HEALTH_SCHEDULABLE,
    HEALTH_UNSCHEDULABLE,
    HEALTH_PENDING_REPLACEMENT,
    HEALTH_PENDING_REBOOT,
)

# --- accelerators ---------------------------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# What makes NCCL use EFA in a pod that requests EFA devices (docs/trainer-image.md). libfabric's efa provider only;
# fork safety for Python processes that fork after libfabric registered memory; and the aws-ofi-nccl plugin, which
# NCCL loads as libnccl-net-<NCCL_NET_PLUGIN>.so (the EFA installer's file, checked in docker/trainer.Dockerfile).
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_NET_PLUGIN": "ofi"}
# GPUDirect RDMA over EFA is forced on only for instance families whose EFA devices support it (p4d/p4de, p5/p5e/
# p5en, p6): libfabric aborts a process that sets FI_EFA_USE_DEVICE_RDMA=1 on a device without RDMA (g5, g6), and
# leaves it to the device when unset.
EFA_RDMA_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
EFA_RDMA_INSTANCE_FAMILIES = ("p4d", "p5", "p6")

# --- vLLM -----------------------------------------------------------------------------------------------
# The ranks vLLM's --max-lora-rank accepts; an adapter of rank r is served with the smallest value >= r.
# The vLLM image every server defaults to, a job's own and a ModelServer's: one serving pin. Not the rollout engines'
# 0.23.0 (docker/trainer-pins.txt): 0.23 answers an alias moved in place with its old adapter from its prefix cache
# (docs/serving.md, "Which vLLM serves"; bench/vllm_alias_move.py).
DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Modules whose LoRA weights vLLM refuses to load (it cannot serve adapters that touch them).
VLLM_FORBIDDEN_LORA_TARGETS = ("lm_head", "embed_tokens")
