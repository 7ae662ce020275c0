"""The SkyRL backend: TrainerConfig → SkyRL settings (pure), our rewards as a skyrl-gym env, then run.

`skyrl_overrides` is a pure function of the config and the materialised parquet paths, so the mapping is
unit-tested without SkyRL; where SkyRL is importable, tests also build SkyRL's config from it, which rejects unknown
keys. The settings reach SkyRL as structured values, never as `key=value` strings: SkyRL's CLI path parses each
value as YAML and resolves OmegaConf interpolations, so a spec string such as an S3 prefix containing
`${oc.env:AWS_SECRET_ACCESS_KEY}` would pull the trainer's environment into its config, and `#`, quotes, commas
or brackets would change the value. `run` needs the trainer image (SkyRL, Ray, vLLM, GPUs): it converts the dataset to
SkyRL's VLM rows, registers the `mmrl_reward` environment inside the `@ray.remote` entry (env creation happens in
that process) and runs `BasePPOExp(cfg).run()`. Checkpoints (`global_step_N/` + marker) and resume are SkyRL's
own; afterwards the final LoRA adapter is copied to `export_dir` and checked for vLLM.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mmrl_api.adapter_rules import VISION_TOWER_MODULES
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress, experiment_class
from mmrl_trainer.data import SKYRL_ENV_CLASS

ENV_ENTRY_POINT = "mmrl_trainer.backends.skyrl_env:RewardEnv"


def skyrl_overrides(cfg: TrainerConfig, *, train_files: list[str], val_files: list[str]) -> dict[str, Any]:
    """The dotted SkyRL settings for one attempt of this job (keys as documented by SkyRL's config), with Python
    values: lists are lists and strings are taken literally."""
    algo, lora, place = cfg.algorithm, cfg.lora, cfg.placement
    gpus = place.num_nodes * max(1, place.gpus_per_node)
    model = cfg.model.name.removeprefix("hf://")
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


def materialise_data(cfg: TrainerConfig, data_dir: Path) -> tuple[list[str], list[str]]:
    """Write SkyRL VLM parquet files for train/validation; returns their paths."""
    from mmrl_trainer.data import load_examples, to_skyrl_rows, write_parquet

    train = write_parquet(
        to_skyrl_rows(load_examples(cfg.dataset.train, cfg.dataset, seed=cfg.seed), data_source=cfg.dataset.train),
        data_dir / "train.parquet",
    )
    val: list[str] = []
    if cfg.dataset.validation:
        rows = to_skyrl_rows(
            load_examples(cfg.dataset.validation, cfg.dataset, seed=cfg.seed + 1), data_source=cfg.dataset.validation
        )
        val = [str(write_parquet(rows, data_dir / "validation.parquet"))]
    return [str(train)], val


def export_final_adapter(cfg: TrainerConfig) -> Path | None:
    """Copy the newest complete step's LoRA adapter to export_dir (local/mounted checkpoint dirs only)."""
    from mmrl_trainer.adapter import check_adapter_dir

    if cfg.checkpoint.dir.startswith("s3://"):
        return None  # SkyRL wrote it to S3; the operator checks the adapter where it lies
    latest = ckpt.latest_complete(cfg.checkpoint.dir)
    if latest is None:
        raise RuntimeError(f"no complete checkpoint under {cfg.checkpoint.dir} to export the adapter from")
    # SkyRL's FSDP strategy writes the PEFT adapter to global_step_N/policy/lora_adapter/.
    source = latest.path / "policy" / "lora_adapter"
    if not (source / "adapter_config.json").is_file():
        found = sorted(latest.path.rglob("adapter_config.json"))
        if not found:
            raise RuntimeError(f"{latest.path} has no LoRA adapter (adapter_config.json)")
        source = found[0].parent
    target = Path(cfg.export_dir)
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    # We know which model was trained; SkyRL may have recorded a resolved local path of it instead.
    cfg_file = target / "adapter_config.json"
    adapter_cfg = json.loads(cfg_file.read_text())
    adapter_cfg["base_model_name_or_path"] = cfg.model.name
    cfg_file.write_text(json.dumps(adapter_cfg, indent=2))
    check_adapter_dir(target, base_model=cfg.model.name)
    return target


def run(cfg: TrainerConfig, *, attempt: int | None = None) -> Path | None:  # pragma: no cover - needs the GPU image
    import ray
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    # Before the slow part (data, Ray, model and engine start-up): the attempt and the step it resumes from.
    SkyRLProgress.from_config(cfg, attempt=attempt).started()
    data_dir = Path("/tmp/mmrl-data") if cfg.checkpoint.dir.startswith("s3://") else Path(cfg.checkpoint.dir) / "data"
    train_files, val_files = materialise_data(cfg, data_dir)
    skyrl_cfg = build_skyrl_config(skyrl_overrides(cfg, train_files=train_files, val_files=val_files))
    validate_cfg(skyrl_cfg)
    reward = json.loads(cfg.dataset.reward.model_dump_json(by_alias=False))

    @ray.remote(num_cpus=1)
    def entry(skyrl_cfg) -> None:
        # Registration must happen in the process that builds the generator and its environments.
        import skyrl_gym

        skyrl_gym.envs.register(id=SKYRL_ENV_CLASS, entry_point=ENV_ENTRY_POINT, kwargs={"reward": reward})
        # Progress and heartbeats come from SkyRL's training loop, which runs in this process.
        experiment_class(SkyRLProgress.from_config(cfg, attempt=attempt))(skyrl_cfg).run()

    initialize_ray(skyrl_cfg)
    ray.get(entry.remote(skyrl_cfg))
    return export_final_adapter(cfg)
