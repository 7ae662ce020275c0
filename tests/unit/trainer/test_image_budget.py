"""Images count toward the prompt: with the processor settings the SkyRL mapping gives vLLM, a prompt's largest image
fits its token budget, measured with the real Qwen3-VL processor classes (Qwen3-VL-8B's image settings, the tiny
offline tokenizer)."""

from __future__ import annotations

import pytest
from PIL import Image

from mmrl_api.image_budget import QWEN3_VL_MERGE_SIZE, QWEN3_VL_MIN_PIXELS, QWEN3_VL_PATCH_SIZE, image_budget
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from tests.unit.trainer.test_skyrl_overrides import TRAIN, VAL, reference_overrides

# (width, height): huge, wide, tall, tiny, thin and the usual camera sizes.
SIZES = [(5000, 3000), (2048, 2048), (6000, 400), (300, 5000), (20, 20), (3000, 20), (1920, 1080), (640, 480)]


def qwen3_vl_8b_processor():
    """Qwen3-VL-8B-Instruct's processor (preprocessor_config.json: size 65536..16777216 pixels, patch 16, merge 2)
    around the tiny offline tokenizer, so no download is needed."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    from mmrl_trainer.tiny import CHAT_TEMPLATE, build_tokenizer

    common = {"patch_size": QWEN3_VL_PATCH_SIZE, "temporal_patch_size": 2, "merge_size": QWEN3_VL_MERGE_SIZE}
    size = {"shortest_edge": QWEN3_VL_MIN_PIXELS, "longest_edge": 16777216}
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(**common, size=size),
        tokenizer=build_tokenizer(),
        video_processor=Qwen3VLVideoProcessor(**common),
        chat_template=CHAT_TEMPLATE,
    )


def prompt_tokens(processor, images: list[Image.Image], processor_kwargs: dict) -> int:
    """Tokens of a rendered prompt as vLLM renders it: chat template, then the processor with the engine's
    mm_processor_kwargs as call arguments (each image pad expanded to the image's merged patch count)."""
    content = [*({"type": "image"} for _ in images), {"type": "text", "text": "What colour is the image ?"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    out = processor(text=[text], images=images or None, return_tensors="np", **processor_kwargs)
    return int(out["input_ids"].shape[1])


@pytest.fixture(scope="module")
def processor():
    return qwen3_vl_8b_processor()


@pytest.mark.parametrize("images_per_prompt", [1, 2])
def test_largest_images_fit_the_reference_jobs_prompt_budget(processor, images_per_prompt: int) -> None:
    _, cfg = reference_overrides()
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL, images_per_prompt=images_per_prompt)
    budget = o["trainer.max_prompt_length"]
    kwargs = o["generator.inference_engine.engine_init_kwargs"]["mm_processor_kwargs"]
    text_only = prompt_tokens(processor, [], {})
    for w, h in SIZES:
        images = [Image.new("RGB", (w, h), "red")] * images_per_prompt
        used = prompt_tokens(processor, images, kwargs)
        assert used <= budget, (w, h, used)
        assert used - text_only <= budget // 2  # the images take at most half: the text keeps the rest


def test_without_the_cap_one_large_image_overflows_the_budget(processor) -> None:
    o, _ = reference_overrides()
    assert prompt_tokens(processor, [Image.new("RGB", (1920, 1080))], {}) > o["trainer.max_prompt_length"]


@pytest.mark.parametrize("budget", [416, 1024, 8192])
def test_the_cap_holds_for_any_budget_of_200_image_tokens_or_more(processor, budget: int) -> None:
    cap = image_budget(budget)
    for w, h in SIZES:
        grid = processor.image_processor(images=[Image.new("RGB", (w, h))], **cap.processor_kwargs())["image_grid_thw"]
        tokens = int(grid.prod()) // QWEN3_VL_MERGE_SIZE**2
        assert tokens <= cap.tokens_per_image, (budget, w, h, tokens)


def test_a_prompt_has_at_least_one_image() -> None:
    with pytest.raises(ValueError, match="images_per_prompt 0"):
        image_budget(1024, 0)
