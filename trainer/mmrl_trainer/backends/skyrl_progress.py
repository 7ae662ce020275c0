"""Progress for the SkyRL backend: SkyRL's training events become ProgressReporter reports, as the local backend's are.

SkyRL 0.3.0's `RayPPOTrainer` dispatches its training events to `skyrl.train.utils.callbacks.TrainingCallback`
objects (registered with `trainer.add_callback`): `on_log` carries the dict the trainer is about to hand to its
tracker (`Tracking.log`) with the global step and SkyRL's total step count, and `on_save` fires after a checkpoint's
marker has been written. `SkyRLProgress` turns those events into `ProgressReporter.report` calls: every logged step
with its reward (SkyRL's `reward/avg_raw_reward`, the mean raw environment reward over all samples of the step) and a
few other scalars under the local backend's names, plus the newest complete checkpoint read from the checkpoint
directory with `mmrl_trainer.checkpoint` (reported, and forced through the rate limit, whenever it changes; none for
s3:// directories). It beats when SkyRL's loop starts (after resume), at every logged step, after every save and at
the end; a failing report is logged and never reaches SkyRL's loop. `experiment_class` is SkyRL's `BasePPOExp` with
the callback added to the trainer it builds; it must run where the loop runs, inside the `@ray.remote` entry of
`backends/skyrl.py`. SkyRL is imported only there, so the mapping is unit-tested without it.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.checkpoint import Checkpoint
from mmrl_trainer.progress import ProgressReporter

if TYPE_CHECKING:
    from mmrl_api.trainer_config import TrainerConfig

log = logging.getLogger("mmrl_trainer.skyrl")

REWARD_KEY = "reward/avg_raw_reward"
# Ours, added to the step's metrics by `experiment_class`: SkyRL logs token counts but not how many rollouts hit
# the length limit (its generators set stop_reason "length" then: skyrl_gym_generator / skyrl_vlm_generator).
TRUNCATED_KEY = "generate/truncated_fraction"
ENV_SUCCESS_KEY = "environment/success"
ENV_TURNS_KEY = "environment/turns"
# SkyRL's per-step metric → its name in metrics.jsonl (the local backend's name where it logs the same quantity).
METRICS: dict[str, str] = {
    REWARD_KEY: "reward",
    "policy/final_loss": "loss",
    "policy/policy_kl": "kl",
    "policy/grad_norm": "grad_norm",
    "policy/policy_lr": "learning_rate",
    "policy/policy_entropy": "entropy",
    "generate/avg_num_tokens": "completion_length",
    "timing/step": "step_time",
    "eval/all/avg_score": "eval_reward",
    TRUNCATED_KEY: "truncated_fraction",
    # Multi-turn: what the environment's get_metrics returns, averaged over the step's episodes by SkyRL
    # (train/generators/utils.py:get_rollout_metrics names each key `environment/<key>`, after the class's own
    # aggregate_metrics, by default skyrl_gym/metrics.py:default_aggregate_metrics, the mean of the numbers). Ours
    # (skyrl_episode_env.py) and a job's SkyRL-Gym class alike: `success` (1 or True for a solved episode) becomes
    # status.progress.episodes.successRate and `turns` episodes.turns; every key, these two included, also reaches
    # the tracking sinks under SkyRL's name, `skyrl/environment/<key>` (docs/environments.md).
    ENV_SUCCESS_KEY: "episode_success",
    ENV_TURNS_KEY: "episode_turns",
}
_PASS_AT = re.compile(r"^reward/avg_pass_at_(\d+)$")


def step_metrics(logs: Mapping[str, Any] | None) -> dict[str, float]:
    """The scalars we keep from one SkyRL log dict; missing, non-numeric and non-finite values are left out."""
    out: dict[str, float] = {}
    for key, value in (logs or {}).items():
        name = METRICS.get(key)
        if name is None and (match := _PASS_AT.match(key)):
            name = f"pass_at_{match.group(1)}"
        if name is None or isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[name] = number
    return out


def truncated_fraction(stop_reasons: list[Any] | None) -> float | None:
    """Fraction of rollouts that stopped for length (vLLM's finish_reason "length", or SkyRL's own when the prompt
    plus response outgrew the context); None without stop reasons."""
    if not stop_reasons:
        return None
    return sum(1 for reason in stop_reasons if reason == "length") / len(stop_reasons)


def _key(checkpoint: Checkpoint) -> tuple[int, str]:
    return checkpoint.step, str(checkpoint.path)


class SkyRLProgress:
    """Reports SkyRL's steps and checkpoints through a ProgressReporter; every method is safe to call from SkyRL."""

    def __init__(self, reporter: ProgressReporter, checkpoint_dir: str, *, resume: bool = True) -> None:
        self.reporter = reporter
        self.root: Path | None = None if checkpoint_dir.startswith("s3://") else ckpt.local_dir(checkpoint_dir)
        self.resume = resume
        self.reported: tuple[int, str] | None = None  # the checkpoint last handed to the reporter

    @classmethod
    def from_config(cls, cfg: TrainerConfig, *, attempt: int | None = None) -> SkyRLProgress:
        reporter = ProgressReporter.from_config(cfg, attempt=attempt)
        return cls(reporter, cfg.checkpoint.dir, resume=cfg.resume == "latest")

    def newest_checkpoint(self) -> Checkpoint | None:
        """The newest complete step under a local checkpoint dir, timed by its marker (SkyRL writes no manifest)."""
        if self.root is None:
            return None
        found = ckpt.latest_complete(self.root)
        if found is None or found.time is not None or ckpt.read_marker(self.root) != found.step:
            return found
        try:
            mtime = (self.root / ckpt.MARKER).stat().st_mtime
        except OSError:
            return found
        return replace(found, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime)))

    def started(self) -> None:
        """Before SkyRL's slow start-up: the attempt and the checkpoint SkyRL will resume from (no heartbeat)."""
        try:
            resumed = self.newest_checkpoint() if self.resume else None
            self.reported = _key(resumed) if resumed else None
            self.reporter.started(resumed)
        except Exception as err:  # reporting must never stop training
            log.warning("progress report failed (training continues): %s", err)

    def report(
        self,
        step: int,
        total_steps: int | None,
        metrics: dict[str, Any],
        *,
        force: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """One report at `step`; a checkpoint completed since the last report is attached and forces the patch."""
        try:
            newest = self.newest_checkpoint()
            # A step beyond the one being reported cannot be this run's: a stale marker of an earlier run.
            changed = newest is not None and newest.step <= step and _key(newest) != self.reported
            if changed and newest is not None:
                self.reported = _key(newest)
            return self.reporter.report(
                step,
                total_steps or None,  # SkyRL passes 0 when it does not know
                metrics,
                checkpoint=newest if changed else None,
                force=force or changed,
                extra=extra,
                extra_prefix="skyrl/",
            )
        except Exception as err:  # reporting must never stop training
            log.warning("progress report failed at step %d (training continues): %s", step, err)
            return False

    # SkyRL's events, by the name of the TrainingCallback method that forwards each one.
    def on_train_start(self, step: int, total_steps: int | None) -> None:
        self.report(step, total_steps, {"event": "training"}, force=True)

    def on_log(self, step: int, total_steps: int | None, logs: Mapping[str, Any] | None) -> None:
        self.report(step, total_steps, step_metrics(logs), extra=dict(logs or {}))

    def on_save(self, step: int, total_steps: int | None) -> None:
        self.report(step, total_steps, {"event": "checkpoint"}, force=True)

    def on_train_end(self, step: int, total_steps: int | None) -> None:
        self.report(step, total_steps, {"event": "finished"}, force=True)
        try:
            self.reporter.finish()
        except Exception as err:  # tracking must never stop training
            log.warning("closing the tracking runs failed: %s", err)


def training_callback(progress: SkyRLProgress) -> Any:
    """A SkyRL `TrainingCallback` forwarding the trainer's events to `progress` (imports SkyRL)."""
    from skyrl.train.utils.callbacks import TrainingCallback

    class ProgressCallback(TrainingCallback):
        def on_train_start(self, trainer: Any, callback_input: Any, control: Any) -> None:
            progress.on_train_start(callback_input.global_step, callback_input.total_steps)

        def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
            progress.on_log(callback_input.global_step, callback_input.total_steps, callback_input.logs)

        def on_save(self, trainer: Any, callback_input: Any, control: Any) -> None:
            progress.on_save(callback_input.global_step, callback_input.total_steps)

        def on_train_end(self, trainer: Any, callback_input: Any, control: Any) -> None:
            progress.on_train_end(callback_input.global_step, callback_input.total_steps)

    return ProgressCallback()


def experiment_class(progress: SkyRLProgress) -> type[Any]:
    """SkyRL's `BasePPOExp` whose trainer reports to `progress` (imports SkyRL)."""
    from skyrl.train.entrypoints.main_base import BasePPOExp

    class ProgressPPOExp(BasePPOExp):
        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.add_callback(training_callback(progress))
            count_truncated_rollouts(trainer)
            return trainer

    return ProgressPPOExp


def count_truncated_rollouts(trainer: Any) -> None:
    """Add TRUNCATED_KEY to the metrics of each training step. RayPPOTrainer.generate (skyrl 0.3.0) returns the
    generator's output with `stop_reasons` and the step's metrics go to `trainer.all_metrics`, which the training
    loop hands to `on_log`."""
    generate = trainer.generate

    async def generate_and_count(*args: Any, **kwargs: Any) -> Any:
        output = await generate(*args, **kwargs)
        fraction = truncated_fraction(output.get("stop_reasons"))
        if fraction is not None:
            trainer.all_metrics[TRUNCATED_KEY] = fraction
        return output

    trainer.generate = generate_and_count
