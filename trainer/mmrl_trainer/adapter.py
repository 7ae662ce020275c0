"""The exported adapter: PEFT-format export and the check that vLLM can serve it.

vLLM loads LoRA adapters from `adapter_config.json` + `adapter_model.safetensors` and rejects (or silently
mis-serves) adapters that carry `modules_to_save`, DoRA, trained biases, LoRA on lm_head/embed_tokens, or a rank
above `--max-lora-rank` (at most 512). The operator runs this check before it creates the inference Deployment,
so a bad adapter fails the job with a message instead of crash-looping a vLLM pod.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mmrl_operator.constants import VLLM_FORBIDDEN_LORA_TARGETS, VLLM_LORA_RANKS

VLLM_MAX_LORA_RANK = 512
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


class AdapterError(ValueError):
    """The adapter cannot be served by vLLM; the message names the field and the fix."""


@dataclass(frozen=True)
class AdapterInfo:
    path: Path
    rank: int
    alpha: float
    target_modules: list[str]
    base_model: str | None
    max_lora_rank: int
    """The smallest `--max-lora-rank` value vLLM accepts that fits this adapter."""


def smallest_max_lora_rank(rank: int) -> int:
    return next(r for r in VLLM_LORA_RANKS if r >= rank)


def check_vllm_compatible(adapter_dir: str | Path, max_rank: int = VLLM_MAX_LORA_RANK) -> AdapterInfo:
    path = Path(adapter_dir)
    config_file = path / "adapter_config.json"
    if not config_file.is_file():
        raise AdapterError(f"{path}: adapter_config.json is missing; export the adapter with PEFT save_pretrained")
    if not any((path / w).is_file() for w in WEIGHT_FILES):
        raise AdapterError(f"{path}: adapter_model.safetensors is missing")
    cfg = json.loads(config_file.read_text())
    where = f"{config_file}"
    if cfg.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{where}: peft_type {cfg.get('peft_type')!r} is not LORA; vLLM serves LoRA adapters only")
    if cfg.get("modules_to_save"):
        raise AdapterError(
            f"{where}: modules_to_save={cfg['modules_to_save']} is set; vLLM cannot serve fully trained modules, "
            "train with LoRA only (no modules_to_save)"
        )
    if cfg.get("use_dora"):
        raise AdapterError(f"{where}: use_dora is true; vLLM cannot serve DoRA adapters, train plain LoRA")
    if cfg.get("bias", "none") != "none":
        raise AdapterError(f"{where}: bias={cfg['bias']!r}; vLLM needs bias='none'")
    targets = cfg.get("target_modules") or []
    if isinstance(targets, str):  # PEFT stores a regex as a plain string
        targets = [targets]
    bad = [t for t in targets if any(f in t for f in VLLM_FORBIDDEN_LORA_TARGETS)]
    if bad:
        raise AdapterError(f"{where}: target_modules {bad} include lm_head/embed_tokens, which vLLM cannot serve")
    rank = int(cfg.get("r", 0))
    ranks = [rank, *(int(v) for v in (cfg.get("rank_pattern") or {}).values())]
    limit = min(max_rank, VLLM_MAX_LORA_RANK)
    if rank < 1 or max(ranks) > limit:
        raise AdapterError(f"{where}: r={max(ranks)} is outside 1..{limit}, the largest rank vLLM can serve")
    return AdapterInfo(
        path=path,
        rank=max(ranks),
        alpha=float(cfg.get("lora_alpha", rank)),
        target_modules=sorted(targets),
        base_model=cfg.get("base_model_name_or_path"),
        max_lora_rank=smallest_max_lora_rank(max(ranks)),
    )


def export_adapter(peft_model, export_dir: str | Path, *, base_model: str | None = None) -> AdapterInfo:
    """Save the LoRA weights in PEFT format to `export_dir` (replaced atomically) and verify vLLM can serve them."""
    target = Path(export_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    peft_model.save_pretrained(staging)
    if base_model:
        cfg_file = staging / "adapter_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model_name_or_path"] = base_model
        cfg_file.write_text(json.dumps(cfg, indent=2))
    info = check_vllm_compatible(staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return AdapterInfo(target, info.rank, info.alpha, info.target_modules, info.base_model, info.max_lora_rank)
