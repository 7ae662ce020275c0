"""Fixtures for the CPU trainer tests: the cached tiny Qwen3-VL and a TrainerConfig factory for the colour task."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MMRL_TORCH_THREADS", "1")

from mmrl_api.trainer_config import TrainerConfig

# The demo-task recipe the tests train with: 4 prompts x 4 samples per step, a rank-8 LoRA, no modules_to_save.
TRAIN_URI = "synthetic://colors?n=256&seed=1"
HELD_OUT_URI = "synthetic://colors?n=64&seed=2"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from mmrl_trainer.tiny import build_tiny_vlm

    return build_tiny_vlm()


def make_config(job_dir: Path, model: Path, **algorithm: Any) -> TrainerConfig:
    seed = algorithm.pop("seed", 0)
    interval = algorithm.pop("interval", 100)
    return TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "default", "name": "tiny"},
            "model": {"name": str(model)},
            "lora": {"rank": 8, "alpha": 16},
            "algorithm": {
                "samplesPerPrompt": 4,
                "learningRate": 3e-3,
                "trainBatchSize": 4,
                "miniBatchSize": 4,
                "maxSteps": 20,
                "maxResponseLength": 6,
                "maxPromptLength": 64,
                **algorithm,
            },
            "dataset": {"train": TRAIN_URI, "validation": HELD_OUT_URI},
            "checkpoint": {"dir": str(job_dir), "interval_steps": interval, "keep": 3},
            "export_dir": str(job_dir / "adapter"),
            "progress": {"enabled": False},
            "seed": seed,
        }
    )
