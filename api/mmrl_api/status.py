"""`status` of a MultimodalRLJob: what the operator and the trainer observed, never what was asked for.

`phase` is for humans; `conditions` (kstatus style: Ready, Reconciling, Stalled, plus domain conditions) are
for machines — `kubectl wait`, Argo CD's health check and alerts. `attempts` is a bounded history so a job that
survived many node replacements does not grow its object without limit.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mmrl_api.base import PRESERVE_UNKNOWN_KEY, ApiModel
from mmrl_api.cluster import MAX_JOB_PODS

Phase = Literal[
    "Pending",
    "Provisioning",
    "Queued",
    "Running",
    "Recovering",
    "Exporting",
    "Serving",
    "Succeeded",
    "Failed",
    "Suspended",
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
TERMINAL_PHASES = ("Succeeded", "Failed")

AttemptCause = Literal["initial", "application", "infra", "hang", "preemption", "resume", "spec-change"]
"""Why an attempt was started: the first one, after an application or infra failure, after a hang, after Kueue
preempted the previous one, after an unsuspend, or after a spec change that required a new attempt."""

MAX_ATTEMPT_HISTORY = 20
# Limits of what the operator and trainer write (the CRD needs one on every string and list). Generous where
# the writer does not truncate: a status write the apiserver refuses would leave the job unobservable.
TIME = Field(default=None, max_length=64)
NAME_MAX = 253
PATH_MAX = 4096
MESSAGE_MAX = 32768


class StatusModel(ApiModel):
    """Status is read back from the cluster, possibly written by another operator version: tolerate extras."""

    model_config = ApiModel.model_config | {"extra": "ignore"}


class Condition(StatusModel):
    type: str = Field(max_length=64)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=2048)
    last_transition_time: str | None = TIME
    observed_generation: int | None = None


class CheckpointRef(StatusModel):
    step: int
    path: str = Field(max_length=PATH_MAX)
    time: str | None = TIME


class EpisodeProgress(StatusModel):
    """Multi-turn rollouts of the last logged step (a dataset with an environment), averaged over its episodes."""

    success_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Fraction of episodes the environment counted as solved (the maze: the goal reached)."""
    turns: float | None = Field(default=None, ge=0.0)
    """Turns (actions) per episode."""
    tokens: float | None = Field(default=None, ge=0.0)
    """Response tokens per episode, every turn's together."""


PassedOver = Annotated[str, Field(max_length=512)]
"""Why one checkpoint newer than the one resumed was not taken (the trainer cuts it to 500 characters)."""


class Progress(StatusModel):
    """Written by the trainer (rate-limited) as the namespace's mmrl-trainer, from one of the job's Ray pods."""

    attempt: int | None = None
    """The attempt whose trainer wrote this progress."""
    resumed_from_step: int | None = None
    """The checkpoint step this attempt's trainer actually resumed from (read from the checkpoint directory);
    absent when it started from the base model."""
    passed_over: list[PassedOver] = Field(default_factory=list, max_length=8)
    """Why the trainer did not resume from checkpoints newer than resumedFromStep (a file whose size or sha256 is not
    its manifest's, a missing manifest), newest first."""
    step: int = 0
    total_steps: int | None = None
    reward_mean: float | None = None
    truncated_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    """Fraction of the last step's rollouts that stopped at algorithm.maxResponseLength instead of ending (SkyRL
    backend). A high value means responses are cut off, often with zero reward: raise maxResponseLength, shorten
    the task or reduce image size."""
    episodes: EpisodeProgress | None = None
    """Multi-turn jobs only: success rate, turns and length of the last step's episodes."""
    last_checkpoint: CheckpointRef | None = None
    heartbeat: str | None = TIME
    """RFC 3339 time of the trainer's last training-loop report; the operator's hang detection reads it. Absent
    until this attempt's first step (the startup timeout applies until then)."""


class Attempt(StatusModel):
    index: int = Field(ge=1)
    ray_job: str = Field(max_length=NAME_MAX)
    cause: AttemptCause
    resumed_from_step: int | None = None
    passed_over: list[PassedOver] = Field(default_factory=list, max_length=8)
    """Checkpoints newer than resumedFromStep the trainer found damaged, and why (event CheckpointPassedOver)."""
    start_time: str | None = TIME
    end_time: str | None = TIME
    result: Literal["Running", "Succeeded", "Failed", "Stopped"] = "Running"
    failure: Literal["application", "infra", "hang", "preemption"] | None = None
    """How a failed or stopped attempt was classified; decides which restart budget it spends (a preemption by
    Kueue spends none)."""
    node: str | None = Field(default=None, max_length=NAME_MAX)
    """The node whose fault ended the attempt, when there was one."""
    pod_set: str | None = Field(default=None, max_length=64)
    """Fingerprint of the Ray pods the attempt started on; a change means a pod was lost (infrastructure)."""
    message: str | None = Field(default=None, max_length=1024)


