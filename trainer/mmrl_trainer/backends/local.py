"""The local backend: TRL's GRPOTrainer + a peft LoRA on one node (CPU or one GPU), driven by TrainerConfig.

One training step is one batch of `trainBatchSize` prompts x `samplesPerPrompt` completions and one optimizer
update (miniBatchSize and microBatchSizePerGpu are GPU memory knobs of the SkyRL backend; a single-node job
updates once per step). Prompts longer than `maxPromptLength` (image tokens included) are dropped, as SkyRL does.
Checkpoints use SkyRL's layout so the operator's resume logic does not care which backend wrote them: TRL saves
`checkpoint-N` into a staging folder, and a callback moves it to `<dir>/global_step_N/policy/` and commits it
(manifest, then the marker, atomically). Resume hands the newest complete step to
`Trainer.train(resume_from_checkpoint=...)`, which restores the LoRA weights, optimizer, scheduler, RNG states
and data position. The final adapter is exported in PEFT format and checked for vLLM.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmrl_api.adapter_rules import VISION_TOWER_MODULES
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.errors import InvalidInput
from mmrl_trainer.progress import ProgressReporter

log = logging.getLogger("mmrl_trainer.local")
STAGING = ".trl-staging"
EVAL_AT_CHECKPOINT = 64  # held-out prompts scored at each checkpoint; the final evaluation uses all of them


@dataclass
class LocalResult:
    final_step: int
    resumed_from: int | None
    adapter_dir: Path
    held_out_reward: float | None


def total_steps(cfg: TrainerConfig, n_train: int) -> int:
    per_epoch = max(1, math.ceil(n_train / cfg.algorithm.train_batch_size))
    steps = per_epoch * cfg.algorithm.epochs
    return min(steps, cfg.algorithm.max_steps) if cfg.algorithm.max_steps else steps


def grpo_kwargs(cfg: TrainerConfig, output_dir: str, *, use_cpu: bool) -> dict[str, Any]:
    """TrainerConfig → GRPOConfig keyword arguments (pure; unit-tested without torch)."""
    algo = cfg.algorithm
    completions = algo.train_batch_size * algo.samples_per_prompt
    return {
        "output_dir": output_dir,
        "num_generations": algo.samples_per_prompt,
        "per_device_train_batch_size": completions,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "learning_rate": algo.learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "beta": algo.kl_coef,
        "epsilon": algo.clip_eps_low,
        "epsilon_high": algo.clip_eps_high,
        # SkyRL's default loss_reduction is token_mean; TRL's "dapo" loss is the same normalisation.
        "loss_type": "dapo",
        "temperature": algo.temperature,
        "top_k": 0,
        "max_completion_length": algo.max_response_length,
        "num_train_epochs": algo.epochs,
        "max_steps": algo.max_steps or -1,
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "use_cpu": use_cpu,
        "bf16": False,
        "fp16": False,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "steps",
        "save_steps": cfg.checkpoint.interval_steps,
        "save_total_limit": None,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "remove_unused_columns": False,
    }


def lora_config(cfg: TrainerConfig):
    from peft import LoraConfig

    # bias="none" and no modules_to_save: the two things vLLM refuses to serve.
    return LoraConfig(
        r=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        # vLLM ignores LoRA weights on Qwen3-VL's vision tower unless run with --enable-tower-connector-lora.
        exclude_modules=VISION_TOWER_MODULES,
        bias="none",
        task_type="CAUSAL_LM",
    )


def make_callbacks(
    cfg: TrainerConfig, reporter: ProgressReporter, n_steps: int, evaluator: Callable[[Any], float] | None = None
):
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    root = ckpt.local_dir(cfg.checkpoint.dir)

    class CommitCheckpoint(TrainerCallback):
        """Move TRL's checkpoint-N into global_step_N/policy and seal it with the marker."""

        def on_save(self, args, state, control, **kwargs):
            src = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if not args.should_save or not src.is_dir():
                return control
            dst = ckpt.begin_step(root, state.global_step)
            os.replace(src, dst / "policy")
            done = ckpt.commit_step(root, state.global_step, keep=cfg.checkpoint.keep)
            # Report the sealed checkpoint before the (slower) held-out evaluation: a node lost during the eval
            # must not hide that this step was safely written.
            reporter.report(state.global_step, n_steps, {"event": "checkpoint"}, checkpoint=done, force=True)
            if evaluator is not None and kwargs.get("model") is not None:
                reporter.record(state.global_step, {"event": "eval", "eval_reward": evaluator(kwargs["model"])})
            return control

    class ReportProgress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                keep = ("reward", "reward_std", "loss", "kl", "grad_norm", "learning_rate", "entropy", "step_time")
                metrics = {k: float(v) for k, v in logs.items() if k in keep and v is not None}
                metrics["completion_length"] = logs.get("completions/mean_length")
                reporter.report(state.global_step, n_steps, metrics)
                log.info(
                    "step %d/%d reward=%.3f loss=%.4f step_time=%.3fs",
                    state.global_step,
                    n_steps,
                    metrics.get("reward", float("nan")),
                    metrics.get("loss", float("nan")),
                    metrics.get("step_time", float("nan")),
                )
            return control

    return [CommitCheckpoint(), ReportProgress()]


