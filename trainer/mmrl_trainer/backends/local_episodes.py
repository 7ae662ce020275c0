"""The local backend's multi-turn loop: GRPO + LoRA over whole episodes of `spec.dataset.environment`.

TRL 1.16's GRPOTrainer has a `rollout_func` hook with an `env_mask`, but its forward pass only sees the dataset
row's images (trl/trainer/grpo_trainer.py: "restore dataset images (rollout_func path returns None)"), so the
images that later observations bring could not be trained on honestly; this is a small loop of our own instead.

One step: `trainBatchSize` dataset rows (episode seeds) x `samplesPerPrompt` episodes each, played with the current
policy (backends/episode_rollout.py), then one optimizer update (AdamW on the LoRA parameters only, constant
learning rate, grad-norm clip 1.0) on GRPO's episode-level advantages (backends/episode_grpo.py). The update uses
the rollout policy's own log-probs as the old ones (one update per rollout, as the TRL path with
steps_per_generation=1). Sampling is seeded per step from `seed` and the step, and the rows of a step depend only
on the step, so a resumed run continues exactly where the checkpoint left off.

Checkpoints use the TRL path's contract (checkpoint.py): `global_step_N/policy/` holds the PEFT adapter and the
optimizer state, sealed with the manifest and then the marker. The final adapter is exported in PEFT format and
checked for vLLM. Held-out evaluation plays the validation rows' episodes and reports the success rate and mean
reward (`eval_success`, `eval_reward`).

A SkyRL-Gym environment class (`environment.name: skyrl-gym`) is not played here: it is written for SkyRL's generator
(its `init` and `step` speak SkyRL's chat messages, and SkyRL builds it per row with the row's columns as extras), and
the local image need not have skyrl_gym. Admission refuses it with backend local; `check_local_environment` refuses
it here too (exit 2), for a config that reaches the local backend some other way (`--backend local`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmrl_api.environment import LOCAL_CANNOT_RUN_SKYRL_GYM
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.episode_grpo import group_advantages, sequence_logprobs, step_rows, token_loss
from mmrl_trainer.backends.episode_rollout import EpisodeRollout, play_episode
from mmrl_trainer.backends.skyrl_config import episode_context_length
from mmrl_trainer.envs import make_episode
from mmrl_trainer.errors import InvalidConfig, InvalidInput
from mmrl_trainer.progress import ProgressReporter

log = logging.getLogger("mmrl_trainer.local")
OPTIMIZER = "optimizer.pt"
STATE = "trainer_state.json"
MAX_GRAD_NORM = 1.0
EVAL_SEED = 1234


def check_local_environment(cfg: TrainerConfig) -> None:
    """Refuse, as InvalidConfig (exit 2), an environment the local backend cannot play."""
    environment = cfg.dataset.environment
    if environment is not None and environment.name == "skyrl-gym":
        raise InvalidConfig(f"spec.trainer.backend: {LOCAL_CANNOT_RUN_SKYRL_GYM}")


def loop_arguments(cfg: TrainerConfig) -> dict[str, Any]:
    """What the episode loop runs with (pure; the dry run prints it in place of TRL's arguments)."""
    algo, env = cfg.algorithm, cfg.dataset.environment
    assert env is not None
    return {
        "environment": env.class_path or env.name,
        "max_turns": env.max_turns,
        "episodes_per_step": algo.train_batch_size * algo.samples_per_prompt,
        "group_size": algo.samples_per_prompt,
        "max_context_tokens": episode_context_length(cfg),
        "max_reply_tokens": algo.max_response_length,
        "temperature": algo.temperature,
        "learning_rate": algo.learning_rate,
        "clip": [algo.clip_eps_low, algo.clip_eps_high],
        "kl_coef": algo.kl_coef,
        "max_grad_norm": MAX_GRAD_NORM,
        "save_steps": cfg.checkpoint.interval_steps,
        "seed": cfg.seed,
    }


def rollouts(model, processor, cfg: TrainerConfig, seeds: list[int], samples: int) -> list[EpisodeRollout]:
    """`samples` episodes per seed, grouped by seed in order."""
    assert cfg.dataset.environment is not None
    new_episode = make_episode(cfg.dataset.environment)
    model.eval()
    return [
        play_episode(
            model,
            processor,
            new_episode(),
            seed,
            max_new_tokens=cfg.algorithm.max_response_length,
            temperature=cfg.algorithm.temperature,
            limit=episode_context_length(cfg),
        )
        for seed in seeds
        for _ in range(samples)
    ]


def evaluate_episodes(model, processor, cfg: TrainerConfig, seeds: list[int], samples: int = 2) -> dict[str, float]:
    """Held-out success rate and mean reward, sampled at the RL temperature with a fixed seed."""
    import torch

    if not seeds:
        return {}
    with torch.random.fork_rng():  # must not shift the training RNG stream
        torch.manual_seed(EVAL_SEED)
        played = rollouts(model, processor, cfg, seeds, samples)
    return {
        "eval_success": sum(r.success for r in played) / len(played),
        "eval_reward": sum(r.reward for r in played) / len(played),
    }


def train_step(model, optimizer, cfg: TrainerConfig, played: list[EpisodeRollout]) -> dict[str, float]:
    """One GRPO update on the step's episodes; returns loss, kl and grad_norm."""
    import torch

    algo = cfg.algorithm
    advantages = group_advantages([r.reward for r in played], algo.samples_per_prompt)
    n_tokens = max(1, sum(r.response_tokens for r in played))
    model.train()
    optimizer.zero_grad()
    total_loss, total_kl = 0.0, 0.0
    for rollout, advantage in zip(played, advantages, strict=True):
        mask = torch.tensor(rollout.tokens.loss_mask[1:], dtype=torch.bool)
        if not mask.any():
            continue
        inputs = rollout.tokens.model_inputs()
        logp = sequence_logprobs(model, inputs, algo.temperature)[mask]
        ref = None
        if algo.kl_coef:
            with torch.no_grad(), model.disable_adapter():
                ref = sequence_logprobs(model, inputs, algo.temperature)[mask]
        loss = token_loss(
            logp,
            logp.detach(),
            ref,
            advantage,
            clip_low=algo.clip_eps_low,
            clip_high=algo.clip_eps_high,
            kl_coef=algo.kl_coef,
        ).sum()
        (loss / n_tokens).backward()
        total_loss += loss.item()
        if ref is not None:
            total_kl += (torch.exp(ref - logp) - (ref - logp) - 1).sum().item()
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM).item()
    optimizer.step()
    optimizer.zero_grad()
    return {"loss": total_loss / n_tokens, "kl": total_kl / n_tokens, "grad_norm": grad_norm}


