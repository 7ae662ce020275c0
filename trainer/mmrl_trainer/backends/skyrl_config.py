"""TrainerConfig → SkyRL's config, as a pure function (`skyrl_overrides`) and as SkyRL's own dataclasses.

`skyrl_overrides` is a pure function of the config and the materialised parquet paths, so the mapping is
unit-tested without SkyRL; where SkyRL is importable, tests also build SkyRL's config from it, which rejects unknown
keys. The settings reach SkyRL as structured values, never as `key=value` strings: SkyRL's CLI path parses each
value as YAML and resolves OmegaConf interpolations, so a spec string such as an S3 prefix containing
`${oc.env:AWS_SECRET_ACCESS_KEY}` would pull the trainer's environment into its config, and `#`, quotes, commas
or brackets would change the value.

Every SkyRL key, variable and behaviour relied on here is cited (file:function) against skyrl 0.3.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrl_api.adapter_rules import VISION_TOWER_MODULES, smallest_max_lora_rank
from mmrl_api.context_budget import spec_episode_context_length, spec_max_model_len, turns_of
from mmrl_api.image_budget import image_budget
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.data import skyrl_env_class

# skyrl/env_vars.py: SKYRL_RAY_PG_TIMEOUT_IN_S (default 180 s) bounds every placement-group wait
# (train/trainer.py, train/entrypoints/main_base.py:get_colocate_pg, inference_servers/setup.py). On HyperPod the
# workers of a fresh RayCluster may still be pulling the trainer image or waiting for Kueue when the driver starts.
RAY_PG_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class SkyRLPaths:
    """Where one attempt's files live. All but `data` and `lora_sync` of an s3:// job are on the checkpoint volume,
    which every Ray pod mounts at the same path."""

    checkpoint: str
    export: str
    data: str
    lora_sync: str
    logs: str


def _shared_dir(cfg: TrainerConfig) -> str | None:
    """The job directory when every Ray pod sees it as a file system; None for s3:// checkpoints."""
    return None if cfg.checkpoint.dir.startswith("s3://") else cfg.checkpoint.dir.rstrip("/")


def skyrl_paths(cfg: TrainerConfig) -> SkyRLPaths:
    """The paths of this job's SkyRL run.

    `lora_sync`: after each step policy rank 0 writes the adapter there and every vLLM engine loads it from there
    (backends/skyrl_train/workers/fsdp/fsdp_worker.py:_save_lora_adapters_and_sync); SkyRL's default
    /tmp/skyrl_lora_sync exists only on rank 0's node, so engines on other nodes fail. With s3:// checkpoints there
    is no shared file system (vLLM loads adapters from a local path, not S3), so a multi-node s3:// job is refused.
    `logs`: trainer.log_path; SkyRL points SKYRL_LOG_FILE at `<log_path>/infra-<time>.log` for every vLLM server and
    training worker (train/utils/utils.py:initialize_ray, train/utils/ray_logging.py:redirect_actor_output_to_file).
    """
    shared = _shared_dir(cfg)
    if shared is None:
        if cfg.placement.num_nodes > 1:
            raise ValueError(
                f"spec.checkpoint.s3: a LoRA job on {cfg.placement.num_nodes} nodes needs a file system every Ray "
                "pod shares (SkyRL's vLLM engines load each step's adapter from a path, not from S3); use "
                "spec.checkpoint.pvc (e.g. an FSx for Lustre claim) or one worker replica"
            )
        # The parquet goes to S3 next to the checkpoints; the entry task copies it to its own node
        # (skyrl.shared_data / localise_data). LoRA sync and logs stay on that one worker node.
        scratch = f"/tmp/mmrl/{cfg.job.namespace}/{cfg.job.name}"
        return SkyRLPaths(
            cfg.checkpoint.dir,
            cfg.export_dir,
            f"{cfg.checkpoint.dir.rstrip('/')}/data",
            f"{scratch}/lora_sync",
            f"{scratch}/logs",
        )
    return SkyRLPaths(cfg.checkpoint.dir, cfg.export_dir, f"{shared}/data", f"{shared}/lora_sync", f"{shared}/logs")


def skyrl_environment(cfg: TrainerConfig) -> dict[str, str]:
    """Environment variables the SkyRL run needs, set in the RayJob driver before `initialize_ray`.

    SKYRL_RAY_PG_TIMEOUT_IN_S is read when skyrl.env_vars is imported, in the `skyrl_entrypoint` Ray task and the
    actors it starts, not in the driver; SkyRL forwards it from the driver's environment to every Ray worker through
    the job's runtime_env (train/utils/utils.py:prepare_runtime_environment), which is how it reaches them.
    """
    del cfg  # the same for every job today; kept so a job-dependent value has one home
    return {"SKYRL_RAY_PG_TIMEOUT_IN_S": str(RAY_PG_TIMEOUT_SECONDS)}


