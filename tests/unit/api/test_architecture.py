"""The architecture table and `config.json` reading: parameter counts against transformers' own Qwen3-VL modules
(built on the meta device) and against the published checkpoint sizes; the LoRA count against a real PEFT model is
in test_footprint.py."""

from __future__ import annotations

import pytest

from mmrl_api.architecture import REFERENCE_MODELS, Architecture, reference_architecture
from tests.support.architectures import hf_config

# Parameters of the published safetensors (Qwen/Qwen3-VL-*-Instruct model cards).
PUBLISHED = {
    "qwen3-vl-2b": 2_127_000_000,
    "qwen3-vl-4b": 4_438_000_000,
    "qwen3-vl-8b": 8_767_000_000,
    "qwen3-vl-32b": 33_417_000_000,
}


def meta_model_params(config: dict) -> int:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**config))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(REFERENCE_MODELS))
def test_reference_parameter_counts_equal_transformers_modules_and_the_published_size(name: str) -> None:
    arch = REFERENCE_MODELS[name]
    assert arch.params == meta_model_params(hf_config(arch))
    assert abs(arch.params - PUBLISHED[name]) / PUBLISHED[name] < 0.005


def test_a_config_json_reads_back_to_the_same_architecture_and_counts_like_transformers() -> None:
    from mmrl_trainer.tiny import build_config, build_tokenizer

    config = build_config(build_tokenizer()).to_dict()
    arch = Architecture.from_hf_config(config)
    assert (arch.layers, arch.kv_heads, arch.head_dim) == (
        config["text_config"]["num_hidden_layers"],
        config["text_config"]["num_key_value_heads"],
        config["text_config"]["head_dim"],
    )
    assert arch.params == meta_model_params(config)
    assert Architecture.from_hf_config(hf_config(REFERENCE_MODELS["qwen3-vl-8b"])) == REFERENCE_MODELS["qwen3-vl-8b"]


def test_qwen3_vl_8b_keeps_144_kib_of_bf16_kv_per_token() -> None:
    assert REFERENCE_MODELS["qwen3-vl-8b"].kv_bytes_per_token() == 36 * 2 * 8 * 128 * 2 == 144 * 1024


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl-8b"),
        ("/fsx/models/Qwen3-VL-2B-Thinking/", "qwen3-vl-2b"),
        ("hf://Qwen/Qwen3-VL-30B-A3B-Instruct", None),
        ("pvc://claim/models/tiny-qwen3-vl", None),
    ],
)
def test_reference_architecture_by_name(name: str, found: str | None) -> None:
    assert reference_architecture(name) == (REFERENCE_MODELS[found] if found else None)
