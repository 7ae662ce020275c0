"""What vLLM can serve: the LoRA adapter rules as pure functions over `adapter_config.json` and tensor names.

One rule set, three callers: the trainer before it reports an exported adapter, the inference pod's init
container on the files vLLM is about to load, and the operator on the summary the trainer wrote into
`status.adapter` (before it creates any Deployment). Each violation names its rule and the config field, so the
job's message says what to change.

The rules mirror vLLM's own LoRA loader (PEFTHelper.validate_legal) plus three it does not enforce loudly:
LoRA on lm_head/embed_tokens, weights on the vision tower (Qwen3-VL's `visual.*` LoRA weights are dropped unless
vLLM runs with --enable-tower-connector-lora), and an adapter trained on a different base model.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmrl_api.constants import VLLM_FORBIDDEN_LORA_TARGETS, VLLM_LORA_RANKS

VLLM_MAX_LORA_RANK = VLLM_LORA_RANKS[-1]
# Initialisations that only set the starting weights; the others (PiSSA, OLoRA, CorDA, LoftQ) change the base.
SERVABLE_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
SERVABLE_MODULES_TO_SAVE = ("classifier", "score")
VISION_TOWER = re.compile(r"(^|\.)visual\.")
# What trainers pass as LoRA `exclude_modules` (a str is a regex to PEFT and SkyRL alike): no vision-tower LoRA.
VISION_TOWER_MODULES = ".*visual.*"
# The adapter_config.json keys the rules read; the trainer reports exactly these in status.adapter.config.
RULE_KEYS = (
    "peft_type",
    "r",
    "lora_alpha",
    "target_modules",
    "rank_pattern",
    "modules_to_save",
    "use_dora",
    "lora_bias",
    "bias",
    "init_lora_weights",
    "alora_invocation_tokens",
    "layer_replication",
    "use_bdlora",
    "use_qalora",
    "base_model_name_or_path",
)


@dataclass(frozen=True)
class Violation:
    rule: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"adapter_config.{self.field}: {self.message} (rule {self.rule})"


def max_rank(cfg: dict[str, Any]) -> int:
    ranks = [cfg.get("r") or 0, *(cfg.get("rank_pattern") or {}).values()]
    return max(int(r) for r in ranks)


def smallest_max_lora_rank(rank: int) -> int:
    """The `--max-lora-rank` value for an adapter of this rank: the smallest one vLLM accepts that fits."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_MAX_LORA_RANK)


def targets(cfg: dict[str, Any]) -> list[str]:
    value = cfg.get("target_modules") or []
    return [value] if isinstance(value, str) else list(value)  # PEFT stores a regex as a plain string


def rule_subset(cfg: dict[str, Any]) -> dict[str, Any]:
    """The keys of adapter_config.json the rules read (small enough for the job's status)."""
    return {k: cfg[k] for k in RULE_KEYS if cfg.get(k) not in (None, False, [], {}) or k == "r"}


def _feature_violations(cfg: dict[str, Any]) -> list[Violation]:
    out = []
    if cfg.get("peft_type", "LORA") != "LORA":
        out.append(Violation("peft-type", "peft_type", f"{cfg['peft_type']!r} is not LORA; vLLM serves LoRA only"))
    unsupported = [m for m in cfg.get("modules_to_save") or [] if m not in SERVABLE_MODULES_TO_SAVE]
    if unsupported:
        out.append(
            Violation("modules-to-save", "modules_to_save", f"{unsupported} are fully trained modules vLLM cannot load")
        )
    if cfg.get("use_dora"):
        out.append(Violation("dora", "use_dora", "DoRA adapters cannot be served by vLLM; train plain LoRA"))
    if cfg.get("lora_bias"):
        out.append(Violation("lora-bias", "lora_bias", "LoRA bias terms cannot be served by vLLM"))
    if cfg.get("bias", "none") != "none":
        out.append(Violation("bias", "bias", f"{cfg['bias']!r}: vLLM needs bias 'none'"))
    init = cfg.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in SERVABLE_INITS:
        out.append(
            Violation(
                "init-lora-weights",
                "init_lora_weights",
                f"{init!r} changes the base weights when loaded; convert it to plain LoRA first",
            )
        )
    for key, rule, what in (
        ("alora_invocation_tokens", "alora", "activated LoRA (aLoRA)"),
        ("layer_replication", "layer-replication", "layer_replication"),
        ("use_bdlora", "bd-lora", "block-diagonal LoRA"),
        ("use_qalora", "qalora", "QALoRA"),
    ):
        if cfg.get(key):
            out.append(Violation(rule, key, f"{what} cannot be served by vLLM"))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# The JSON type each rule key must have in adapter_config.json (None is always allowed: PEFT writes null).
