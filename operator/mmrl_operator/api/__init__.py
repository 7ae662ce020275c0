"""The MultimodalRLJob API (mmrl.dev/v1alpha1): the only schema source. The CRD is generated from these models."""

from mmrl_operator.api.cluster import (
    ClusterSpec,
    HeadSpec,
    KueueSpec,
    PodTemplateOverrides,
    Resources,
    WorkerGroup,
)
from mmrl_operator.api.job import FieldError, JobSpec, MultimodalRLJob, parse_job, validate_manifest
from mmrl_operator.api.lifecycle import (
    CheckpointSpec,
    InferenceSpec,
    PVCCheckpoint,
    ResilienceSpec,
    S3Checkpoint,
)
from mmrl_operator.api.spec import (
    AlgorithmSpec,
    DatasetSpec,
    EnvVar,
    LoRASpec,
    ModelSpec,
    RewardSpec,
    TrainerSpec,
)
from mmrl_operator.api.status import PHASES, Attempt, Condition, JobStatus, Progress

__all__ = [
    "PHASES",
    "AlgorithmSpec",
    "Attempt",
    "CheckpointSpec",
    "ClusterSpec",
    "Condition",
    "DatasetSpec",
    "EnvVar",
    "FieldError",
    "HeadSpec",
    "InferenceSpec",
    "JobSpec",
    "JobStatus",
    "KueueSpec",
    "LoRASpec",
    "ModelSpec",
    "MultimodalRLJob",
    "PVCCheckpoint",
    "PodTemplateOverrides",
    "Progress",
    "ResilienceSpec",
    "Resources",
    "RewardSpec",
    "S3Checkpoint",
    "TrainerSpec",
    "WorkerGroup",
    "parse_job",
    "validate_manifest",
]
