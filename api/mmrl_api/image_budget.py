"""How many tokens an image may take in a prompt, and the processor settings that hold it to that.

`spec.algorithm.maxPromptLength` is the token budget of a whole prompt, image tokens included. A Qwen3-VL image
becomes one token per (patch x merge)² pixels after resizing, up to 16,384 tokens by default, so one large image
can exceed the budget on its own; SkyRL then ends the rollout before generating (stop reason "length", reward 0).
The guarantee: the images of a prompt take at most half of the budget, so a prompt whose text fits in the other
half always fits. The cap is applied where the image is resized, by passing `size` to the HF image processor
(Qwen2VLImageProcessor: `shortest_edge`/`longest_edge` are pixel counts), which vLLM does with
`mm_processor_kwargs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Qwen3-VL's preprocessor_config.json: patch_size 16, merge_size 2, size.shortest_edge 65536 (64 tokens).
QWEN3_VL_PATCH_SIZE = 16
QWEN3_VL_MERGE_SIZE = 2
QWEN3_VL_MIN_PIXELS = 65536
IMAGE_SHARE_OF_PROMPT = 0.5
# Qwen3-VL's chat template wraps each image's tokens in <|vision_start|> ... <|vision_end|>.
IMAGE_WRAPPER_TOKENS = 2


@dataclass(frozen=True)
class ImageBudget:
    tokens_per_image: int
    max_pixels: int
    min_pixels: int

    def processor_kwargs(self) -> dict[str, Any]:
        """The image processor's call arguments that enforce the budget (vLLM's `mm_processor_kwargs`)."""
        return {"size": {"longest_edge": self.max_pixels, "shortest_edge": self.min_pixels}}


def pixel_cap_kwargs(max_pixels: int) -> dict[str, Any]:
    """The processor arguments that resize every image under `max_pixels` (a ModelServer's `maxImagePixels`), with
    the smallest side kept as `image_budget` keeps it: at most a quarter of the cap."""
    return {"size": {"longest_edge": max_pixels, "shortest_edge": min_pixels(max_pixels)}}


def min_pixels(max_pixels: int, patch_size: int = QWEN3_VL_PATCH_SIZE, merge_size: int = QWEN3_VL_MERGE_SIZE) -> int:
    pixels_per_token = (patch_size * merge_size) ** 2
    return max(pixels_per_token, min(QWEN3_VL_MIN_PIXELS, max_pixels // 4))


def image_budget(
    max_prompt_length: int,
    images_per_prompt: int = 1,
    *,
    patch_size: int = QWEN3_VL_PATCH_SIZE,
    merge_size: int = QWEN3_VL_MERGE_SIZE,
) -> ImageBudget:
    """The per-image token cap for a prompt budget, and the pixel bounds that give it.

    Each image may use `share - IMAGE_WRAPPER_TOKENS` tokens, so with its wrapper it takes at most its share.
    The processor rounds each side to a multiple of patch x merge and scales down while the area is above
    max_pixels, so tokens ≤ max_pixels / (patch x merge)². It scales small images up to min_pixels (rounding up),
    so min_pixels is kept at a quarter of max_pixels or less to leave that rounding room below the cap. A side is
    never under one patch x merge, so an image of aspect ratio r can take about sqrt(r x cap) tokens: the cap holds
    for every image the processor accepts (r ≤ 200) once it is 200 tokens or more (maxPromptLength ≥ 404 per image).
    """
    if images_per_prompt < 1:
        raise ValueError(f"images_per_prompt {images_per_prompt}: a VLM prompt carries at least one image")
    share = int(max_prompt_length * IMAGE_SHARE_OF_PROMPT) // images_per_prompt
    tokens = max(1, share - IMAGE_WRAPPER_TOKENS)
    pixels_per_token = (patch_size * merge_size) ** 2
    max_pixels = tokens * pixels_per_token
    return ImageBudget(tokens, max_pixels, min_pixels(max_pixels, patch_size, merge_size))
