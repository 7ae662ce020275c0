"""SkyRL's vLLM engines get an explicit max_model_len (issue #31 item 1): without one vLLM takes the model's own
maximum (262,144 for Qwen3-VL-8B) and refuses to start on a GPU whose KV cache cannot hold it. It is the longest
conversation SkyRL's generator lets an episode render (generator.max_input_length) plus one reply, and
`--dry-run` shows it."""

from __future__ import annotations

import json
from pathlib import Path

from mmrl_api import MultimodalRLJob
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.__main__ import main
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from tests.support.corpus import example

TRAIN = ["/shared/job/data/train.parquet"]


def overrides(name: str, patch: dict | None = None) -> dict:
    cfg = build_trainer_config(MultimodalRLJob.model_validate(merge_patch(example(name), patch or {})))
    return skyrl_overrides(cfg, train_files=TRAIN, val_files=[])


def test_the_maze_engines_hold_15_turns_of_prompt_image_and_reply() -> None:
    o = overrides("visgym-maze.yaml")
    engine = o["generator.inference_engine.engine_init_kwargs"]
    assert engine["max_model_len"] == 19_200 == o["generator.max_input_length"] + 256
    assert engine["max_model_len"] < 262_144  # what vLLM would take from Qwen3-VL-8B's config otherwise


def test_a_single_turn_engine_holds_the_prompt_and_its_reply() -> None:
    o = overrides("job.yaml")
    assert o["generator.max_input_length"] == o["trainer.max_prompt_length"] == 1024
    assert o["generator.inference_engine.engine_init_kwargs"]["max_model_len"] == 1024 + 2048


def test_the_engine_context_follows_the_spec() -> None:
    longer = {"spec": {"algorithm": {"maxPromptLength": 2048, "maxResponseLength": 512}}}
    o = overrides("visgym-maze.yaml", merge_patch(longer, {"spec": {"dataset": {"environment": {"maxTurns": 4}}}}))
    assert o["generator.inference_engine.engine_init_kwargs"]["max_model_len"] == 4 * (2048 + 512)


def test_dry_run_prints_the_engines_max_model_len(tmp_path: Path, capsys) -> None:
    cfg = build_trainer_config(MultimodalRLJob.model_validate(example("visgym-maze.yaml")))
    path = tmp_path / "maze.json"
    path.write_text(cfg.to_json())
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "vLLM engine max_model_len: 19200 tokens (15 turn(s) x (1024 prompt + 256 response))" in out.splitlines()
    (kwargs,) = [line for line in out.splitlines() if line.startswith("generator.inference_engine.engine_init_kwargs=")]
    assert json.loads(kwargs.split("=", 1)[1])["max_model_len"] == 19_200
