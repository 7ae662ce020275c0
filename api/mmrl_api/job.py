"""The MultimodalRLJob resource as a whole: spec, status, metadata rules, and validation with field paths.

`validate_manifest` is the one validation path used by `mmrl validate`, `mmrl render`, the operator's second line
of defence (`parse_job`) and the tests: every problem as `FieldError(path, message)`, with the path `kubectl` prints
for an admission error. It is `validate_as_apiserver` (the models, whose rules the CRD's schema and CEL are
generated from: exactly what the apiserver refuses) and then the GPU memory plan, which no CEL rule can compute. So
a job whose plan does not fit passes `kubectl apply`, and the operator refuses it before creating any child object
(InvalidSpec, with the plan's message), as `mmrl validate` does.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mmrl_api import batch_geometry
from mmrl_api.base import ApiModel, cel, cel_rules, immutable
from mmrl_api.cluster import ClusterSpec
from mmrl_api.constants import API_VERSION, KIND, MAX_JOB_NAME_LENGTH
from mmrl_api.context_budget import spec_max_model_len, spec_max_model_len_cel
from mmrl_api.environment import LOCAL_CANNOT_RUN_SKYRL_GYM
from mmrl_api.kueue import field_error, field_errors, job_transition_rules
from mmrl_api.lifecycle import CheckpointSpec, InferenceSpec, ResilienceSpec
from mmrl_api.manifest import FieldError, validate_document
from mmrl_api.memory_plan import spec_plan
from mmrl_api.spec import AlgorithmSpec, DatasetSpec, LoRASpec, ModelSpec, TrainerSpec
from mmrl_api.status import JobStatus
from mmrl_api.tracking import TrackingSpec

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

# Rules on the object root (metadata.name is the only metadata a CRD rule may read). No fieldPath: the
# apiserver only accepts paths into the schema, and metadata is not part of it; the messages name the field.
ROOT_RULES = cel_rules(
    cel(
        f"size(self.metadata.name) <= {MAX_JOB_NAME_LENGTH}",
        f"metadata.name must be at most {MAX_JOB_NAME_LENGTH} characters so that the RayJob name "
        "<name>-a<attempt> fits KubeRay's 47-character limit",
        reason="FieldValueInvalid",
    ),
    cel(
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1035 label (start with a letter): it names the RayCluster's Services",
        reason="FieldValueInvalid",
    ),
)


S3_NEEDS_ONE_NODE = (
    "checkpoints on S3 (checkpoint.s3) limit a SkyRL job to one worker node: after every step SkyRL's vLLM engines "
    "load the LoRA adapter from a path every Ray pod shares, and S3 is not one; use checkpoint.pvc (e.g. an FSx for "
    "Lustre claim) or one worker group with replicas 1"
)
GATE_NEEDS_VALIDATION = "a promotion gate needs dataset.validation, the held-out data it is measured on"
GATE_NEEDS_VALIDATION_CEL = "!has(self.inference) || !has(self.inference.promoteWhen) || has(self.dataset.validation)"
S3_ONE_NODE_CEL = (
    "!has(self.checkpoint.s3) || (has(self.trainer) && has(self.trainer.backend) && self.trainer.backend == 'local')"
    " || !has(self.cluster) || !has(self.cluster.workerGroups) || (size(self.cluster.workerGroups) == 1"
    " && (!has(self.cluster.workerGroups[0].replicas) || self.cluster.workerGroups[0].replicas == 1))"
)
SKYRL_GYM_NEEDS_SKYRL_CEL = (
    "!has(self.dataset.environment) || !has(self.dataset.environment.name)"
    " || self.dataset.environment.name != 'skyrl-gym'"
    " || !has(self.trainer) || !has(self.trainer.backend) || self.trainer.backend != 'local'"
)
# Serving must hold every conversation the adapter was trained on (a job that serves nothing may keep any value).
# One message for both sides: a messageExpression quoting the numbers costs more than the apiserver's CEL budget.
SERVING_TOO_SHORT = (
    "must hold the longest conversation the adapter is trained on, maxTurns (1 without an environment) x "
    "(algorithm.maxPromptLength + algorithm.maxResponseLength); raise it, or leave it unset to serve that length"
)
SERVING_LENGTH_CEL = (
    "!has(self.inference) || (has(self.inference.enabled) && !self.inference.enabled) "
    "|| !has(self.inference.maxModelLen) || self.inference.maxModelLen >= " + spec_max_model_len_cel()
)


class JobSpec(ApiModel):
    """A GRPO + LoRA post-training run of a vision-language model, and what to do with the result."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(S3_ONE_NODE_CEL, S3_NEEDS_ONE_NODE, ".checkpoint"),
            cel(GATE_NEEDS_VALIDATION_CEL, GATE_NEEDS_VALIDATION, ".inference"),
            cel(SERVING_LENGTH_CEL, SERVING_TOO_SHORT, ".inference.maxModelLen"),
            cel(SKYRL_GYM_NEEDS_SKYRL_CEL, LOCAL_CANNOT_RUN_SKYRL_GYM, ".trainer.backend"),
            *(cel(rule, message, path) for rule, message, path in batch_geometry.cel_rules()),
            *job_transition_rules(),
        )
    }

    model: ModelSpec = Field(json_schema_extra=immutable("model"))
    lora: LoRASpec = Field(default_factory=LoRASpec, json_schema_extra=immutable("lora"))
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, json_schema_extra=immutable("algorithm"))
    dataset: DatasetSpec = Field(json_schema_extra=immutable("dataset"))
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    checkpoint: CheckpointSpec = Field(json_schema_extra=immutable("checkpoint"))
    resilience: ResilienceSpec = Field(default_factory=ResilienceSpec)
    inference: InferenceSpec = Field(default_factory=InferenceSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    """Experiment tracking: TensorBoard files in the job directory always, MLflow and W&B when set. A change
    applies from the next attempt on, which logs into the same runs."""
    preflight: bool = False
    """Before the first attempt, run the trainer image's self-test (`python -m mmrl_trainer selftest`: a few GRPO
    steps of a tiny model with checkpoint, resume, export and the adapter check) on this job's own RayCluster, as
    RayJob `<name>-a0`. A failure ends the job Failed (reason InvalidConfig) without spending a restart."""

    @field_validator("trainer")
    @classmethod
    def _skyrl_gym_needs_skyrl(cls, trainer: TrainerSpec, info: ValidationInfo) -> TrainerSpec:
        """The Python side of SKYRL_GYM_NEEDS_SKYRL_CEL (dataset is validated before trainer)."""
        dataset = info.data.get("dataset")
        environment = dataset.environment if dataset is not None else None
        if trainer.backend == "local" and environment is not None and environment.name == "skyrl-gym":
            raise field_error(("backend",), LOCAL_CANNOT_RUN_SKYRL_GYM, trainer.backend)
        return trainer

    @field_validator("checkpoint")
    @classmethod
    def _s3_means_one_node(cls, checkpoint: CheckpointSpec, info: ValidationInfo) -> CheckpointSpec:
        """The Python side of S3_ONE_NODE_CEL (trainer and cluster are validated before checkpoint)."""
        trainer, cluster = info.data.get("trainer"), info.data.get("cluster")
        skyrl = trainer is None or trainer.backend == "skyrl"
        nodes = sum(g.replicas for g in cluster.worker_groups) if cluster is not None else 1
        if checkpoint.s3 is not None and skyrl and nodes > 1:
            raise ValueError(S3_NEEDS_ONE_NODE)
        return checkpoint

    @field_validator("inference")
    @classmethod
    def _gate_needs_validation(cls, inference: InferenceSpec, info: ValidationInfo) -> InferenceSpec:
        """The Python side of GATE_NEEDS_VALIDATION_CEL (dataset is validated before inference)."""
        dataset = info.data.get("dataset")
        if inference.promote_when is not None and dataset is not None and dataset.validation is None:
            raise ValueError(GATE_NEEDS_VALIDATION)
        return inference

    @field_validator("inference")
    @classmethod
    def _serving_holds_training(cls, inference: InferenceSpec, info: ValidationInfo) -> InferenceSpec:
        """The Python side of SERVING_LENGTH_CEL (algorithm and dataset are validated before inference)."""
        algorithm, dataset = info.data.get("algorithm"), info.data.get("dataset")
        if not inference.enabled or inference.max_model_len is None or algorithm is None or dataset is None:
            return inference
        if inference.max_model_len < spec_max_model_len(algorithm, dataset.environment):
            raise field_error(("max_model_len",), SERVING_TOO_SHORT, inference.max_model_len)
        return inference

    @model_validator(mode="after")
    def _batch_divides_over_the_gpus(self) -> JobSpec:
        """The Python side of batch_geometry.cel_rules: SkyRL's split of each step over the data-parallel GPUs."""
        if self.trainer.backend == "local":
            return self
        dp = batch_geometry.data_parallel_size(self.cluster.worker_groups)
        found = batch_geometry.problems(self.algorithm, dp)
        if found:
            raise field_errors([(("algorithm", f), m, getattr(self.algorithm, f)) for f, m in found])
        return self

    suspend: bool = False
    """Stop training (RayJob and RayCluster are deleted, checkpoints kept); false again resumes from the
    latest complete checkpoint without spending a restart."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=31_536_000)
    """Delete the RayCluster this long after training finished (inference and checkpoints are kept)."""


class ObjectMeta(ApiModel):
    """The part of metadata mmrl checks; everything else Kubernetes manages is accepted as is."""

    model_config = ApiModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1)
    namespace: str | None = None

    def problems(self) -> list[str]:
        out = []
        if len(self.name) > MAX_JOB_NAME_LENGTH:
            out.append(
                f"{len(self.name)} characters is too long: at most {MAX_JOB_NAME_LENGTH}, so that the RayJob "
                "name <name>-a<attempt> fits KubeRay's 47-character limit"
            )
        if not NAME_RE.match(self.name):
            out.append(
                f"{self.name!r} must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
            )
        return out


class MultimodalRLJob(ApiModel):
    api_version: Literal["mmrl.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["MultimodalRLJob"] = KIND
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"


def validate_as_apiserver(doc: Any) -> tuple[MultimodalRLJob | None, list[FieldError]]:
    """Validate one parsed YAML document as the apiserver does with the generated CRD (schema and CEL); return the
    model (when valid) and every error with its path."""
    return validate_document(doc, MultimodalRLJob, lambda name: ObjectMeta(name=name).problems())


def plan_refusals(spec: JobSpec) -> list[FieldError]:
    """What the GPU memory plan refuses of a valid spec, each naming the field to change; nothing when the plan
    fits or cannot be made (a model or instance type outside mmrl's tables)."""
    plan = spec_plan(spec)
    if plan is None or plan.fits:
        return []
    return [FieldError(p.field, f"{p.message} ({plan.verdict()})") for p in plan.problems]


def validate_manifest(doc: Any) -> tuple[MultimodalRLJob | None, list[FieldError]]:
    """Validate one parsed YAML document as mmrl does: `validate_as_apiserver`, then `plan_refusals`. Return the
    model (when valid) and every error with its path."""
    job, errors = validate_as_apiserver(doc)
    if job is None:
        return None, errors
    refused = plan_refusals(job.spec)
    return (None, refused) if refused else (job, [])


def parse_job(obj: dict[str, Any]) -> MultimodalRLJob:
    """Parse a job read from the cluster as `mmrl validate` reads a file, its GPU memory plan included (the
    operator's second line of defence); raise ValueError naming every bad field."""
    job, errors = validate_manifest(obj)
    if job is None:
        raise ValueError("; ".join(str(e) for e in errors))
    return job
