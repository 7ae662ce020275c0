"""`spec.checkpoint`, `spec.resilience` and `spec.inference`: what survives failures and what happens after.

Checkpoints live on shared storage (an FSx for Lustre PVC mounted on every Ray pod, or S3) under a per-job
directory; the operator never deletes them. Resilience budgets separate infrastructure failures (HyperPod node
faults, lost pods) from application failures, because the first are expected on large fleets and the second
usually mean a bug that retrying will not fix.
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mmrl_api.base import ApiModel, cel, cel_rules, exactly_one_cel, not_below, require_exactly_one
from mmrl_api.constants import DEFAULT_VLLM_IMAGE
from mmrl_api.kube_syntax import label_map, resource_map
from mmrl_api.kueue import field_error
from mmrl_api.locations import MOUNT_PATH, NO_PARENT_SEGMENT, S3_URI, SUB_PATH
from mmrl_api.rules import text
from mmrl_api.spec import DNS_LABEL
from mmrl_api.vllm_flags import NOT_AN_OWNED_FLAG, instead


class PVCCheckpoint(ApiModel):
    """A PersistentVolumeClaim mounted on every Ray pod (FSx for Lustre on HyperPod)."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_LABEL)
    mount_path: text(256, *MOUNT_PATH) = "/fsx"  # type: ignore[valid-type]
    """Where every Ray pod mounts the claim: absolute and normalised, and clear of the paths the operator mounts
    (/dev/shm, /etc/mmrl, /tmp, /mnt/pvc, /mnt/adapter)."""
    sub_path: text(256, *SUB_PATH) = "mmrl"  # type: ignore[valid-type]
    """Directory inside the volume under which job directories are created (relative, no '..')."""


class S3Checkpoint(ApiModel):
    """An S3 prefix; SkyRL reads and writes checkpoints there directly."""

    uri: text(1024, S3_URI, NO_PARENT_SEGMENT, pattern=r"^s3://")  # type: ignore[valid-type]
    """s3://bucket/prefix; the IAM role of the namespace's mmrl-trainer ServiceAccount (IRSA or EKS Pod Identity, set
    by the platform) must allow read and write."""


class CheckpointSpec(ApiModel):
    """Where checkpoints go: exactly one of pvc or s3. Each job writes `<root>/<namespace>/<name>-<uid8>/`."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_rules(exactly_one_cel("pvc", "s3"))}

    pvc: PVCCheckpoint | None = None
    s3: S3Checkpoint | None = None
    interval_steps: int = Field(default=5, ge=1, le=1_000_000)
    """Save a checkpoint every this many steps (and at the end)."""
    keep: int = Field(default=3, ge=1, le=1000)
    """Complete checkpoints the trainer keeps; older ones are rotated by the trainer, never by the operator."""
    hf_save_interval_steps: int | None = Field(default=None, ge=1, le=1_000_000)
    """Also write the policy in Hugging Face format every this many steps, to `<jobDir>/exports/global_step_N/`
    (SkyRL's trainer.hf_save_interval; SkyRL backend). Each export gathers the whole fp32 policy onto rank 0's CPU
    (about 35 GB for an 8B model) and writes it. Unset: only the final adapter is exported, to `<jobDir>/adapter`,
    which is what serving uses either way."""

    @model_validator(mode="after")
    def _exactly_one(self) -> CheckpointSpec:
        require_exactly_one(self, "pvc", "s3")
        return self


class ResilienceSpec(ApiModel):
    """Restart budgets and hang detection."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "self.maxBackoffSeconds >= self.backoffSeconds",
                "maxBackoffSeconds must be at least backoffSeconds",
                ".maxBackoffSeconds",
            )
        )
    }

    max_restarts: int = Field(default=2, ge=0, le=100)
    """Restarts after application failures (trainer exit without an infrastructure cause)."""
    max_infra_restarts: int = Field(default=10, ge=0, le=1000)
    """Restarts after infrastructure failures (node fault or replacement, evicted or lost pod, lost head)."""
    backoff_seconds: int = Field(default=10, ge=0, le=3600)
    """Delay before the first restart; doubles per consecutive failure of the same kind."""
    max_backoff_seconds: int = Field(default=600, ge=0, le=86400)
    hang_timeout_seconds: int = Field(default=1800, ge=0, le=604800)
    """Restart a running attempt whose trainer sent no heartbeat for this long after its first one; 0 disables."""
    startup_timeout_seconds: int = Field(default=3600, ge=0, le=604800)
    """Restart an attempt whose trainer has not sent its first heartbeat this long after the attempt started
    (image pull, model download, vLLM engine start-up and loading all count); 0 disables."""

    @field_validator("max_backoff_seconds")
    @classmethod
    def _backoff_order(cls, ceiling: int, info: ValidationInfo) -> int:
        return int(not_below(ceiling, info.data, "backoff_seconds"))


class InferenceResources(ApiModel):
    """CPU/memory of each vLLM replica."""

    requests: resource_map(16) = Field(default_factory=lambda: {"cpu": "8", "memory": "64Gi"})  # type: ignore[valid-type]
    limits: resource_map(16) = Field(default_factory=lambda: {"memory": "64Gi"})  # type: ignore[valid-type]


PROMOTE_NEEDS_A_TEST = "set heldOutRewardAtLeast, beatsBaseline: true, or both"