def episode_metrics(played: list[EpisodeRollout]) -> dict[str, float]:
    n = max(1, len(played))
    return {
        "reward": sum(r.reward for r in played) / n,
        "episode_success": sum(r.success for r in played) / n,
        "episode_turns": sum(r.turns for r in played) / n,
        "completion_length": sum(r.response_tokens for r in played) / n,
        "episode_length": sum(len(r.tokens.ids) for r in played) / n,
    }


def save_checkpoint(root: Path, step: int, model, optimizer, keep: int | None) -> ckpt.Checkpoint:
    import torch

    policy = ckpt.begin_step(root, step) / "policy"
    model.save_pretrained(policy)
    torch.save(optimizer.state_dict(), policy / OPTIMIZER)
    (policy / STATE).write_text(json.dumps({"global_step": step}))
    return ckpt.commit_step(root, step, keep=keep)


def load_checkpoint(resume: ckpt.Checkpoint, model, optimizer) -> int:
    """Restore the LoRA weights and optimizer state of a sealed step; returns its step."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    policy = resume.path / "policy"
    set_peft_model_state_dict(model, load_file(policy / "adapter_model.safetensors"))
    optimizer.load_state_dict(torch.load(policy / OPTIMIZER, weights_only=True))
    return int(json.loads((policy / STATE).read_text())["global_step"])


def train_episodes(
    cfg: TrainerConfig,
    model,
    processor,
    train_seeds: list[int],
    n_steps: int,
    reporter: ProgressReporter,
    resume: ckpt.Checkpoint | None,
    evaluator: Callable[[Any], dict[str, float]] | None = None,
) -> int:
    """Train the (PEFT-wrapped) model from `resume` (or scratch) to `n_steps`; returns the final step."""
    import torch

    algo = cfg.algorithm
    root = ckpt.local_dir(cfg.checkpoint.dir)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=algo.learning_rate, weight_decay=0.0)
    step = load_checkpoint(resume, model, optimizer) if resume is not None else 0
    if resume is not None:
        log.info("resuming from step %d at %s", step, resume.path)
    while step < n_steps:
        started = time.monotonic()
        torch.manual_seed(cfg.seed * 1_000_003 + step)
        rows = step_rows(len(train_seeds), algo.train_batch_size, step, cfg.seed)
        played = rollouts(model, processor, cfg, [train_seeds[i] for i in rows], algo.samples_per_prompt)
        metrics = {**episode_metrics(played), **train_step(model, optimizer, cfg, played)}
        step += 1
        metrics["step_time"] = time.monotonic() - started
        reporter.report(step, n_steps, metrics)
        log.info(
            "step %d/%d reward=%.3f success=%.2f turns=%.1f loss=%.4f step_time=%.1fs",
            step,
            n_steps,
            metrics["reward"],
            metrics["episode_success"],
            metrics["episode_turns"],
            metrics["loss"],
            metrics["step_time"],
        )
        if step % cfg.checkpoint.interval_steps == 0 or step == n_steps:
            done = save_checkpoint(root, step, model, optimizer, cfg.checkpoint.keep)
            reporter.report(step, n_steps, {"event": "checkpoint"}, checkpoint=done, force=True)
            if evaluator is not None and step < n_steps:
                reporter.record(step, {"event": "eval", **evaluator(model)})
    return step


def row_seeds(examples: list, field: str) -> list[int]:
    """The episode seed of every dataset row (its `seed` column), as the SkyRL adapter reads extra_info.seed."""
    seeds = [e.extra.get("seed") for e in examples]
    for i, seed in enumerate(seeds):
        if not isinstance(seed, int):
            raise InvalidInput(f"{field}: row {i} has no integer `seed` column; an environment's rows need one")
    return seeds  # type: ignore[return-value]


def run(cfg: TrainerConfig, *, evaluate: bool = True, attempt: int | None = None):
    """The local backend's run for a job with `spec.dataset.environment` (local.run hands it over)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor, set_seed

    from mmrl_trainer.adapter import export_adapter
    from mmrl_trainer.backends.local import LocalResult, lora_config, start_attempt, total_steps
    from mmrl_trainer.data import load_examples
    from mmrl_trainer.lineage import baseline_due
    from mmrl_trainer.models import resolve_model

    _, resume, reporter = start_attempt(cfg, attempt)
    model_path = resolve_model(cfg.model)
    train_seeds = row_seeds(load_examples(cfg.dataset.train, cfg.dataset, seed=cfg.seed), "spec.dataset.train")
    held_out = (
        row_seeds(load_examples(cfg.dataset.validation, cfg.dataset, seed=cfg.seed + 1), "spec.dataset.validation")
        if evaluate and cfg.dataset.validation
        else []
    )
    n_steps = total_steps(cfg, len(train_seeds))
    processor = AutoProcessor.from_pretrained(model_path, revision=cfg.model.revision)
    model = AutoModelForImageTextToText.from_pretrained(model_path, revision=cfg.model.revision, dtype=torch.float32)

    def evaluator(policy, limit: int | None = 32) -> dict[str, float]:
        return evaluate_episodes(policy, processor, cfg, held_out[:limit])

    if held_out and baseline_due(reporter.metrics_file, resuming=resume is not None):
        reporter.record(0, {"event": "baseline", **evaluator(model)})
    set_seed(cfg.seed)  # before peft wraps the model: the LoRA init depends only on cfg.seed
    model = get_peft_model(model, lora_config(cfg))
    final_step = train_episodes(
        cfg, model, processor, train_seeds, n_steps, reporter, resume, evaluator if held_out else None
    )
    info = export_adapter(model, cfg.export_dir, base_model=cfg.model.name)
    scores = evaluator(model, None) if held_out else {}
    summary = {"event": "finished", "held_out_reward": scores.get("eval_reward"), **scores}
    reporter.report(final_step, n_steps, summary, checkpoint=reporter.checkpoint, force=True)
    reporter.finish()
    return LocalResult(final_step, resume.step if resume else None, info.path, scores.get("eval_reward"))