def _reward_fn(cfg: TrainerConfig):
    from mmrl_trainer.rewards import resolve

    score = resolve(cfg.dataset.reward)

    def mmrl_reward(prompts, completions, answer, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [score(t, a) for t, a in zip(texts, answer, strict=True)]

    return mmrl_reward


def drop_long_prompts(examples: list, processor, max_tokens: int) -> list:
    """Keep prompts that fit `maxPromptLength` with their image tokens, as SkyRL's PromptDataset filters them."""
    from mmrl_trainer.data import chat_messages

    kept = []
    for e in examples:
        text = processor.apply_chat_template(
            chat_messages(e, lambda i, img: {"type": "image"}), add_generation_prompt=True
        )
        n = len(processor(text=[text], images=[e.images] if e.images else None)["input_ids"][0])
        if n <= max_tokens:
            kept.append(e)
    if len(kept) < len(examples):
        log.warning(
            "dropped %d of %d prompts longer than %d tokens", len(examples) - len(kept), len(examples), max_tokens
        )
    if not kept:
        raise InvalidInput(f"algorithm.maxPromptLength {max_tokens}: every prompt is longer (images included)")
    return kept


def torch_threads(env: dict[str, str], cuda: bool, cpus: int) -> int:
    """How many intra-op threads torch gets. On small CPU boxes threading tiny matmuls costs more than it saves
    (measured: ~20x slower with 2 threads while other processes are busy), so 1 on CPU; with a GPU, every CPU this
    process may run on. Never torch's default: the trainer runs as a Ray job's driver, which inherits Ray's
    OMP_NUM_THREADS=1 (seen on the real Ray head), and that would cap the GPU trainer's data work at one thread.
    MMRL_TORCH_THREADS overrides."""
    if env.get("MMRL_TORCH_THREADS"):
        return max(1, int(env["MMRL_TORCH_THREADS"]))
    return max(1, cpus) if cuda else 1


def configure_threads() -> None:
    import torch

    torch.set_num_threads(torch_threads(dict(os.environ), torch.cuda.is_available(), len(os.sched_getaffinity(0))))


def start_attempt(cfg: TrainerConfig, attempt: int | None) -> tuple[Path, ckpt.Checkpoint | None, ProgressReporter]:
    """Threads, the checkpoint root, the step to resume from, and the reporter that has announced the attempt."""
    configure_threads()
    root = ckpt.local_dir(cfg.checkpoint.dir)
    root.mkdir(parents=True, exist_ok=True)
    resume, passed_over = ckpt.resume_point(root, required=True) if cfg.resume == "latest" else (None, [])
    for why in passed_over:
        log.warning("checkpoint passed over, resuming from an older step: %s", why)
    reporter = ProgressReporter.from_config(cfg, attempt=attempt)
    # Before the slow part (model load, data): tell the operator which checkpoint this attempt really resumes from,
    # and why it is not a newer one. No heartbeat yet: the startup timeout covers loading, the hang timeout starts
    # with the first training step.
    reporter.started(resume, passed_over)
    return root, resume, reporter


def trained_policy(model, resume: ckpt.Checkpoint):
    """The policy of a run whose last step is already sealed: the base model with that checkpoint's LoRA. An attempt
    can start after the previous one sealed its final step (stopped, or its RayJob replaced, before it ended); it
    only exports and evaluates. TRL would train one step more: a resumed loop checks max_steps after each step."""
    from peft import PeftModel

    log.info("resuming from step %d at %s, the run's last: exporting it, no training", resume.step, resume.path)
    return PeftModel.from_pretrained(model, str(resume.path / "policy"))


def train_grpo(
    cfg: TrainerConfig,
    model,
    processor,
    train_rows: list,
    resume: ckpt.Checkpoint | None,
    reporter: ProgressReporter,
    n_steps: int,
    evaluator: Callable[[Any], float] | None,
) -> tuple[Any, int]:
    """TRL's GRPOTrainer from `resume` (or the start) to the run's last step; returns the policy and that step."""
    import datasets
    import torch
    from transformers import PrinterCallback, set_seed
    from trl import GRPOConfig, GRPOTrainer

    from mmrl_trainer.data import to_trl_rows

    # Seed before peft wraps the model so the LoRA init, and hence the whole run, depends only on cfg.seed.
    set_seed(cfg.seed)
    staging = ckpt.local_dir(cfg.checkpoint.dir) / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # leftovers of a killed attempt; never a committed checkpoint
    args = GRPOConfig(**grpo_kwargs(cfg, str(staging), use_cpu=not torch.cuda.is_available()))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=_reward_fn(cfg),
        args=args,
        train_dataset=datasets.Dataset.from_list(to_trl_rows(train_rows)),
        processing_class=processor,
        peft_config=lora_config(cfg),
        callbacks=make_callbacks(cfg, reporter, n_steps, evaluator),
    )
    # One concise log line per step (ReportProgress) instead of transformers' raw dict printing.
    trainer.remove_callback(PrinterCallback)
    if resume is not None:
        log.info("resuming from step %d at %s", resume.step, resume.path)
    trainer.train(resume_from_checkpoint=str(resume.path / "policy") if resume else None)
    return trainer.model, trainer.state.global_step