class PromotionGate(ApiModel):
    """What a trained adapter must score on the held-out data (dataset.validation) to be served. Each test that is
    set must pass. Measured by the trainer: the adapter's held-out reward at the end of training, and the base
    model's at step 0 (the baseline)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "has(self.heldOutRewardAtLeast) || (has(self.beatsBaseline) && self.beatsBaseline)",
                PROMOTE_NEEDS_A_TEST,
            )
        )
    }

    held_out_reward_at_least: float | None = Field(default=None, ge=-1e6, le=1e6)
    """The adapter's mean held-out reward must be at least this."""
    beats_baseline: bool = False
    """The adapter's held-out reward must be above the base model's, measured on the same data at step 0."""

    @model_validator(mode="after")
    def _one_test(self) -> PromotionGate:
        if self.held_out_reward_at_least is None and not self.beats_baseline:
            raise ValueError(PROMOTE_NEEDS_A_TEST)
        return self


# A vLLM server's GPUs: a job's own (InferenceSpec) and a shared one's (ModelServerSpec) alike.
GPUS_RULE = "gpus must be 0 (a CPU build of vLLM) or at least tensorParallelSize"
GPUS_CEL = "!has(self.gpus) || self.gpus == 0 || self.gpus >= self.tensorParallelSize"
ALIAS_NEEDS = "alias needs server and promoteWhen: an alias moves only to an adapter that passed its gate"
ALIAS_NEEDS_CEL = "!has(self.alias) || (has(self.server) && has(self.promoteWhen))"


class InferenceSpec(ApiModel):
    """The vLLM Deployment + Service created when training succeeds (base model + trained adapter)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(GPUS_CEL, GPUS_RULE, ".gpus"),
            cel(ALIAS_NEEDS_CEL, ALIAS_NEEDS, ".alias"),
        )
    }

    enabled: bool = True
    """Serve the adapter once training succeeds; false ends the job at Succeeded (and removes a Deployment)."""
    image: str = Field(default=DEFAULT_VLLM_IMAGE, min_length=1, max_length=512)
    """The vLLM OpenAI-server image; its entrypoint is replaced by `python3 -m vllm.entrypoints.openai.api_server`."""
    replicas: int = Field(default=1, ge=0, le=64)
    resources: InferenceResources = Field(default_factory=InferenceResources)
    """CPU/memory; GPUs are tensorParallelSize per replica."""
    served_model_name: str | None = Field(default=None, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    """Name clients use for the adapter in the OpenAI API; defaults to the job name."""
    max_model_len: int | None = Field(default=None, ge=256, le=1_048_576)
    """The longest conversation (prompt, images and reply) one request may hold, vLLM's `--max-model-len`.
    Defaults to the longest the adapter was trained on: maxTurns (1 without an environment) x
    (algorithm.maxPromptLength + algorithm.maxResponseLength). A smaller value is refused: the server would reject
    conversations the adapter learned on. A larger one is allowed (the serving GPU's memory must hold it)."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    gpus: int | None = Field(default=None, ge=0, le=16)
    """nvidia.com/gpu per replica; defaults to tensorParallelSize. 0 runs a CPU build of vLLM (set `image`)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    max_images_per_prompt: int = Field(default=2, ge=0, le=64)
    extra_args: list[text(1024, NOT_AN_OWNED_FLAG, hint=instead)] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=32
    )
    """Extra `vllm serve` arguments, appended last. None may name a flag the operator sets from the fields above
    (mmrl_api.vllm_flags: --max-lora-rank, --max-model-len, --lora-modules, --port, ...; any spelling or
    abbreviation)."""
    node_selector: label_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]
    server: str | None = Field(default=None, min_length=1, max_length=58, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    """Serve the adapter from this ModelServer (same namespace) instead of a Deployment of its own: once training
    succeeds and the gate passes, the operator loads the adapter into every ready replica of the server, under
    servedModelName (or the job's name); each replica's gateway loads a copy of the files only when it has the digest
    the trainer reported (status.adapter.digest) and passes vLLM's rules. image, replicas, resources, gpus,
    tensorParallelSize, maxModelLen, maxImagesPerPrompt and extraArgs are then the server's. A server whose
    base model, maxLoraRank, maxModelLen, pixel cap or adapter volumes do not fit this job refuses it, with the
    reason in condition InferenceReady. Deleting the job unloads its adapter."""
    alias: str | None = Field(default=None, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    """A stable name clients call (e.g. geo-prod) on the server, pointing at one promoted adapter. Once this job's
    adapter passed its gate and is loaded, the alias moves to it; the adapter it pointed at stays loaded under its own
    name, and `mmrl rollback` points the alias back. Needs server and promoteWhen: an alias only ever moves to an
    adapter that passed its gate."""
    promote_when: PromotionGate | None = None
    """Serve the adapter only if its held-out evaluation passes this gate; otherwise the job ends Succeeded with
    condition Promoted=False (the scores in its message) and nothing is served. Changing it re-evaluates the gate,
    which may start or remove serving. Needs dataset.validation."""

    @model_validator(mode="after")
    def _enough_gpus(self) -> InferenceSpec:
        if self.gpus and self.gpus < self.tensor_parallel_size:
            raise ValueError(
                f"gpus: {self.gpus} is fewer than tensorParallelSize {self.tensor_parallel_size}; use 0 for CPU"
            )
        if self.alias is not None and (self.server is None or self.promote_when is None):
            raise field_error(("alias",), ALIAS_NEEDS, self.alias)
        return self
