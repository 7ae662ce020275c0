"""A LoRA adapter of a (tiny) model that changes its answers, exported by the trainer's own code: for the tests and
benchmarks that load adapters into real vLLM (tests/e2e/test_shared_serving.py, bench/shared_serving.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def export_random_adapter(model: Path, out: Path, seed: int, base_model: str) -> Any:
    """Rank 8 on q_proj and v_proj (no vision tower), B matrices drawn from N(0, 0.5) with `seed` rather than
    PEFT's zeros, exported to `out` with `mmrl_trainer.adapter.export_adapter`; returns its AdapterInfo (`.status()`
    is what the trainer reports as status.adapter)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from mmrl_trainer.adapter import export_adapter

    torch.manual_seed(seed)
    base = AutoModelForImageTextToText.from_pretrained(model)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], exclude_modules=r".*visual.*")
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    return export_adapter(peft_model, out, base_model=base_model)
