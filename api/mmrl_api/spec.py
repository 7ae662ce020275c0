"""The `spec` of a MultimodalRLJob: what an ML engineer asks for, with defaults from the reference recipe.

Defaults follow SkyRL's geometry3k LoRA recipe for Qwen3-VL-8B (rank 32, alpha 32, lr 3e-5, 4 samples per
prompt, batch 128/64, prompt 1024 / response 2048 tokens, checkpoint every 5 steps). Each cross-field rule is
written twice on purpose: as CEL for admission (`cel(...)`) and as a pydantic validator for `mmrl validate` and
the operator's second line of defence; tests/bad_specs.yaml holds the corpus that keeps them in agreement.
Single-value string rules are written once (`mmrl_api.rules`) and emitted as both.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mmrl_api.base import (
    ApiModel,
    cel,
    cel_rules,
    exactly_one_cel,
    immutable,
    not_below,
    require_exactly_one,
)
from mmrl_api.constants import VLLM_FORBIDDEN_LORA_TARGETS
from mmrl_api.credentials import CREDENTIAL_NAME_RE, NO_URL_WITH_PASSWORD, NOT_A_CREDENTIAL_NAME
from mmrl_api.environment import IMPORT_PATH, EnvironmentSpec, TaskParams, custom_only, require_iff_custom
from mmrl_api.kube_syntax import ObjectName
from mmrl_api.locations import DATA_URI, URI_RULES
from mmrl_api.rules import Rule, cel_str, text

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A hub id (org/name), an absolute path in the image, or a URI with a scheme the trainer can load from.
MODEL_SOURCE = (
    r"^((hf|s3|pvc)://[A-Za-z0-9][A-Za-z0-9._/@+-]*|/[A-Za-z0-9._/@+-]*"
    r"|[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?)$"
)
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A LoRA target is a module name, matched by PEFT as the last dotted components of a module's path (`q_proj`,
# `mlp.down_proj`, `layers.0.self_attn.q_proj`). PEFT reads a regex only from a plain string, never from a list
# entry, so regex characters have no meaning here; and SkyRL receives the list as an OmegaConf override
# `[a,b]`, where a comma, a space, brackets, quotes or `${...}` would change the list or interpolate.
MODULE_NAME = Rule(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$",
    "must be a module name: identifiers (letters, digits, '_') joined by '.', such as q_proj or mlp.down_proj",
)
ModuleName = text(128, MODULE_NAME, min_length=1)
FORBIDDEN_TARGETS_CEL = " || ".join(f"m.endsWith('{t}')" for t in VLLM_FORBIDDEN_LORA_TARGETS)


class ModelSpec(ApiModel):
    """The base vision-language model to post-train."""

    name: text(512, *URI_RULES, min_length=1, pattern=MODEL_SOURCE)  # type: ignore[valid-type]
    """Hugging Face id (Qwen/Qwen3-VL-8B-Instruct) or URI: hf://org/name, s3://bucket/path, pvc://claim/path,
    or an absolute path inside the trainer image."""
    revision: str | None = Field(default=None, max_length=128)
    """Hugging Face revision (branch, tag or commit) to pin; ignored for non-hub sources."""


class LoRASpec(ApiModel):
    """The LoRA adapter that is trained and later served by vLLM."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                f"!self.targetModules.exists(m, {FORBIDDEN_TARGETS_CEL})",
                "targetModules must not include lm_head or embed_tokens: vLLM cannot serve such adapters",
                ".targetModules",
            )
        )
    }

    rank: int = Field(default=32, ge=1, le=512)
    """LoRA rank r; at most 512, the largest rank vLLM can serve."""
    alpha: int = Field(default=32, ge=1, le=4096)
    """LoRA alpha (scaling = alpha / rank)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input, in [0, 1)."""
    target_modules: list[ModuleName] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        max_length=32,
    )
    """Module names LoRA wraps. The default covers the language model's attention and MLP projections (the
    vision tower is left frozen, which is what vLLM serves without experimental flags)."""

    @field_validator("target_modules")
    @classmethod
    def _servable_targets(cls, modules: list[str]) -> list[str]:
        for m in modules:
            if any(m.endswith(t) for t in VLLM_FORBIDDEN_LORA_TARGETS):
                raise ValueError(
                    f"{m!r} is not allowed: vLLM cannot serve adapters that target lm_head or embed_tokens"
                )
        return modules


