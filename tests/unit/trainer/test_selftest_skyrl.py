"""The self-test's GPU path: the tiny job it hands to SkyRL is accepted by SkyRL's own config classes and
`validate_cfg` (the real SkyRL 0.3.0 code), so the first GPU self-test does not die on its own settings."""

from __future__ import annotations

import json
from pathlib import Path

from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.selftest import tiny_config
from tests.support.skyrl import last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import _VALIDATE


def tiny_overrides(tmp_path: Path, steps: int) -> dict:
    cfg = tiny_config(tmp_path, tmp_path / "tiny-qwen3-vl", "skyrl", steps)
    return skyrl_overrides(cfg, train_files=[str(tmp_path / "train.parquet")], val_files=[])


def test_our_overrides_for_the_tiny_skyrl_job_ask_for_one_gpu_and_a_checkpoint_every_step(tmp_path: Path) -> None:
    o = tiny_overrides(tmp_path, 2)
    assert (o["trainer.placement.policy_num_nodes"], o["trainer.placement.policy_num_gpus_per_node"]) == (1, 1)
    assert o["generator.inference_engine.num_engines"] == 1
    assert (o["trainer.ckpt_interval"], o["trainer.max_training_steps"], o["trainer.resume_mode"]) == (1, 2, "latest")
    assert o["trainer.ckpt_path"] == str(tmp_path / "selftest-job")


def test_skyrl_validates_the_selftests_tiny_job(tmp_path: Path) -> None:
    got = last_json(run_skyrl(_VALIDATE, stdin=json.dumps(tiny_overrides(tmp_path, 2))))
    assert (got["lora_rank"], got["n"], got["engines"], got["vlm"]) == (8, 2, 1, True)