def skyrl_overrides(
    cfg: TrainerConfig,
    *,
    train_files: list[str],
    val_files: list[str],
    model_path: str | None = None,
    images_per_prompt: int = 1,
    eval_before_train: bool = True,
) -> dict[str, Any]:
    """The dotted SkyRL settings for one attempt of this job (keys as documented by SkyRL's config), with Python
    values: lists are lists and strings are taken literally.

    `model_path`: where the base model was staged (an s3:// model or a pinned revision, copied to a local path);
    SkyRL loads policy, ref and vLLM from it. `images_per_prompt`: the most images one prompt of the data carries,
    for the image token budget. `eval_before_train`: whether this attempt evaluates the base model first
    (lineage.baseline_due: a fresh start whose job has no such evaluation yet); SkyRL runs it after loading the
    checkpoint on every attempt otherwise (train/trainer.py:RayPPOTrainer.train)."""
    algo, lora, place = cfg.algorithm, cfg.lora, cfg.placement
    model = model_path or cfg.model.name.removeprefix("hf://")
    paths = skyrl_paths(cfg)
    budget = image_budget(algo.max_prompt_length, images_per_prompt)
    out: dict[str, Any] = {
        "trainer.algorithm.advantage_estimator": "grpo",
        "trainer.algorithm.use_kl_loss": algo.kl_coef > 0,
        "trainer.algorithm.kl_loss_coef": algo.kl_coef,
        "trainer.algorithm.eps_clip_low": algo.clip_eps_low,
        "trainer.algorithm.eps_clip_high": algo.clip_eps_high,
        "trainer.algorithm.loss_reduction": "token_mean",
        "trainer.policy.model.path": model,
        "trainer.ref.model.path": model,
        "trainer.policy.model.lora.rank": lora.rank,
        "trainer.policy.model.lora.alpha": lora.alpha,
        "trainer.policy.model.lora.dropout": lora.dropout,
        "trainer.policy.model.lora.target_modules": list(lora.target_modules),
        "trainer.policy.model.lora.exclude_modules": VISION_TOWER_MODULES,
        "trainer.policy.model.lora.lora_sync_path": paths.lora_sync,
        "trainer.policy.optimizer_config.lr": algo.learning_rate,
        "trainer.train_batch_size": algo.train_batch_size,
        "trainer.policy_mini_batch_size": algo.mini_batch_size,
        "trainer.micro_train_batch_size_per_gpu": algo.micro_batch_size_per_gpu,
        "trainer.micro_forward_batch_size_per_gpu": algo.micro_batch_size_per_gpu,
        "trainer.epochs": algo.epochs,
        "trainer.max_prompt_length": algo.max_prompt_length,
        "generator.n_samples_per_prompt": algo.samples_per_prompt,
        "generator.sampling_params.max_generate_length": algo.max_response_length,
        "generator.sampling_params.temperature": algo.temperature,
        "trainer.strategy": "fsdp",
        "trainer.placement.colocate_all": True,
        "trainer.placement.policy_num_nodes": place.num_nodes,
        "trainer.placement.policy_num_gpus_per_node": max(1, place.gpus_per_node),
        "trainer.placement.ref_num_nodes": place.num_nodes,
        "trainer.placement.ref_num_gpus_per_node": max(1, place.gpus_per_node),
        # One vLLM engine per GPU: an 8B model fits one GPU, and more engines means more rollout throughput.
        "generator.inference_engine.backend": "vllm",
        "generator.inference_engine.num_engines": place.world_size,
        "generator.inference_engine.tensor_parallel_size": 1,
        # train/config/config.py:InferenceEngineConfig.gpu_memory_utilization, passed to every vLLM engine
        # (backends/skyrl_train/inference_servers/utils.py:build_vllm_cli_args).
        "generator.inference_engine.gpu_memory_utilization": algo.rollout_gpu_memory_utilization,
        # SkyRL sets vLLM's max_lora_rank to the LoRA rank and then applies engine_init_kwargs over its args
        # (backends/skyrl_train/inference_servers/utils.py:build_vllm_cli_args), but vLLM accepts only a few
        # values, so rank 24 would not start. mm_processor_kwargs caps the pixels per image: vLLM renders the
        # prompt, images included, and SkyRL ends a rollout whose rendered prompt is over max_prompt_length
        # (train/generators/skyrl_vlm_generator.py:agent_loop, stop_reason "length", reward 0). max_model_len: SkyRL
        # sets none, so vLLM would take the model's own maximum (262,144 for Qwen3-VL-8B) and refuse to start when
        # its KV cache cannot hold one such request (vllm v1/core/kv_cache_utils.py); the episode's longest input
        # plus one reply is all an engine is ever asked to hold (mmrl_api.context_budget).
        "generator.inference_engine.engine_init_kwargs": {
            "max_lora_rank": smallest_max_lora_rank(lora.rank),
            "mm_processor_kwargs": budget.processor_kwargs(),
            "max_model_len": spec_max_model_len(cfg.algorithm, cfg.dataset.environment),
        },
        # SkyRL's VLM mode: images travel as image_url parts; padding-free microbatches and batched
        # generation are not supported for multimodal inputs.
        "generator.vision_language_generator": True,
        "trainer.remove_microbatch_padding": False,
        "generator.batched": False,
        "environment.env_class": skyrl_env_class(cfg.dataset),
        **multi_turn_overrides(cfg),
        "data.train_data": list(train_files),
        "data.val_data": list(val_files),
        "trainer.eval_interval": (algo.eval_interval_steps or cfg.checkpoint.interval_steps) if val_files else -1,
        "trainer.eval_before_train": bool(val_files) and eval_before_train,
        "trainer.ckpt_path": cfg.checkpoint.dir,
        "trainer.ckpt_interval": cfg.checkpoint.interval_steps,
        "trainer.max_ckpts_to_keep": cfg.checkpoint.keep,
        "trainer.resume_mode": "latest" if cfg.resume == "latest" else "none",
        "trainer.export_path": f"{cfg.checkpoint.dir.rstrip('/')}/exports",
        # train/trainer.py: save_models writes export_path/global_step_N/policy every hf_save_interval steps and at
        # the end when it is positive; -1 writes nothing (mmrl exports the adapter from the last checkpoint).
        "trainer.hf_save_interval": cfg.checkpoint.hf_save_interval_steps or -1,
        "trainer.seed": cfg.seed,
        "trainer.logger": "console",
        # An example rollout every step is a base64 image in the driver log (train/trainer.py); 0 turns it off
        # (train/config/config.py:TrainerConfig.print_example_interval).
        "trainer.print_example_interval": 0,
        "trainer.log_path": paths.logs,
        "trainer.project_name": "mmrl",
        "trainer.run_name": f"{cfg.job.namespace}-{cfg.job.name}",
    }
    if algo.max_steps is not None:
        out["trainer.max_training_steps"] = algo.max_steps
    return out


