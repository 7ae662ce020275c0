"""The vLLM compatibility check refuses what vLLM cannot serve, naming the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrl_trainer.adapter import AdapterError, check_vllm_compatible


def adapter(tmp_path: Path, **overrides) -> Path:
    cfg = {
        "peft_type": "LORA",
        "r": 32,
        "lora_alpha": 32,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "use_dora": False,
        "modules_to_save": None,
        "base_model_name_or_path": "Qwen/Qwen3-VL-8B-Instruct",
        **overrides,
    }
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"x")
    return tmp_path


def test_plain_lora_is_servable_and_gets_the_smallest_allowed_max_rank(tmp_path: Path) -> None:
    info = check_vllm_compatible(adapter(tmp_path, r=24))
    assert (info.rank, info.max_lora_rank, info.base_model) == (24, 32, "Qwen/Qwen3-VL-8B-Instruct")
    assert info.target_modules == ["q_proj", "v_proj"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"use_dora": True}, "DoRA"),
        ({"bias": "lora_only"}, "bias"),
        ({"target_modules": ["q_proj", "lm_head"]}, "lm_head"),
        ({"target_modules": ["model.embed_tokens"]}, "embed_tokens"),
        ({"r": 1024}, "r=1024"),
        ({"rank_pattern": {"q_proj": 640}}, "r=640"),
        ({"peft_type": "IA3"}, "peft_type"),
    ],
)
def test_unservable_adapters_are_refused_with_the_field_named(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(AdapterError, match=message):
        check_vllm_compatible(adapter(tmp_path, **overrides))


def test_a_lower_serving_limit_is_enforced(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="r=32"):
        check_vllm_compatible(adapter(tmp_path), max_rank=16)


def test_missing_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=r"adapter_config\.json"):
        check_vllm_compatible(tmp_path)
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(AdapterError, match="safetensors"):
        check_vllm_compatible(tmp_path)
