"""The local backend trains multi-turn episodes of the built-in maze on the tiny Qwen3-VL (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends import local
from tests.trainer.conftest import make_config
from tests.trainer.test_resume import assert_same_tensors, lora_weights, optimizer_state

pytestmark = pytest.mark.trainer
MAZE = {"name": "maze", "maxTurns": 3, "params": {"size": "4", "walls": "0.2"}}


def maze_config(job_dir: Path, model: Path, **algorithm) -> TrainerConfig:
    base = make_config(
        job_dir,
        model,
        trainBatchSize=2,
        miniBatchSize=2,
        samplesPerPrompt=2,
        maxResponseLength=4,
        maxPromptLength=128,
        **algorithm,
    )
    data = base.model_dump(by_alias=True)
    data["dataset"] = {
        "train": "synthetic://maze?n=8&seed=0",
        "validation": "synthetic://maze?n=2&seed=1",
        "environment": MAZE,
    }
    return TrainerConfig.model_validate(data)


def test_one_step_on_whole_episodes_changes_only_the_lora_weights(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from mmrl_trainer.backends.local_episodes import rollouts, train_step

    cfg = maze_config(tmp_path, tiny_model, klCoef=0.01)
    processor = AutoProcessor.from_pretrained(tiny_model)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForImageTextToText.from_pretrained(tiny_model), local.lora_config(cfg))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # Rewards must differ within a group for GRPO to have a gradient: give one seed a win and a loss.
    played = rollouts(model, processor, cfg, [3, 5], samples=2)
    played[0].reward, played[1].reward = 1.0, 0.0
    assert all(r.turns >= 1 and r.response_tokens >= 1 for r in played)
    assert all(len(r.tokens.pixel_values) >= r.turns for r in played)  # every turn's observation image stays
    params = [p for p in model.parameters() if p.requires_grad]
    metrics = train_step(model, torch.optim.AdamW(params, lr=1e-2), cfg, played)
    assert metrics["grad_norm"] > 0
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert any("lora_B" in k for k in changed)


def test_an_environment_job_resumes_from_its_checkpoint_exactly(tiny_model: Path, tmp_path: Path) -> None:
    whole = maze_config(tmp_path / "whole", tiny_model, maxSteps=2, interval=1)
    result = local.run(whole, evaluate=False)
    assert result.final_step == 2 and result.resumed_from is None
    assert [c.step for c in ckpt.complete_checkpoints(tmp_path / "whole")] == [1, 2]

    first = maze_config(tmp_path / "split", tiny_model, maxSteps=1, interval=1)
    assert local.run(first, evaluate=False).final_step == 1
    second = maze_config(tmp_path / "split", tiny_model, maxSteps=2, interval=1)
    resumed = local.run(second, evaluate=False)
    assert resumed.resumed_from == 1 and resumed.final_step == 2
    a, b = ckpt.step_dir(tmp_path / "whole", 2), ckpt.step_dir(tmp_path / "split", 2)
    assert_same_tensors(lora_weights(a), lora_weights(b))
    assert_same_tensors(optimizer_state(a), optimizer_state(b))
    assert (Path(resumed.adapter_dir) / "adapter_model.safetensors").is_file()


def test_a_held_out_evaluation_reports_success_rate(tiny_model: Path, tmp_path: Path) -> None:
    import json

    cfg = maze_config(tmp_path, tiny_model, maxSteps=1)
    result = local.run(cfg)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    baseline = next(r for r in records if r.get("event") == "baseline")
    finished = next(r for r in records if r.get("event") == "finished")
    step = next(r for r in records if "episode_success" in r)
    assert 0.0 <= baseline["eval_success"] <= 1.0 and 0.0 <= finished["eval_success"] <= 1.0
    assert result.held_out_reward == finished["eval_reward"]
    assert 1 <= step["episode_turns"] <= 3
