"""Where the base model comes from: a local/mounted directory, the built-in tiny VLM, or a hub id (cache only).

`mmrl/tiny-qwen3-vl` names the offline tiny Qwen3-VL built by tiny.py (the CPU demo and the tests use it);
pvc:// resolves to its mount; hub ids and hf:// go through transformers' normal loading, which honours
HF_HUB_OFFLINE and the local cache. s3:// models are the SkyRL image's job and are rejected here by name.
"""

from __future__ import annotations

from pathlib import Path

from mmrl_api.spec import ModelSpec
from mmrl_trainer.data import resolve_uri
from mmrl_trainer.errors import InvalidInput

TINY_MODEL = "mmrl/tiny-qwen3-vl"


def resolve_model(spec: ModelSpec) -> str:
    name = spec.name
    if name == TINY_MODEL:
        from mmrl_trainer.tiny import build_tiny_vlm

        return str(build_tiny_vlm())
    if name.startswith("s3://"):
        raise InvalidInput(f"model.name {name!r}: the local backend loads local, pvc:// or hub models, not s3://")
    if name.startswith("pvc://") or name.startswith("/"):
        path = Path(resolve_uri(name))
        if not (path / "config.json").is_file():
            raise InvalidInput(f"model.name {name!r}: {path} has no config.json")
        return str(path)
    return name.removeprefix("hf://")