RULE_KEY_TYPES: dict[str, tuple[str, Any]] = {
    "peft_type": ("a string", lambda v: isinstance(v, str)),
    "r": ("an integer", _is_int),
    "lora_alpha": ("a number", lambda v: _is_int(v) or isinstance(v, float)),
    "target_modules": ("a string or a list of strings", lambda v: isinstance(v, str) or _is_str_list(v)),
    "rank_pattern": (
        "a mapping of module patterns to integers",
        lambda v: isinstance(v, dict) and all(_is_int(x) for x in v.values()),
    ),
    "modules_to_save": ("a list of strings", _is_str_list),
    "use_dora": ("a boolean", lambda v: isinstance(v, bool)),
    "lora_bias": ("a boolean", lambda v: isinstance(v, bool)),
    "bias": ("a string", lambda v: isinstance(v, str)),
    "init_lora_weights": ("a boolean or a string", lambda v: isinstance(v, bool | str)),
    "base_model_name_or_path": ("a string", lambda v: isinstance(v, str)),
}


def type_violations(cfg: Any) -> list[Violation]:
    """Keys of the wrong JSON type: the other rules are only meaningful on a config that passes this."""
    if not isinstance(cfg, dict):
        return [Violation("config-type", "(config)", "adapter_config.json must be a JSON object")]
    return [
        Violation("config-type", key, f"{cfg[key]!r} must be {what}")
        for key, (what, ok) in RULE_KEY_TYPES.items()
        if cfg.get(key) is not None and not ok(cfg[key])
    ]


def config_violations(
    cfg: dict[str, Any], *, max_lora_rank: int | None = None, base_model: str | None = None
) -> list[Violation]:
    """Every rule `cfg` (adapter_config.json, or its rule subset) breaks; empty when vLLM can serve it. A config
    with keys of the wrong type gets only those violations (whoever wrote it, the rules never raise on it)."""
    wrong = type_violations(cfg)
    if wrong:
        return wrong
    out = _feature_violations(cfg)
    missing = [k for k in ("r", "lora_alpha", "target_modules") if cfg.get(k) in (None, "", [])]
    if missing:
        out.append(Violation("required", missing[0], f"{missing} must be set"))
    else:
        rank, limit = max_rank(cfg), min(max_lora_rank or VLLM_MAX_LORA_RANK, VLLM_MAX_LORA_RANK)
        if rank < 1:
            out.append(Violation("rank", "r", f"rank {rank} must be a positive integer"))
        elif rank > limit:
            out.append(Violation("max-lora-rank", "r", f"rank {rank} is above --max-lora-rank {limit}"))
        bad = [t for t in targets(cfg) if any(f in t for f in VLLM_FORBIDDEN_LORA_TARGETS)]
        if bad:
            out.append(Violation("forbidden-target", "target_modules", f"{bad}: vLLM cannot serve LoRA there"))
    trained_on = cfg.get("base_model_name_or_path")
    if base_model is not None and trained_on is not None and trained_on.rstrip("/") != base_model.rstrip("/"):
        out.append(
            Violation(
                "base-model",
                "base_model_name_or_path",
                f"trained on {trained_on!r} but the job serves {base_model!r}",
            )
        )
    return out


def tensor_violations(names: Iterable[str]) -> list[Violation]:
    """LoRA weights vLLM would silently drop: anything on the vision tower (`visual.*`)."""
    tower = sorted(n for n in names if VISION_TOWER.search(n))
    if not tower:
        return []
    return [
        Violation(
            "vision-tower",
            "target_modules",
            f"{len(tower)} tensors on the vision tower (e.g. {tower[0]}) would be ignored by vLLM; exclude "
            "'visual' modules when training",
        )
    ]


def safetensors_names(path: str | Path) -> list[str]:
    """Tensor names from a .safetensors header (8-byte little-endian length, then JSON); no weights are read."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100_000_000:
            raise ValueError(f"{path}: not a safetensors file (header length {length})")
        header = json.loads(f.read(length))
    return sorted(k for k in header if k != "__metadata__")