def run(cfg: TrainerConfig, *, evaluate: bool = True, attempt: int | None = None) -> LocalResult:
    if cfg.dataset.environment is not None:  # multi-turn episodes: our own GRPO loop (see local_episodes.py)
        from mmrl_trainer.backends import local_episodes

        local_episodes.check_local_environment(cfg)
        return local_episodes.run(cfg, evaluate=evaluate, attempt=attempt)
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from mmrl_trainer.adapter import export_adapter
    from mmrl_trainer.data import load_examples
    from mmrl_trainer.evaluate import held_out_reward
    from mmrl_trainer.lineage import baseline_due
    from mmrl_trainer.models import resolve_model
    from mmrl_trainer.rewards import resolve

    root, resume, reporter = start_attempt(cfg, attempt)
    model_path = resolve_model(cfg.model)
    rows = load_examples(cfg.dataset.train, cfg.dataset, seed=cfg.seed)

    processor = AutoProcessor.from_pretrained(model_path, revision=cfg.model.revision)
    rows = drop_long_prompts(rows, processor, cfg.algorithm.max_prompt_length)
    n_steps = total_steps(cfg, len(rows))
    score = resolve(cfg.dataset.reward)
    held_out = (
        load_examples(cfg.dataset.validation, cfg.dataset, seed=cfg.seed + 1)
        if evaluate and cfg.dataset.validation
        else []
    )

    def evaluator(policy, limit: int | None = EVAL_AT_CHECKPOINT) -> float:
        return held_out_reward(
            policy,
            processor,
            held_out[:limit],
            score,
            temperature=cfg.algorithm.temperature,
            max_new_tokens=cfg.algorithm.max_response_length,
        )

    model = AutoModelForImageTextToText.from_pretrained(model_path, revision=cfg.model.revision, dtype=torch.float32)
    if held_out and baseline_due(reporter.metrics_file, resuming=resume is not None):
        # The untrained policy's held-out reward, on the same prompts as the final evaluation: the "before" that
        # every checkpoint's eval_reward compares with, and the promotion gate's baseline (lineage.py).
        reporter.record(0, {"event": "baseline", "eval_reward": evaluator(model, None)})
    if resume is not None and resume.step >= n_steps:
        policy, final_step = trained_policy(model, resume), resume.step
    else:
        scorer = evaluator if held_out else None
        policy, final_step = train_grpo(cfg, model, processor, rows, resume, reporter, n_steps, scorer)
    info = export_adapter(policy, cfg.export_dir, base_model=cfg.model.name)
    reward = evaluator(policy, None) if held_out else None
    summary = {"event": "finished", "held_out_reward": reward}
    reporter.report(final_step, n_steps, summary, checkpoint=reporter.checkpoint, force=True)
    reporter.finish()
    shutil.rmtree(root / STAGING, ignore_errors=True)
    return LocalResult(final_step, resume.step if resume else None, info.path, reward)
