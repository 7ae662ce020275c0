"""Resume only with the world size the checkpoint was saved with.

SkyRL's FSDP strategy saves one shard per rank, named for the world size (`model_world_size_{W}_rank_{r}.pt`), and
on resume every rank opens the file for the current world size (skyrl 0.3.0,
backends/skyrl_train/distributed/fsdp_strategy.py: FSDPStrategy.save_checkpoint / load_checkpoint). With another GPU
count the files are not there and the attempt dies after minutes of Ray, model and vLLM start-up, again on every
retry. SkyRL records the world size with each step itself: rank 0 writes `global_step_N/policy/fsdp_config.json`
(`{"fsdp_strategy", "world_size"}`) in the same save, and the shard names repeat it. So the trainer reads that
record of the step SkyRL will resume from (the one `latest_ckpt_global_step.txt` names, as
RayPPOTrainer.load_checkpoints reads it) before anything starts, and fails with InvalidConfig naming both sizes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import storage
from mmrl_trainer.checkpoint import MARKER, STEP_PREFIX
from mmrl_trainer.errors import InvalidConfig

FSDP_CONFIG = "fsdp_config.json"
_SHARD = re.compile(r"^model_world_size_(\d+)_rank_\d+\.pt$")


@dataclass(frozen=True)
class SavedCheckpoint:
    step: int
    path: str
    world_size: int | None
    """None when the step records none (not an FSDP save): nothing to compare."""


def saved_world_size(policy_dir: str) -> int | None:
    """The world size a SkyRL policy checkpoint was saved with: its fsdp_config.json, else its shard names."""
    text = storage.read_text(storage.join(policy_dir, FSDP_CONFIG))
    if text is not None:
        try:
            return int(json.loads(text)["world_size"])
        except (ValueError, KeyError, TypeError):
            pass
    sizes = {int(m.group(1)) for name in storage.file_names(policy_dir) if (m := _SHARD.match(name))}
    return sizes.pop() if len(sizes) == 1 else None


def checkpoint_to_resume(checkpoint_dir: str) -> SavedCheckpoint | None:
    """The step SkyRL's `resume_mode: latest` loads (the marker's), with its world size; None without a marker."""
    marker = storage.read_text(storage.join(checkpoint_dir, MARKER))
    try:
        step = int((marker or "").strip())
    except ValueError:
        return None
    path = storage.join(checkpoint_dir, f"{STEP_PREFIX}{step}")
    return SavedCheckpoint(step, path, saved_world_size(storage.join(path, "policy")))


def world_size_error(saved: SavedCheckpoint | None, cfg: TrainerConfig) -> str | None:
    """Why this attempt cannot resume `saved`, or None when it can (or starts from scratch)."""
    if cfg.resume != "latest" or saved is None or saved.world_size is None:
        return None
    current = cfg.placement.world_size
    if current == saved.world_size:
        return None
    place = cfg.placement
    return (
        f"spec.cluster.workerGroups: this attempt has {current} GPUs ({place.num_nodes} nodes x "
        f"{max(1, place.gpus_per_node)} GPUs) but the checkpoint it resumes, {saved.path} (step {saved.step}), was "
        f"saved by {saved.world_size} GPUs; FSDP saves one shard per GPU, so resuming needs the same count: set the "
        f"worker groups back to {saved.world_size} GPUs in all, or start the job anew under a new name"
    )


def check_resume_world_size(cfg: TrainerConfig) -> SavedCheckpoint | None:
    """Raise InvalidConfig when the checkpoint to resume was saved with another GPU count; returns that checkpoint."""
    saved = checkpoint_to_resume(cfg.checkpoint.dir) if cfg.resume == "latest" else None
    if (message := world_size_error(saved, cfg)) is not None:
        raise InvalidConfig(message)
    return saved
