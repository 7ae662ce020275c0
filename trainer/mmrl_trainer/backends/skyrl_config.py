"""TrainerConfig → SkyRL's config, as a pure function (`skyrl_overrides`) and as SkyRL's own dataclasses.

`skyrl_overrides` is a pure function of the config and the materialised parquet paths, so the mapping is
unit-tested without SkyRL; where SkyRL is importable, tests also build SkyRL's config from it, which rejects unknown
keys. The settings reach SkyRL as structured values, never as `key=value` strings: SkyRL's CLI path parses each
value as YAML and resolves OmegaConf interpolations, so a spec string such as an S3 prefix containing
`${oc.env:AWS_SECRET_ACCESS_KEY}` would pull the trainer's environment into its config, and `#`, quotes, commas
or brackets would change the value.
"""

from __future__ import annotations

from typing import Any

from mmrl_api.adapter_rules import VISION_TOWER_MODULES
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.data import SKYRL_ENV_CLASS


def skyrl_overrides(
    cfg: TrainerConfig, *, train_files: list[str], val_files: list[str], model_path: str | None = None
) -> dict[str, Any]:
    """The dotted SkyRL settings for one attempt of this job (keys as documented by SkyRL's config), with Python
    values: lists are lists and strings are taken literally. `model_path` is the staged model (staging.py)."""
    algo, lora, place = cfg.algorithm, cfg.lora, cfg.placement
    gpus = place.num_nodes * max(1, place.gpus_per_node)
    model = model_path or cfg.model.name.removeprefix("hf://")
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
        "generator.inference_engine.num_engines": gpus,
        "generator.inference_engine.tensor_parallel_size": 1,
        # SkyRL's VLM mode: images travel as image_url parts; padding-free microbatches and batched
        # generation are not supported for multimodal inputs.
        "generator.vision_language_generator": True,
        "trainer.remove_microbatch_padding": False,
        "generator.batched": False,
        "environment.env_class": SKYRL_ENV_CLASS,
        "data.train_data": list(train_files),
        "data.val_data": list(val_files),
        "trainer.eval_interval": cfg.checkpoint.interval_steps if val_files else -1,
        "trainer.eval_before_train": bool(val_files),
        "trainer.ckpt_path": cfg.checkpoint.dir,
        "trainer.ckpt_interval": cfg.checkpoint.interval_steps,
        "trainer.max_ckpts_to_keep": cfg.checkpoint.keep,
        "trainer.resume_mode": "latest" if cfg.resume == "latest" else "none",
        "trainer.export_path": f"{cfg.checkpoint.dir.rstrip('/')}/exports",
        "trainer.hf_save_interval": -1,
        "trainer.seed": cfg.seed,
        "trainer.logger": "console",
        "trainer.project_name": "mmrl",
        "trainer.run_name": f"{cfg.job.namespace}-{cfg.job.name}",
    }
    if algo.max_steps is not None:
        out["trainer.max_training_steps"] = algo.max_steps
    return out


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
