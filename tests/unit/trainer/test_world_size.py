"""An attempt resumes only with the GPU count its checkpoint was saved with (FSDP saves one shard per rank); any
other count fails at once with InvalidConfig naming both sizes, before Ray or SkyRL start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmrl_api.contract import EXIT_BAD_CONFIG, last_error_line
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.errors import InvalidConfig
from mmrl_trainer.world_size import (
    SavedCheckpoint,
    check_resume_world_size,
    checkpoint_to_resume,
    world_size_error,
)
from tests.unit.trainer.skyrl_job import ROOT, skyrl_config, skyrl_config_file


def skyrl_step(root: Path, step: int, world_size: int, *, fsdp_config: bool = True) -> Path:
    """A step laid out as SkyRL's FSDPStrategy.save_checkpoint writes it (shard names and fsdp_config.json); the
    layout is checked against SkyRL's own save in tests/skyrl/test_skyrl_lora_layout.py."""
    policy = root / f"global_step_{step}" / "policy"
    policy.mkdir(parents=True)
    for rank in range(world_size):
        for kind in ("model", "optim", "extra_state"):
            (policy / f"{kind}_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"")
    if fsdp_config:
        (policy / "fsdp_config.json").write_text(json.dumps({"fsdp_strategy": "fsdp", "world_size": world_size}))
    (root / "latest_ckpt_global_step.txt").write_text(str(step))
    return policy


def config(job_dir: Path, num_nodes: int, gpus_per_node: int, **top: object) -> TrainerConfig:
    return TrainerConfig.model_validate(
        skyrl_config(str(job_dir), num_nodes=num_nodes, gpus_per_node=gpus_per_node, **top)
    )


def test_same_gpu_count_resumes_and_another_names_both_sizes() -> None:
    saved = SavedCheckpoint(10, "/fsx/job/global_step_10", 16)
    assert world_size_error(saved, config(Path("/fsx/job"), 2, 8)) is None
    message = world_size_error(saved, config(Path("/fsx/job"), 1, 8))
    assert message is not None
    assert "8 GPUs (1 nodes x 8 GPUs)" in message and "saved by 16 GPUs" in message
    assert message.startswith("spec.cluster.workerGroups") and "global_step_10" in message


def test_no_checkpoint_no_record_or_no_resume_starts_with_any_size() -> None:
    assert world_size_error(None, config(Path("/j"), 1, 8)) is None
    assert world_size_error(SavedCheckpoint(5, "/j/global_step_5", None), config(Path("/j"), 1, 8)) is None
    fresh = config(Path("/j"), 1, 8, resume="none")
    assert world_size_error(SavedCheckpoint(5, "/j/global_step_5", 16), fresh) is None


def test_world_size_is_read_from_the_record_or_shard_names_of_a_step_in_skyrls_layout(tmp_path: Path) -> None:
    skyrl_step(tmp_path / "a", 5, 4)
    skyrl_step(tmp_path / "b", 7, 2, fsdp_config=False)
    assert checkpoint_to_resume(str(tmp_path / "a")) == SavedCheckpoint(5, str(tmp_path / "a/global_step_5"), 4)
    assert checkpoint_to_resume(str(tmp_path / "b")) == SavedCheckpoint(7, str(tmp_path / "b/global_step_7"), 2)
    assert checkpoint_to_resume(str(tmp_path / "none")) is None


def test_the_step_the_marker_names_is_checked_not_a_newer_half_written_one(tmp_path: Path) -> None:
    skyrl_step(tmp_path, 5, 8)
    (tmp_path / "global_step_10" / "policy").mkdir(parents=True)  # half-written save by another size
    (tmp_path / "global_step_10" / "policy" / "model_world_size_16_rank_0.pt").write_bytes(b"")
    assert check_resume_world_size(config(tmp_path, 1, 8)) == SavedCheckpoint(5, str(tmp_path / "global_step_5"), 8)
    with pytest.raises(InvalidConfig, match=r"16 GPUs .*saved by 8 GPUs"):
        check_resume_world_size(config(tmp_path, 2, 8))


def test_the_trainer_entrypoint_exits_2_when_the_gpu_count_changed(tmp_path: Path) -> None:
    skyrl_step(tmp_path / "job", 5, 8)
    cfg = skyrl_config_file(tmp_path, num_nodes=2, gpus_per_node=8)
    env = {"PYTHONPATH": f"{ROOT / 'api'}:{ROOT / 'trainer'}", "HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "mmrl_trainer", "--config", str(cfg), "--attempt", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == EXIT_BAD_CONFIG, run.stderr[-3000:]
    message = last_error_line(run.stderr) or ""
    assert "16 GPUs (2 nodes x 8 GPUs)" in message and "saved by 8 GPUs" in message
    assert not (tmp_path / "job" / "data").exists()  # failed before the data, Ray or SkyRL