class PreflightStatus(StatusModel):
    """The image self-test run before attempt 1 when `spec.preflight` is true."""

    phase: Literal["Pending", "Running", "Succeeded", "Failed"] = "Pending"
    ray_job: str | None = Field(default=None, max_length=NAME_MAX)
    """The RayJob that runs it: `<name>-a0`."""
    start_time: str | None = TIME
    end_time: str | None = TIME
    message: str | None = Field(default=None, max_length=1024)
    """The self-test's verdict, or its failing check (its `mmrl-trainer error:` line)."""


class CheckpointFootprint(StatusModel):
    """Storage the job's checkpoints are expected to take at their peak (mmrl_api.footprint), so a platform team
    can size FSx: `keep + 1` checkpoints, each the full fp32 policy state for SkyRL."""

    total_bytes: int = Field(ge=0)
    per_checkpoint_bytes: int = Field(ge=0)
    checkpoints: int = Field(ge=1)
    summary: str = Field(max_length=256)


class MemoryPlanStatus(StatusModel):
    """One worker GPU's memory plan (mmrl_api.memory_plan): the larger of the training and rollout phases against the
    GPU, from the reference model table and the worker group's instance type. The trainer checks again with the
    model's own config.json before any engine starts."""

    gpu: str = Field(max_length=128)
    gpu_bytes: int = Field(ge=0)
    training_bytes: int = Field(ge=0)
    rollout_bytes: int = Field(ge=0)
    kv_cache_tokens: int | None = Field(default=None, ge=0)
    """Tokens each vLLM engine's KV cache holds (SkyRL backend)."""
    max_model_len: int | None = Field(default=None, ge=1)
    fits: bool
    summary: str = Field(max_length=1024)


class AdapterEvaluation(StatusModel):
    """The held-out evaluation the promotion gate reads (spec.inference.promoteWhen), as the trainer measured it."""

    held_out_reward: float | None = None
    """The adapter's mean reward on dataset.validation at the end of training."""
    baseline_reward: float | None = None
    """The base model's mean reward on the same data at step 0, before any training."""
    step: int | None = None
    """The step whose adapter held_out_reward scores."""


class AdapterLineage(StatusModel):
    """Where the served adapter came from."""

    checkpoint_step: int | None = None
    """The training step the adapter was exported at."""
    base_model_revision: str | None = Field(default=None, max_length=256)
    """spec.model.revision when the model was pinned; None: whatever the name resolved to."""
    datasets: dict[str, Annotated[str, Field(max_length=64)]] = Field(default_factory=dict, max_length=4)
    """sha256 of each dataset the trainer read (train, validation), of the file's bytes where the trainer reads a
    file, or of the URI of a synthetic:// dataset (its rows are a function of it); remote URIs the trainer streams
    are left out."""


class AdapterStatus(StatusModel):
    """The exported LoRA adapter, as the trainer checked and reported it (the operator serves exactly this)."""

    path: str = Field(max_length=1024)
    """Where the adapter lies, as the job's pods see it (the checkpoint volume's mount path, or s3://...)."""
    rank: int = Field(ge=0)
    """The largest LoRA rank in the adapter (r and rank_pattern)."""
    alpha: float = 0
    target_modules: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list, max_length=256)
    base_model: str = Field(default="", max_length=1024)
    sha256: str = Field(default="", max_length=64)
    """sha256 of adapter_model.safetensors; the inference pod's init container checks it."""
    digest: str = Field(default="", max_length=64)
    """sha256 of the adapter directory's manifest: every file, config included (`mmrl_api.adapter_digest`). A shared
    server's gateway loads a copy of the files only when the copy has this digest."""
    max_lora_rank: int | None = None
    """The smallest vLLM --max-lora-rank that fits the adapter."""
    config: dict[str, Any] = Field(default_factory=dict, json_schema_extra={PRESERVE_UNKNOWN_KEY: True})
    """The rule-relevant keys of adapter_config.json, so the operator re-checks them before serving."""
    evaluation: AdapterEvaluation | None = None
    lineage: AdapterLineage | None = None


class InferenceStatus(StatusModel):
    service: str = Field(max_length=NAME_MAX)
    """The Service in front of the vLLM Deployment (`<name>-inference`)."""
    url: str = Field(max_length=1024)
    """In-cluster base URL of the OpenAI-compatible API, e.g. http://job-inference.ns.svc:8000/v1."""
    ready: bool = False
    """The Deployment is Available and `/v1/models` (through the Service) lists the adapter."""
    model: str | None = Field(default=None, max_length=1024)
    """The name to pass as `model` in OpenAI requests: the adapter's served name."""
    base_model: str | None = Field(default=None, max_length=1024)
    """The served name of the base model (the adapter's parent in /v1/models)."""
    server: str | None = Field(default=None, max_length=NAME_MAX)
    """The ModelServer that serves the adapter (`spec.inference.server`); absent for a Deployment of the job's own."""
    alias: str | None = Field(default=None, max_length=NAME_MAX)
    """The alias (`spec.inference.alias`) while it points at this job's adapter; absent when it points elsewhere."""