class AlgorithmSpec(ApiModel):
    """The RL algorithm and its batch geometry."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "self.miniBatchSize <= self.trainBatchSize",
                "miniBatchSize must not exceed trainBatchSize",
                ".miniBatchSize",
            ),
            cel(
                "self.trainBatchSize % self.miniBatchSize == 0",
                "trainBatchSize must be a multiple of miniBatchSize",
                ".miniBatchSize",
            ),
            cel(
                "self.clipEpsHigh >= self.clipEpsLow",
                "clipEpsHigh must be at least clipEpsLow",
                ".clipEpsHigh",
            ),
        )
    }

    name: Literal["grpo"] = "grpo"
    """Advantage estimator. GRPO: group-relative advantages over samplesPerPrompt completions of a prompt."""
    samples_per_prompt: int = Field(default=4, ge=2, le=64)
    """Completions sampled per prompt (the GRPO group size); at least 2 so advantages are defined."""
    learning_rate: float = Field(default=3e-5, gt=0.0, le=1.0)
    """Optimizer learning rate for the LoRA parameters."""
    kl_coef: float = Field(default=0.0, ge=0.0, le=10.0)
    """KL-loss coefficient against the reference policy; 0 disables the KL loss."""
    clip_eps_low: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Lower PPO clip epsilon."""
    clip_eps_high: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Upper PPO clip epsilon (>= clipEpsLow; larger values give DAPO-style clip-higher)."""
    train_batch_size: int = Field(default=128, ge=1, le=65536)
    """Prompts per training step."""
    mini_batch_size: int = Field(default=64, ge=1, le=65536)
    """Prompts per policy update; trainBatchSize must be a multiple of it."""
    micro_batch_size_per_gpu: int = Field(default=1, ge=1, le=1024)
    """Sequences per forward/backward pass on one GPU (memory knob, does not change the math)."""
    epochs: int = Field(default=1, ge=1, le=1000)
    """Passes over the training set."""
    max_steps: int | None = Field(default=None, ge=1, le=10_000_000)
    """Stop after this many steps even if epochs remain."""
    max_prompt_length: int = Field(default=1024, ge=16, le=131072)
    """Token budget of a prompt, image tokens included."""
    max_response_length: int = Field(default=2048, ge=1, le=131072)
    """Tokens generated per completion."""
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    """Sampling temperature for rollouts."""
    rollout_gpu_memory_utilization: float = Field(default=0.8, gt=0.0, le=1.0)
    """Fraction of each GPU's memory the rollout engines (vLLM, colocated with training: they sleep while FSDP
    trains) may take (SkyRL's generator.inference_engine.gpu_memory_utilization). Lower it when the policy's
    training state and the engine do not fit one GPU together; the VisGym maze recipe uses 0.45."""
    eval_interval_steps: int | None = Field(default=None, ge=1, le=1_000_000)
    """SkyRL backend: evaluate on dataset.validation every this many steps (and before the first); defaults to
    checkpoint.intervalSteps. Without validation data nothing is evaluated. The local backend evaluates at each
    checkpoint."""

    @field_validator("mini_batch_size")
    @classmethod
    def _mini_fits(cls, mini: int, info: ValidationInfo) -> int:
        train = info.data.get("train_batch_size")
        if train is not None:
            if mini > train:
                raise ValueError(f"{mini} is above trainBatchSize {train}")
            if train % mini:
                raise ValueError(f"trainBatchSize {train} must be a multiple of miniBatchSize {mini}")
        return mini

    @field_validator("clip_eps_high")
    @classmethod
    def _clip_order(cls, high: float, info: ValidationInfo) -> float:
        return not_below(high, info.data, "clip_eps_low")


RewardName = Literal["exact_match", "multiple_choice", "numeric", "custom"]


class RewardSpec(ApiModel):
    """A verifiable reward computed from a completion and the row's ground truth."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "(self.name == 'custom') == has(self.function)",
                custom_only("function"),
                ".function",
            ),
        )
    }

    name: RewardName = "exact_match"
    """Built-in reward: exact_match (normalised string equality), multiple_choice (the chosen letter),
    numeric (a number or \\boxed{} answer within tolerance), or custom (see function)."""
    function: str | None = Field(default=None, max_length=256, pattern=IMPORT_PATH)
    """For name=custom: `package.module:function` importable in the trainer image."""
    params: TaskParams = Field(default_factory=dict)  # type: ignore[valid-type]
    """Reward parameters, as strings: e.g. {tolerance: "1e-4", require_boxed: "true"} for numeric. Never
    credentials: a reward that needs one reads it from trainer.env (valueFrom.secretKeyRef)."""

    @field_validator("function")
    @classmethod
    def _function_iff_custom(cls, function: str | None, info: ValidationInfo) -> str | None:
        return require_iff_custom(function, info, "function")


TASK_CONFLICT = "set at most one of reward or environment: an environment scores its own episodes"


