"""A Qwen3-VL model's sizes that decide its GPU memory: parameters, the LoRA's share, and KV cache per token.

Two sources: a built-in table of the reference models (their `config.json` values, vision and text), so `mmrl
validate` can plan without a download; and a `config.json` itself (`from_hf_config`), which the trainer reads
before any engine starts. Parameter counts are computed from the shapes the way transformers' Qwen3-VL modules
lay them out (a test counts transformers' own modules on the meta device against them, and the table's totals
against the published safetensors sizes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

BF16_BYTES = 2


@dataclass(frozen=True)
class VisionShape:
    depth: int
    hidden: int
    intermediate: int
    out_hidden: int
    patch: int = 16
    temporal_patch: int = 2
    merge: int = 2
    position_embeddings: int = 2304
    deepstack_layers: int = 3
    channels: int = 3

    @property
    def params(self) -> int:
        h, i, merged = self.hidden, self.intermediate, self.hidden * self.merge**2
        block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)  # 2 LayerNorms, qkv, proj, MLP
        merger = (merged * merged + merged) + (merged * self.out_hidden + self.out_hidden)
        patch_embed = self.channels * self.temporal_patch * self.patch**2 * h + h
        return (
            patch_embed
            + self.position_embeddings * h
            + self.depth * block
            + (2 * h + merger)  # the final merger normalises each patch (hidden wide)
            + self.deepstack_layers * (2 * merged + merger)  # deepstack mergers normalise after the shuffle
        )


@dataclass(frozen=True)
class Architecture:
    """The language model's shape (what sizes KV cache, activations and a LoRA) and the vision tower's."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    max_positions: int
    vision: VisionShape | None

    @property
    def q_out(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_out(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h = self.hidden
        attention = h * self.q_out + 2 * h * self.kv_out + self.q_out * h + 2 * self.head_dim  # + q/k norms
        return attention + 3 * h * self.intermediate + 2 * h

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        text = embeddings + self.layers * self.layer_params + self.hidden
        return text + (self.vision.params if self.vision else 0)

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """A LoRA's parameters on the language model (the vision tower is never adapted: see adapter_rules)."""
        h, i = self.hidden, self.intermediate
        in_out = {
            "q_proj": (h, self.q_out),
            "k_proj": (h, self.kv_out),
            "v_proj": (h, self.kv_out),
            "o_proj": (self.q_out, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }
        chosen = in_out.values() if "all-linear" in targets else [in_out[t] for t in targets if t in in_out]
        return self.layers * rank * sum(a + b for a, b in chosen)

    def kv_bytes_per_token(self, dtype_bytes: int = BF16_BYTES) -> int:
        """K and V of every layer for one token (vLLM's full-attention page holds block_size of these)."""
        return self.layers * 2 * self.kv_out * dtype_bytes

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> Architecture:
        """From a Qwen3-VL `config.json` (text_config + vision_config), or a text-only one with the same keys."""
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        vision = config.get("vision_config")
        return cls(
            layers=int(text["num_hidden_layers"]),
            hidden=int(text["hidden_size"]),
            intermediate=int(text["intermediate_size"]),
            heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // heads),
            vocab=int(text["vocab_size"]),
            tied_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            max_positions=int(text.get("max_position_embeddings") or 0),
            vision=_vision_from_config(vision) if vision else None,
        )


def _vision_from_config(v: dict[str, Any]) -> VisionShape:
    return VisionShape(
        depth=int(v["depth"]),
        hidden=int(v["hidden_size"]),
        intermediate=int(v["intermediate_size"]),
        out_hidden=int(v["out_hidden_size"]),
        patch=int(v.get("patch_size", 16)),
        temporal_patch=int(v.get("temporal_patch_size", 2)),
        merge=int(v.get("spatial_merge_size", 2)),
        position_embeddings=int(v.get("num_position_embeddings", 2304)),
        deepstack_layers=len(v.get("deepstack_visual_indexes") or []),
        channels=int(v.get("in_channels", v.get("in_chans", 3))),
    )


# The reference models' config.json values (Qwen/Qwen3-VL-*-Instruct; the Thinking variants share them).
_SMALL_VISION = VisionShape(depth=24, hidden=1024, intermediate=4096, out_hidden=0)
_LARGE_VISION = VisionShape(depth=27, hidden=1152, intermediate=4304, out_hidden=0)
QWEN3_VL_MAX_POSITIONS = 262_144
QWEN3_VL_VOCAB = 151_936


def _qwen3_vl(layers: int, hidden: int, intermediate: int, heads: int, tied: bool, vision: VisionShape) -> Architecture:
    return Architecture(
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        heads=heads,
        kv_heads=8,
        head_dim=128,
        vocab=QWEN3_VL_VOCAB,
        tied_embeddings=tied,
        max_positions=QWEN3_VL_MAX_POSITIONS,
        vision=VisionShape(**{**vision.__dict__, "out_hidden": hidden}),
    )


REFERENCE_MODELS: dict[str, Architecture] = {
    "qwen3-vl-2b": _qwen3_vl(28, 2048, 6144, 16, True, _SMALL_VISION),
    "qwen3-vl-4b": _qwen3_vl(36, 2560, 9728, 32, True, _SMALL_VISION),
    "qwen3-vl-8b": _qwen3_vl(36, 4096, 12288, 32, False, _LARGE_VISION),
    "qwen3-vl-32b": _qwen3_vl(64, 5120, 25600, 64, False, _LARGE_VISION),
}
_REFERENCE_NAME = re.compile(r"qwen3-vl-\d+b(?![\w.])")


def reference_architecture(name: str) -> Architecture | None:
    """The reference table's architecture for a model name, hub id, URI or path (`Qwen/Qwen3-VL-8B-Instruct`,
    `/fsx/models/Qwen3-VL-2B-Thinking`); None for any other model."""
    found = _REFERENCE_NAME.search(name.rstrip("/").rsplit("/", 1)[-1].lower())
    return REFERENCE_MODELS.get(found.group(0)) if found else None
