"""vLLM itself (its argument parser, model config checks and multimodal processor, CPU builds) on what we hand it:
the rollout engines' `engine_init_kwargs` as SkyRL applies them, in vLLM 0.23 (SkyRL 0.3.0's), and the serving
Deployment's command line, in the vLLM the local demo serves with. Both get the trained context as max_model_len and
the trained pixel cap, which vLLM applies to a large image; a max_model_len over the model's own maximum is refused
by vLLM, which shows the value is read, not ignored. The model is the tiny offline Qwen3-VL (512 positions), so the
job's lengths are scaled down to fit it."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from mmrl_api import MultimodalRLJob
from mmrl_api.context_budget import engine_max_model_len
from mmrl_api.image_budget import image_budget
from mmrl_operator.core.builders.inference import build_deployment, default_adapter
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.corpus import example
from tests.support.skyrl import skyrl_python
from tests.support.vllm_check import serving_python, vllm_verdict

IMAGE_SIDE = 1024
PROMPT, RESPONSE, TURNS = 128, 32, 2
MAZE_LENGTH = engine_max_model_len(1024, 256, 15)  # examples/visgym-maze.yaml: over the tiny model's 512


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_vlm()


def small_maze(model: Path) -> MultimodalRLJob:
    patch = {
        "spec": {
            "model": {"name": str(model)},
            "algorithm": {"maxPromptLength": PROMPT, "maxResponseLength": RESPONSE},
            "dataset": {"environment": {"maxTurns": TURNS}},
            "inference": {"maxModelLen": None, "gpus": 0},
        }
    }
    return MultimodalRLJob.model_validate(merge_patch(example("visgym-maze.yaml"), patch))


def tokens_for(model: Path, processor_kwargs: dict | None) -> int:
    """What the model's own HF image processor makes of the test image, with or without the cap."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model).image_processor
    image = Image.new("RGB", (IMAGE_SIDE, IMAGE_SIDE), (200, 30, 30))
    t, h, w = (int(x) for x in processor(images=[image], **(processor_kwargs or {}))["image_grid_thw"][0])
    return t * h * w // processor.merge_size**2


def test_vllm_023_builds_skyrls_engines_with_our_max_model_len_and_pixel_cap(tiny: Path) -> None:
    cfg = build_trainer_config(small_maze(tiny))
    overrides = skyrl_overrides(cfg, train_files=["/shared/train.parquet"], val_files=[])
    engine = overrides["generator.inference_engine.engine_init_kwargs"]
    assert engine["max_model_len"] == TURNS * (PROMPT + RESPONSE)
    request = {"model": str(tiny), "engine_kwargs": engine, "image_side": IMAGE_SIDE, "too_long": MAZE_LENGTH}
    got = vllm_verdict(skyrl_python(), request)  # SkyRL's venv holds the engines' vLLM, as the image does
    assert got["max_model_len"] == TURNS * (PROMPT + RESPONSE)
    assert got["mm_processor_kwargs"] == engine["mm_processor_kwargs"]
    capped = tokens_for(tiny, engine["mm_processor_kwargs"])
    assert got["image_tokens"] == capped != tokens_for(tiny, None)
    assert got["too_long"] is not None and str(MAZE_LENGTH) in got["too_long"]


def test_vllm_serves_with_the_deployments_trained_length_and_pixel_cap(tiny: Path) -> None:
    job = small_maze(tiny)
    (server,) = build_deployment(job, default_adapter(job))["spec"]["template"]["spec"]["containers"]
    cap = image_budget(PROMPT).processor_kwargs()
    request = {"argv": server["args"], "image_side": IMAGE_SIDE, "too_long": MAZE_LENGTH}
    got = vllm_verdict(serving_python(), request)
    assert got["max_model_len"] == TURNS * (PROMPT + RESPONSE)
    assert got["mm_processor_kwargs"] == cap
    assert got["image_tokens"] == tokens_for(tiny, cap) != tokens_for(tiny, None)
    assert got["too_long"] is not None and str(MAZE_LENGTH) in got["too_long"]