class DatasetSpec(ApiModel):
    """Prompts with images and their ground-truth answers, or the seeds of a multi-turn environment's episodes."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel("!has(self.reward) || !has(self.environment)", TASK_CONFLICT, ".environment"),
        )
    }

    train: text(1024, *URI_RULES, min_length=1, pattern=DATA_URI)  # type: ignore[valid-type]
    """Training data: s3://..., pvc://claim/path, hf://org/name, an absolute path, or synthetic://colors (the
    built-in demo task) or synthetic://maze?n=256&seed=0 (episodes of the built-in maze environment)."""
    validation: text(1024, *URI_RULES, pattern=DATA_URI) | None = None  # type: ignore[valid-type]
    """Held-out data evaluated at checkpoints (same forms as train)."""
    format: Literal["parquet", "jsonl"] = "parquet"
    """File format of train/validation."""
    prompt_field: str = Field(default="prompt", min_length=1, max_length=64)
    """Column holding the question text or chat messages."""
    images_field: str = Field(default="images", min_length=1, max_length=64)
    """Column holding images (paths, URIs or base64 data URIs)."""
    answer_field: str = Field(default="answer", min_length=1, max_length=64)
    """Column holding the ground-truth answer the reward checks against (optional in an environment's rows)."""
    reward: RewardSpec | None = None
    """How a completion is scored (single-turn). Without an environment it defaults to exact_match."""
    environment: EnvironmentSpec | None = None
    """A multi-turn task instead of a reward: each row starts an episode that the environment plays out with the
    policy and scores (its `seed` column picks the episode; a skyrl-gym class reads all of the row's columns). Set
    at most one of reward and environment."""

    @field_validator("environment")
    @classmethod
    def _one_task(cls, environment: EnvironmentSpec | None, info: ValidationInfo) -> EnvironmentSpec | None:
        if environment is not None and info.data.get("reward") is not None:
            raise ValueError(TASK_CONFLICT)
        return environment

    @model_validator(mode="after")
    def _single_turn_by_default(self) -> DatasetSpec:
        # Absent on the wire (the CRD has no default, or it would collide with an environment), a single-turn
        # dataset is scored by exact_match, as before there were environments.
        if self.environment is None and self.reward is None:
            self.reward = RewardSpec()
        return self


CREDENTIAL_INLINE = "looks like a credential: use valueFrom.secretKeyRef instead of an inline value"
CREDENTIAL_FROM_CONFIG_MAP = "looks like a credential: use valueFrom.secretKeyRef, not a ConfigMap"


def _credential_name(name: object) -> bool:
    return isinstance(name, str) and NOT_A_CREDENTIAL_NAME.holds(name) is False


class SecretKeyRef(ApiModel):
    """A key in a Secret or ConfigMap of the job's namespace."""

    name: ObjectName  # type: ignore[valid-type]
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from (exactly one)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(exactly_one_cel("secretKeyRef", "configMapKeyRef"))
    }

    secret_key_ref: SecretKeyRef | None = None
    config_map_key_ref: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        require_exactly_one(self, "secretKeyRef", "configMapKeyRef")
        return self


class EnvVar(ApiModel):
    """An environment variable for the trainer. Credentials only from a Secret (valueFrom.secretKeyRef), never
    inline and never from a ConfigMap."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "has(self.value) != has(self.valueFrom)",
                "set exactly one of value or valueFrom",
                ".valueFrom",
            ),
            cel(
                f"!self.name.matches({cel_str(CREDENTIAL_NAME_RE)}) || !has(self.value)",
                CREDENTIAL_INLINE,
                ".value",
            ),
            cel(
                f"!self.name.matches({cel_str(CREDENTIAL_NAME_RE)}) || !has(self.valueFrom) "
                "|| has(self.valueFrom.secretKeyRef)",
                CREDENTIAL_FROM_CONFIG_MAP,
                ".valueFrom",
            ),
        )
    }

    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    value: text(4096, NO_URL_WITH_PASSWORD) | None = None  # type: ignore[valid-type]
    value_from: EnvVarSource | None = None

    @field_validator("value")
    @classmethod
    def _no_inline_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and _credential_name(info.data.get("name")):
            raise ValueError(f"{info.data['name']} {CREDENTIAL_INLINE}")
        return value

    @field_validator("value_from")
    @classmethod
    def _value_or_source(cls, source: EnvVarSource | None, info: ValidationInfo) -> EnvVarSource | None:
        if "value" in info.data and (info.data["value"] is None) == (source is None):
            raise ValueError("set exactly one of value or valueFrom")
        if source is not None and source.secret_key_ref is None and _credential_name(info.data.get("name")):
            raise ValueError(f"{info.data['name']} {CREDENTIAL_FROM_CONFIG_MAP}")
        return source


class NameRef(ApiModel):
    """A Secret or ConfigMap of the job's namespace, by name."""

    name: str = Field(min_length=1, max_length=253)


class EnvFromSource(ApiModel):
    """A whole Secret or ConfigMap exposed as environment variables (exactly one)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(exactly_one_cel("secretRef", "configMapRef"))
    }

    secret_ref: NameRef | None = None
    config_map_ref: NameRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvFromSource:
        require_exactly_one(self, "secretRef", "configMapRef")
        return self


class TrainerSpec(ApiModel):
    """The trainer container that the RayJob runs."""

    image: str = Field(default="mmrl/trainer:0.1.0", min_length=1, max_length=512)
    """Trainer image (docker/trainer.Dockerfile: SkyRL base + mmrl_trainer)."""
    backend: Literal["skyrl", "local"] = Field(default="skyrl", json_schema_extra=immutable("trainer.backend"))
    """skyrl: SkyRL GRPO across the Ray cluster's GPUs. local: TRL GRPO on one node (small jobs, CPU demo).
    Immutable: the two backends' checkpoints are not interchangeable."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    """Extra environment variables for every Ray pod."""
    env_from: list[EnvFromSource] = Field(default_factory=list, max_length=16)
    """Secrets/ConfigMaps exposed as environment variables on every Ray pod."""
