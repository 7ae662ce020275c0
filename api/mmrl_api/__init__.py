"""What the operator and the trainer share, and nothing else: the MultimodalRLJob API (mmrl.dev/v1alpha1, the only
schema source: the CRD is generated from these models), the constants naming other systems' labels and APIs, the
trainer's process contract (`contract`) and config (`trainer_config`), and the vLLM adapter rules
(`adapter_rules`). Both images carry this package; neither carries the other's (tests/unit/test_package_boundaries.py).
"""

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module it lives in. Loaded on first use (PEP 562): `from mmrl_api import constants` must not
# build every pydantic model, since the operator's restart lists the cluster before it needs any (issue #32).
_WHERE = {
    **dict.fromkeys(
        ("ClusterSpec", "HeadSpec", "KueueSpec", "PodTemplateOverrides", "Resources", "WorkerGroup"), "cluster"
    ),
    **dict.fromkeys(("EnvironmentSpec", "ObservationSpec"), "environment"),
    **dict.fromkeys(
        ("FieldError", "JobSpec", "MultimodalRLJob", "parse_job", "validate_as_apiserver", "validate_manifest"), "job"
    ),
    **dict.fromkeys(
        ("CheckpointSpec", "InferenceSpec", "PVCCheckpoint", "ResilienceSpec", "S3Checkpoint"), "lifecycle"
    ),
    **dict.fromkeys(
        ("AlgorithmSpec", "DatasetSpec", "EnvVar", "LoRASpec", "ModelSpec", "RewardSpec", "TrainerSpec"), "spec"
    ),
    **dict.fromkeys(("PHASES", "Attempt", "Condition", "JobStatus", "Progress"), "status"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mmrl_api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mmrl_api.{module}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from mmrl_api.cluster import ClusterSpec, HeadSpec, KueueSpec, PodTemplateOverrides, Resources, WorkerGroup
    from mmrl_api.environment import EnvironmentSpec, ObservationSpec
    from mmrl_api.job import FieldError, JobSpec, MultimodalRLJob, parse_job, validate_as_apiserver, validate_manifest
    from mmrl_api.lifecycle import CheckpointSpec, InferenceSpec, PVCCheckpoint, ResilienceSpec, S3Checkpoint
    from mmrl_api.spec import AlgorithmSpec, DatasetSpec, EnvVar, LoRASpec, ModelSpec, RewardSpec, TrainerSpec
    from mmrl_api.status import PHASES, Attempt, Condition, JobStatus, Progress

__all__ = [
    "PHASES",
    "AlgorithmSpec",
    "Attempt",
    "CheckpointSpec",
    "ClusterSpec",
    "Condition",
    "DatasetSpec",
    "EnvVar",
    "EnvironmentSpec",
    "FieldError",
    "HeadSpec",
    "InferenceSpec",
    "JobSpec",
    "JobStatus",
    "KueueSpec",
    "LoRASpec",
    "ModelSpec",
    "MultimodalRLJob",
    "ObservationSpec",
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
    "validate_as_apiserver",
    "validate_manifest",
]
