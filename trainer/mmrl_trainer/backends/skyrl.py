"""The SkyRL backend at run time; the settings themselves come from `skyrl_config`.

`run` needs the trainer image (SkyRL, Ray, vLLM, GPUs): it converts the dataset to SkyRL's VLM rows, registers the
`mmrl_reward` environment inside the `@ray.remote` entry (env creation happens in that process) and runs
`BasePPOExp(cfg).run()`. Checkpoints (`global_step_N/` + marker) and resume are SkyRL's own; afterwards the final
LoRA adapter is copied to `export_dir` and checked for vLLM.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl_config import (
    build_skyrl_config,
    skyrl_environment,
    skyrl_overrides,
    skyrl_paths,
)
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress, experiment_class
from mmrl_trainer.data import SKYRL_ENV_CLASS

ENV_ENTRY_POINT = "mmrl_trainer.backends.skyrl_env:RewardEnv"


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
    os.environ.update(skyrl_environment(cfg))  # before skyrl is imported: it reads some variables at import
    import ray
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    # Before the slow part (data, Ray, model and engine start-up): the attempt and the step it resumes from.
    SkyRLProgress.from_config(cfg, attempt=attempt).started()
    data_dir = Path(skyrl_paths(cfg).data)  # what --dry-run prints
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
