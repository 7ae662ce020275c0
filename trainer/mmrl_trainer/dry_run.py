"""`python -m mmrl_trainer --config FILE --dry-run`: what this attempt would run, printed without starting anything.

For a user debugging a job (and for tests) the text shows exactly what the backend would be handed: SkyRL's settings
one `key=value` a line, sorted, from the same `skyrl_overrides` the run uses (values that are not strings as JSON),
or the local backend's TRL and LoRA arguments; the paths; the world size; the expected checkpoint footprint. Nothing
is read but the config: the data files are named where the run would write them, the model by its configured name
(an s3:// or revision-pinned model is staged at run time: the dry run says where).
"""

from __future__ import annotations

import json
from typing import Any

from mmrl_api.footprint import footprint_of
from mmrl_api.trainer_config import TrainerConfig


def _lines(settings: dict[str, Any]) -> list[str]:
    return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(settings.items())]


def _footprint(cfg: TrainerConfig) -> str:
    found = footprint_of(cfg)
    return found.describe() if found else f"unknown (no parameter count for {cfg.model.name})"


def _skyrl(cfg: TrainerConfig) -> list[str]:
    from mmrl_api.context_budget import turns_of
    from mmrl_trainer.backends.skyrl_config import skyrl_environment, skyrl_overrides, skyrl_paths
    from mmrl_trainer.staging import MODELS_DIR, needs_staging, source_of

    paths = skyrl_paths(cfg)
    val = [f"{paths.data}/validation.parquet"] if cfg.dataset.validation else []
    overrides = skyrl_overrides(cfg, train_files=[f"{paths.data}/train.parquet"], val_files=val)
    place, algo = cfg.placement, cfg.algorithm
    engine = overrides["generator.inference_engine.engine_init_kwargs"]
    turns = turns_of(cfg.dataset.environment)
    staging = []
    if needs_staging(cfg.model):  # the policy path above is then replaced by the staged copy at run time
        staging = [
            f"model staging: {source_of(cfg.model)} -> {cfg.checkpoint.dir.rstrip('/')}/{MODELS_DIR}/ (once per job)"
        ]
    return [
        *staging,
        f"world size: {place.world_size} GPUs ({place.num_nodes} node(s) x {max(1, place.gpus_per_node)})",
        f"checkpoint dir: {paths.checkpoint}",
        f"export dir: {paths.export}",
        f"data dir: {paths.data}",
        f"lora sync path: {paths.lora_sync}",
        f"log dir: {paths.logs}",
        f"expected checkpoint footprint: {_footprint(cfg)}",
        f"vLLM engine max_model_len: {engine['max_model_len']} tokens ({turns} turn(s) x "
        f"({algo.max_prompt_length} prompt + {algo.max_response_length} response))",
        "environment:",
        *_lines(skyrl_environment(cfg)),
        f"skyrl overrides ({len(overrides)}):",
        *_lines(overrides),
    ]


def _local(cfg: TrainerConfig) -> list[str]:
    from mmrl_trainer.backends.local import STAGING, grpo_kwargs
    from mmrl_trainer.backends.local_episodes import check_local_environment, loop_arguments

    check_local_environment(cfg)
    staging = f"{cfg.checkpoint.dir.rstrip('/')}/{STAGING}"
    use_cpu = cfg.placement.gpus_per_node == 0
    lora = {
        "r": cfg.lora.rank,
        "lora_alpha": cfg.lora.alpha,
        "lora_dropout": cfg.lora.dropout,
        "target_modules": list(cfg.lora.target_modules),
    }
    return [
        f"world size: 1 process ({'CPU' if use_cpu else 'one GPU'})",
        f"checkpoint dir: {cfg.checkpoint.dir}",
        f"export dir: {cfg.export_dir}",
        f"data: {cfg.dataset.train} (validation: {cfg.dataset.validation or 'none'}), read directly",
        "lora sync path: none (one process trains and generates)",
        "log dir: none (stdout)",
        f"expected checkpoint footprint: {_footprint(cfg)}",
        *(
            ["episode loop arguments (backends/local_episodes.py):", *_lines(loop_arguments(cfg))]
            if cfg.dataset.environment is not None
            else ["trl arguments:", *_lines(grpo_kwargs(cfg, staging, use_cpu=use_cpu))]
        ),
        "lora arguments:",
        *_lines(lora),
    ]


def describe(cfg: TrainerConfig, *, attempt: int = 1) -> str:
    """The dry run's text; raises ValueError (naming the spec field) where the run would refuse the config."""
    head = [
        f"backend: {cfg.backend}",
        f"job: {cfg.job.namespace}/{cfg.job.name} attempt {attempt}, resume {cfg.resume}",
        f"model: {cfg.model.name}" + (f" @ {cfg.model.revision}" if cfg.model.revision else ""),
    ]
    return "\n".join(head + (_skyrl(cfg) if cfg.backend == "skyrl" else _local(cfg)) + _memory(cfg))


def _memory(cfg: TrainerConfig) -> list[str]:
    """The GPU memory plan the run checks before any engine starts (a local or cached config.json, else the
    reference table)."""
    from mmrl_trainer.memory_check import plan_memory

    plan, source = plan_memory(cfg)
    if plan is None:
        return [f"GPU memory plan: none ({source})"]
    return [f"model shape from: {source}", *plan.lines()]
