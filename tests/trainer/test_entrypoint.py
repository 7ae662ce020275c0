"""`python -m mmrl_trainer`: exit codes the operator classifies, and the tiny-model alias used by the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrl_api.spec import ModelSpec
from mmrl_trainer.__main__ import EXIT_BAD_CONFIG, EXIT_BAD_INPUT, main
from mmrl_trainer.models import TINY_MODEL, resolve_model
from tests.trainer.conftest import make_config

pytestmark = pytest.mark.trainer


def test_unreadable_or_invalid_config_exits_2(tmp_path: Path) -> None:
    assert main(["--config", str(tmp_path / "missing.json")]) == EXIT_BAD_CONFIG
    (tmp_path / "bad.json").write_text(json.dumps({"backend": "local"}))
    assert main(["--config", str(tmp_path / "bad.json")]) == EXIT_BAD_CONFIG


def test_unusable_input_exits_3_without_training(tiny_model: Path, tmp_path: Path) -> None:
    cfg = make_config(tmp_path / "job", tiny_model)
    bad = json.loads(cfg.to_json())
    bad["dataset"]["train"] = str(tmp_path / "no-such.parquet")
    (tmp_path / "c.json").write_text(json.dumps(bad))
    assert main(["--config", str(tmp_path / "c.json")]) == EXIT_BAD_INPUT
    assert not list((tmp_path / "job").glob("global_step_*"))


def test_s3_checkpoint_dir_on_the_local_backend_exits_3(tiny_model: Path, tmp_path: Path) -> None:
    cfg = json.loads(make_config(tmp_path, tiny_model).to_json())
    cfg["checkpoint"]["dir"] = "s3://bucket/ckpt"
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert main(["--config", str(tmp_path / "c.json")]) == EXIT_BAD_INPUT


def test_tiny_alias_resolves_to_the_cached_build(tiny_model: Path) -> None:
    assert Path(resolve_model(ModelSpec(name=TINY_MODEL))) == tiny_model
    assert (tiny_model / "config.json").is_file() and (tiny_model / "tokenizer.json").is_file()


def test_prompts_longer_than_max_prompt_length_are_dropped(tiny_model: Path) -> None:
    from transformers import AutoProcessor

    from mmrl_trainer.backends.local import drop_long_prompts
    from mmrl_trainer.synthetic import colour_examples

    processor = AutoProcessor.from_pretrained(tiny_model)
    examples = colour_examples(4, 0)
    assert len(drop_long_prompts(examples, processor, 64)) == 4  # question + 4 image tokens + chat markup ≈ 22
    with pytest.raises(ValueError, match=r"maxPromptLength 16"):
        drop_long_prompts(examples, processor, 16)