def episode_context_length(cfg: TrainerConfig) -> int:
    """The longest conversation an episode may render (mmrl_api.context_budget.episode_context_length): SkyRL's
    generator.max_input_length. For one turn it is maxPromptLength, which SkyRL requires then."""
    return spec_episode_context_length(cfg.algorithm, cfg.dataset.environment)


def multi_turn_overrides(cfg: TrainerConfig) -> dict[str, Any]:
    """SkyRL's multi-turn generation settings (train/config/config.py:GeneratorConfig).

    max_turns: SkyRL hands it to each environment as extras["max_turns"]; the VLM generator's loop itself ends on the
    environment's `done` (train/generators/skyrl_vlm_generator.py:SkyRLVLMGymGenerator.agent_loop), so the episode
    enforces maxTurns too. max_input_length: the loop ends an episode whose rendered conversation is longer
    ("length"); utils.py:validate_generator_cfg requires it equal to trainer.max_prompt_length for one turn and at
    least that otherwise. use_conversation_multi_turn: each observation a user message of its own, which the VLM
    generator requires (SkyRLVLMGymGenerator._validate_cfg) so that images stay in their turn.
    """
    return {
        "generator.max_turns": turns_of(cfg.dataset.environment),
        "generator.max_input_length": episode_context_length(cfg),
        "generator.use_conversation_multi_turn": True,
    }


def skyrl_config_dict(overrides: dict[str, Any]) -> dict[str, Any]:
    """The dotted settings as the nested dict SkyRL's config dataclasses are built from."""
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def build_skyrl_config(overrides: dict[str, Any]) -> Any:
    """SkyRL's own config object from our settings, without its CLI parser.

    `SkyRLTrainConfig.from_cli_overrides` (skyrl 0.3.0) turns even a dict into `key=value` strings for
    `OmegaConf.from_cli` and then resolves interpolations (`from_dict_config`). `build_nested_dataclass` is the step
    that follows in SkyRL: the same dataclasses, defaults and unknown-key check, with our values as they are.
    """
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.config.config import build_nested_dataclass

    return build_nested_dataclass(SkyRLTrainConfig, skyrl_config_dict(overrides))
