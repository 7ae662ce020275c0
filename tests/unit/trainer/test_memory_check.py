"""The trainer's memory check before any engine starts: the entrypoint exits 2 (InvalidConfig) with the numbers when
the job cannot fit its workers' GPU, reading the model's shape from its own config.json when it has one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mmrl_api import MultimodalRLJob
from mmrl_api.contract import EXIT_BAD_CONFIG
from mmrl_api.trainer_config import Placement, TrainerConfig
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_trainer.__main__ import main
from mmrl_trainer.memory_check import check_memory
from tests.support.architectures import hf_config
from tests.support.corpus import example


def maze_config(tmp_path: Path, util: float, model: str | None = None) -> TrainerConfig:
    doc = copy.deepcopy(example("visgym-maze.yaml"))
    doc["spec"]["algorithm"]["rolloutGpuMemoryUtilization"] = util
    cfg = build_trainer_config(MultimodalRLJob.model_validate(doc))
    changes: dict = {"checkpoint": cfg.checkpoint.model_copy(update={"dir": str(tmp_path / "job")})}
    if model:
        changes["model"] = cfg.model.model_copy(update={"name": model})
    return cfg.model_copy(update=changes)


def run(cfg: TrainerConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "config.json"
    path.write_text(cfg.to_json())
    code = main(["--config", str(path)])
    return code, capsys.readouterr().err


def test_engines_that_cannot_hold_one_episode_stop_the_attempt_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(maze_config(tmp_path, 0.2), tmp_path, capsys)
    assert code == EXIT_BAD_CONFIG
    last = err.strip().splitlines()[-1]
    assert last.startswith("mmrl-trainer error: GPU memory plan (model shape from the reference table)")
    assert "spec.algorithm.rolloutGpuMemoryUtilization" in last and "max_model_len 19,200" in last
    assert " tokens (0.6 GiB)" in last  # what the KV cache would hold, next to what one episode needs


def test_the_models_own_config_json_decides_the_shape(tmp_path: Path) -> None:
    """A fine-tuned copy under a name the table does not know: its config.json says it is 8B-shaped."""
    from mmrl_api.architecture import REFERENCE_MODELS
    from mmrl_trainer.errors import InvalidConfig

    model = tmp_path / "models" / "my-maze-sft"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(hf_config(REFERENCE_MODELS["qwen3-vl-8b"])))
    with pytest.raises(InvalidConfig, match=f"model shape from {model / 'config.json'}"):
        check_memory(maze_config(tmp_path, 0.2, str(model)))
    assert check_memory(maze_config(tmp_path, 0.45, str(model))) is not None  # the walkthrough's share fits


def test_no_known_gpu_means_no_check(tmp_path: Path) -> None:
    cfg = maze_config(tmp_path, 0.2)
    assert check_memory(cfg.model_copy(update={"placement": Placement(num_nodes=3, gpus_per_node=2)})) is None


def test_the_local_backend_runs_torch_with_expandable_segments_unless_told_otherwise() -> None:
    from mmrl_trainer.__main__ import allocator_env

    assert allocator_env("local", {}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert allocator_env("local", {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}) == {}
    assert allocator_env("skyrl", {}) == {}  # SkyRL switches it on in its workers after loading the weights


def test_the_dry_run_prints_the_plan_the_run_would_check(tmp_path: Path) -> None:
    from mmrl_trainer.dry_run import describe

    fits = describe(maze_config(tmp_path, 0.45))
    assert "GPU memory plan, per GPU (NVIDIA RTX PRO 6000" in fits and "max_model_len 19,200" in fits
    assert "peak" in fits and ": fits" in fits
    tight = describe(maze_config(tmp_path, 0.2))
    assert "does NOT fit" in tight and "! spec.algorithm.rolloutGpuMemoryUtilization" in tight