class TrackingRun(StatusModel):
    """One sink's run of this job: every attempt logs to it."""

    run_id: str = Field(max_length=256)
    url: str | None = Field(default=None, max_length=1024)
    """Where to look at it; absent where the client knows none (a W&B offline run)."""
    experiment_id: str | None = Field(default=None, max_length=256)
    """MLflow only: the experiment the run belongs to."""


class TrackingStatus(StatusModel):
    """Where the job's training curves are, reported by the trainer when an attempt starts."""

    tensorboard: str | None = Field(default=None, max_length=PATH_MAX)
    """The TensorBoard log directory (`tensorboard --logdir` it, or `mmrl plot` the job)."""
    mlflow: TrackingRun | None = None
    wandb: TrackingRun | None = None


MAX_AVOIDED_NODES = 8


class AvoidedNode(StatusModel):
    """A node whose fault ended one of this job's attempts. The job's Ray pods prefer other nodes while it is
    remembered; it is forgotten once the node is replaced (its name is gone, or it came back as a new Node
    object), or when newer faults push it out of the bounded list."""

    node: str = Field(max_length=NAME_MAX)
    uid: str = Field(max_length=64)
    """The Node object's uid when the fault was seen: a different uid under the same name is a new instance."""
    attempt: int = Field(ge=1)
    """The attempt that ended on it."""
    reason: str = Field(max_length=64)
    """The operator's verdict on the node then (PendingReplacement, NotReady, DeepHealthCheckFailed, ...)."""
    since: str = Field(max_length=64)
    """When the attempt ended."""


class JobStatus(StatusModel):
    phase: Phase = "Pending"
    conditions: list[Condition] = Field(default_factory=list, max_length=32)
    observed_generation: int | None = None
    attempt: int = 0
    """Index of the current (or last) attempt; attempt N runs as RayJob <name>-a<N>."""
    restarts: dict[str, int] = Field(default_factory=dict, max_length=16)
    """Restarts charged so far per budget: `application` (also hangs: without an infrastructure signal the
    trainer is presumed at fault) and `infra`."""
    degraded_nodes: list[Annotated[str, Field(max_length=NAME_MAX)]] = Field(
        default_factory=list, max_length=MAX_JOB_PODS
    )
    """Nodes hosting this job's pods that currently report a fault."""
    attempt_nodes: list[Annotated[str, Field(max_length=NAME_MAX)]] = Field(
        default_factory=list, max_length=MAX_JOB_PODS
    )
    """Every node the running attempt's Ray pods have been placed on (empty between attempts). A fault on one of
    them ends the attempt even when the node took its pods with it, so the attempt still names the node."""
    avoided_nodes: list[AvoidedNode] = Field(default_factory=list, max_length=MAX_AVOIDED_NODES)
    """Nodes whose faults ended earlier attempts, oldest first: the next attempts' Ray pods prefer other nodes."""
    foreign_objects: list[Annotated[str, Field(max_length=NAME_MAX + 32)]] = Field(default_factory=list, max_length=16)
    """`Kind name` of objects that carry this job's label and a child's name but that the job does not control
    (their controller reference names something else): never adopted, never written. Each is warned about once."""
    attempts: list[Attempt] = Field(default_factory=list, max_length=MAX_ATTEMPT_HISTORY)
    ray_cluster: str | None = Field(default=None, max_length=NAME_MAX)
    ray_job: str | None = Field(default=None, max_length=NAME_MAX)
    job_dir: str | None = Field(default=None, max_length=PATH_MAX)
    """This job's checkpoint directory: <root>/<namespace>/<name>-<uid8>."""
    next_attempt_after: str | None = TIME
    """Backoff: the next attempt is not started before this time."""
    finished_at: str | None = TIME
    progress: Progress = Field(default_factory=Progress)
    truncation_warned_attempt: int | None = Field(default=None, ge=1)
    """The attempt for which the operator raised the RolloutsTruncated Warning (once per attempt)."""
    preflight: PreflightStatus | None = None
    """The preflight's outcome (`spec.preflight`); absent when the job has none."""
    checkpoint_footprint: CheckpointFootprint | None = None
    """Expected peak checkpoint storage; absent when the model's size is unknown."""
    memory_plan: MemoryPlanStatus | None = None
    """Expected GPU memory per worker GPU; absent when the model or the instance type is not in mmrl's tables."""
    tracking: TrackingStatus | None = None
    adapter: AdapterStatus | None = None
    inference: InferenceStatus | None = None
    message: str | None = Field(default=None, max_length=MESSAGE_MAX)
