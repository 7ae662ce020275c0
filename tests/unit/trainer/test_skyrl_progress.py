"""The SkyRL backend's progress hook: SkyRL metrics → our reports, checkpoints from the directory, SkyRL's own API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl_progress import (
    REWARD_KEY,
    TRUNCATED_KEY,
    SkyRLProgress,
    step_metrics,
    truncated_fraction,
)
from mmrl_trainer.progress import ProgressReporter
from tests.support.skyrl import last_json, run_skyrl

# One step's log dict as SkyRL 0.3.0's RayPPOTrainer builds it (a subset; names from skyrl/train/trainer.py).
SKYRL_LOGS: dict[str, Any] = {
    "reward/avg_raw_reward": 0.375,
    "reward/avg_pass_at_4": 0.75,
    "reward/mean_positive_reward": 0.375,
    "loss/avg_final_rewards": 0.375,
    "policy/final_loss": -0.012,
    "policy/policy_loss": -0.012,
    "policy/policy_entropy": 1.5,
    "policy/grad_norm": 0.8,
    "policy/policy_lr": 3e-5,
    "generate/avg_num_tokens": 12.0,
    "timing/step": 41.5,
    "timing/generate": 30.0,
    "trainer/epoch": 0,
    "trainer/global_step": 1,
}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def progress_of(patch: dict[str, Any]) -> dict[str, Any]:
    return patch["status"]["progress"]


def make(tmp_path: Path, ckpt_dir: str | None = None) -> tuple[SkyRLProgress, list[dict[str, Any]], Path]:
    patches: list[dict[str, Any]] = []
    metrics = tmp_path / "metrics.jsonl"
    # A long interval: only the first report and the forced ones reach the API.
    reporter = ProgressReporter(metrics, patches.append, min_interval=3600)
    return SkyRLProgress(reporter, ckpt_dir or str(tmp_path / "ckpt")), patches, metrics


def test_our_step_metrics_take_the_reward_from_skyrls_avg_raw_reward_and_keep_local_names() -> None:
    assert REWARD_KEY == "reward/avg_raw_reward"
    assert step_metrics(SKYRL_LOGS) == {
        "reward": 0.375,
        "pass_at_4": 0.75,
        "loss": -0.012,
        "entropy": 1.5,
        "grad_norm": 0.8,
        "learning_rate": 3e-5,
        "completion_length": 12.0,
        "step_time": 41.5,
    }
    bad = {REWARD_KEY: float("nan"), "policy/grad_norm": "x", "policy/policy_kl": True, "eval/all/avg_score": 0.5}
    assert step_metrics(bad) == {"eval_reward": 0.5}
    assert step_metrics(None) == {}


def test_steps_and_rewards_reach_the_metrics_file_and_the_status(tmp_path: Path) -> None:
    progress, patches, metrics = make(tmp_path)
    progress.on_train_start(0, 6)
    progress.on_log(1, 6, SKYRL_LOGS)
    progress.on_log(2, 6, {**SKYRL_LOGS, REWARD_KEY: 0.5})
    rows = records(metrics)
    assert [(r["step"], r["totalSteps"], r.get("reward")) for r in rows] == [(0, 6, None), (1, 6, 0.375), (2, 6, 0.5)]
    assert rows[1]["pass_at_4"] == 0.75 and rows[1]["step_time"] == 41.5
    assert len(patches) == 1  # the start beat; the steps are rate-limited
    assert progress_of(patches[0])["step"] == 0 and progress_of(patches[0])["totalSteps"] == 6
    progress.on_train_end(2, 6)
    last = progress_of(patches[-1])
    assert (last["step"], last["totalSteps"], last["rewardMean"]) == (2, 6, 0.5)
    assert last["heartbeat"].endswith("Z") and "lastCheckpoint" not in last


def test_a_new_complete_checkpoint_is_attached_once_and_forces_the_patch(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    progress, patches, metrics = make(tmp_path)
    progress.on_train_start(0, 6)
    progress.on_log(1, 6, SKYRL_LOGS)

    ckpt.begin_step(root, 2)  # half-written: no marker yet
    progress.on_log(2, 6, SKYRL_LOGS)
    assert len(patches) == 1

    ckpt.commit_step(root, 2)
    progress.on_save(2, 6)
    assert len(patches) == 2
    assert progress_of(patches[-1])["lastCheckpoint"]["step"] == 2
    assert progress_of(patches[-1])["lastCheckpoint"]["path"] == str(root / "global_step_2")
    progress.on_log(2, 6, SKYRL_LOGS)  # same checkpoint: nothing forced
    progress.on_log(3, 6, SKYRL_LOGS)
    assert len(patches) == 2

    # SkyRL's own layout: the step's files, then latest_ckpt_global_step.txt; no manifest. Seen at the next log.
    (root / "global_step_4" / "policy").mkdir(parents=True)
    (root / "latest_ckpt_global_step.txt").write_text("4")
    progress.on_log(4, 6, SKYRL_LOGS)
    assert len(patches) == 3
    last = progress_of(patches[-1])["lastCheckpoint"]
    assert last["step"] == 4 and last["time"].endswith("Z")
    rows = records(metrics)
    assert [r["step"] for r in rows] == [0, 1, 2, 2, 2, 3, 4]
    assert rows[3]["event"] == "checkpoint"


def test_a_stale_marker_beyond_the_current_step_is_not_reported(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    ckpt.begin_step(root, 50)
    ckpt.commit_step(root, 50)
    progress, patches, _ = make(tmp_path)
    progress.on_train_start(0, 6)
    progress.on_log(1, 6, SKYRL_LOGS)
    assert all("lastCheckpoint" not in progress_of(p) for p in patches)


def test_started_names_the_resume_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    ckpt.begin_step(root, 3)
    ckpt.commit_step(root, 3)
    progress, patches, metrics = make(tmp_path)
    progress.started()
    assert records(metrics)[0]["step"] == 3
    assert progress_of(patches[0])["lastCheckpoint"]["step"] == 3
    progress.on_train_start(3, 6)  # SkyRL's loop starts at the resumed step
    assert progress_of(patches[-1])["step"] == 3
    assert progress_of(patches[-1])["lastCheckpoint"]["step"] == 3


def test_s3_checkpoint_dirs_report_steps_without_a_checkpoint(tmp_path: Path) -> None:
    progress, patches, metrics = make(tmp_path, "s3://bucket/jobs/a")
    progress.on_train_start(0, 2)
    progress.on_save(1, 2)
    progress.on_log(1, 2, SKYRL_LOGS)
    assert records(metrics)[-1]["reward"] == 0.375
    assert all("lastCheckpoint" not in progress_of(p) for p in patches)


def test_a_failing_report_never_raises_out_of_our_progress_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    progress, _, _ = make(tmp_path)

    def broken(root: Any) -> None:
        raise OSError("stale file handle")

    monkeypatch.setattr(ckpt, "latest_complete", broken)
    progress.on_log(1, 6, SKYRL_LOGS)
    progress.on_save(1, 6)
    assert progress.report(1, 6, {}) is False


# In the SkyRL venv (`make skyrl-venv`; tests.support.skyrl), the hook runs through SkyRL's own classes.
_PRELUDE = r"""
import json, sys, typing
if sys.version_info < (3, 12):  # skyrl's pydantic models need typing_extensions.TypedDict before 3.12
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
from pathlib import Path
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress, experiment_class, training_callback
from mmrl_trainer.progress import ProgressReporter
metrics_file, ckpt_dir = sys.argv[1:3]
patches = []
progress = SkyRLProgress(ProgressReporter(metrics_file, patches.append, min_interval=3600), ckpt_dir)
root = Path(ckpt_dir)

def save_like_skyrl(step):  # RayPPOTrainer.save_checkpoints: the step's files, then the marker, last
    (root / f"global_step_{step}" / "policy").mkdir(parents=True)
    (root / f"global_step_{step}" / "trainer_state.pt").write_bytes(b"state")
    (root / "latest_ckpt_global_step.txt").write_text(str(step))
    return str(root / f"global_step_{step}")

def payload(step):
    return {"reward/avg_raw_reward": step / 10, "reward/avg_pass_at_4": 0.5, "policy/final_loss": 0.1,
            "timing/step": 2.0, "trainer/epoch": 0, "trainer/global_step": step}
"""

# SkyRL's callback API driven as RayPPOTrainer.train drives it, with the tracker BasePPOExp.get_tracker builds.
_CALLBACKS = r"""
from skyrl.train.utils.callbacks import CallbackHandler, CallbackInput, TrainingCallback, TrainingControl
from skyrl.train.utils.tracking import Tracking
tracker = Tracking(project_name="mmrl", experiment_name="ns-job", backend="console", config=None)
callback = training_callback(progress)
assert isinstance(callback, TrainingCallback)
handler, control = CallbackHandler([callback]), TrainingControl()

def fire(event, step, **fields):
    state = CallbackInput(global_step=step, epoch=0, total_steps=3, steps_per_epoch=3, **fields)
    getattr(handler, event)(None, state, control)

fire("on_train_start", 0)
fire("on_epoch_start", 1)
for step in (1, 2, 3):
    fire("on_step_start", step)
    fire("on_step_end", step, metrics={"final_loss": 0.1})
    if step == 2:
        fire("on_save", step, ckpt_path=save_like_skyrl(step))
    fire("on_eval_start", step)
    fire("on_eval_end", step, metrics={})
    fire("on_log", step, logs=payload(step))
    tracker.log(payload(step), step=step, commit=True)
fire("on_epoch_end", 3)
fire("on_save", 3, ckpt_path=save_like_skyrl(3))  # the final save after the loop
fire("on_train_end", 3)
tracker.finish()
print(json.dumps(patches))
"""

# The real trainer: our BasePPOExp subclass builds SkyRL's RayPPOTrainer (its own total-step count) with the callback.
_BUILD = r"""
from skyrl.train.trainer import RayPPOTrainer
from transformers import AutoTokenizer
from skyrl.train.dataset import PromptDataset
from skyrl.train.utils.tracking import Tracking
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
parquet, tokenizer_dir = sys.argv[3:5]
cfg = build_skyrl_config(json.load(sys.stdin))
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
dataset = PromptDataset([parquet], tokenizer, max_prompt_length=cfg.trainer.max_prompt_length, num_workers=1)
tracker = Tracking(cfg.trainer.project_name, cfg.trainer.run_name, backend=cfg.trainer.logger, config=cfg)
cls = experiment_class(progress)
exp = cls.__new__(cls)  # BasePPOExp.__init__ asks Ray for GPUs; get_trainer needs none of it
exp.cfg = cfg
trainer = exp.get_trainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=dataset, eval_dataset=None,
                          inference_engine_client=None, generator=None, colocate_pg=None)
assert isinstance(trainer, RayPPOTrainer), type(trainer)
"""
_TRAINER = (
    _BUILD
    + r"""
trainer._fire("on_train_start")
for step in (1, 2):
    trainer.global_step = step
    if step == 2:
        trainer._fire("on_save", ckpt_path=save_like_skyrl(step))
    trainer._fire("on_log", logs=payload(step))
    trainer.tracker.log(payload(step), step=step, commit=True)
trainer._fire("on_train_end")
print(json.dumps({"total": trainer.total_training_steps, "patches": patches}))
"""
)

# RayPPOTrainer.generate of the trainer our experiment builds, with a stand-in for SkyRL's generator (which needs
# vLLM): 3 of 4 rollouts stopped for length. SkyRL's own rollout metrics are computed by its get_rollout_metrics.
_TRUNCATED = (
    _BUILD
    + r"""
import asyncio
from skyrl.train.generators.utils import get_rollout_metrics
from mmrl_trainer.backends.skyrl_progress import TRUNCATED_KEY

class StandInGenerator:
    async def generate(self, input_batch):
        responses = [[5, 6, 7], [5, 2], [5, 6, 7], [5, 6, 7]]
        return {
            "prompt_token_ids": [[1, 2]] * 4, "response_ids": responses, "rewards": [0.0, 1.0, 0.0, 0.0],
            "loss_masks": [[1] * len(r) for r in responses], "stop_reasons": ["length", "stop", "length", "length"],
            "rollout_metrics": get_rollout_metrics(responses, [0.0, 1.0, 0.0, 0.0]), "rollout_logprobs": None,
        }

trainer.generator = StandInGenerator()
trainer.all_metrics = {}
asyncio.run(trainer.generate({"prompts": [[{"role": "user", "content": "q"}]] * 4}))
print(json.dumps({k: trainer.all_metrics[k] for k in (TRUNCATED_KEY, "generate/avg_num_tokens")}))
"""
)


# The trainer our experiment builds, reporting into the TensorBoard sink: SkyRL's own logs reach it, mapped and raw.
_TRACKED = (
    _BUILD
    + r"""
from mmrl_trainer.tracking import Tracker
from mmrl_trainer.tracking.sinks import TensorBoardSink
progress.reporter.tracker = Tracker([TensorBoardSink(Path(sys.argv[5]), purge_step=None)])
trainer._fire("on_train_start")
for step in (1, 2):
    trainer.global_step = step
    trainer._fire("on_log", logs=payload(step))
trainer._fire("on_train_end")
print(json.dumps({"open": progress.reporter.tracker is not None}))
"""
)


def run_in_skyrl(script: str, *args: str, stdin: str = "") -> Any:
    return last_json(run_skyrl(_PRELUDE + script, *args, stdin=stdin))


def test_skyrl_callback_api_reports_steps_rewards_and_checkpoints(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    patches = run_in_skyrl(_CALLBACKS, str(metrics), str(tmp_path / "ckpt"))
    rows = records(metrics)
    steps = [(r["step"], r.get("reward"), r.get("event")) for r in rows]
    assert steps == [
        (0, None, "training"),
        (1, 0.1, None),
        (2, None, "checkpoint"),
        (2, 0.2, None),
        (3, 0.3, None),
        (3, None, "checkpoint"),
        (3, None, "finished"),
    ]
    assert all(r["totalSteps"] == 3 for r in rows)
    # Sent: the start beat, both saves (each with its new checkpoint) and the end; the plain steps were rate-limited.
    sent = [progress_of(p) for p in patches]
    assert [(p["step"], p.get("lastCheckpoint", {}).get("step")) for p in sent] == [(0, None), (2, 2), (3, 3), (3, 3)]
    assert sent[1]["rewardMean"] == 0.1 and sent[-1]["rewardMean"] == 0.3


def trainer_inputs(tmp_path: Path) -> list[str]:
    """Arguments of _BUILD: the reference job with 13 prompts, batches of 4 and 2 epochs."""
    from mmrl_trainer.backends.skyrl_config import skyrl_overrides
    from mmrl_trainer.data import to_skyrl_rows, write_parquet
    from mmrl_trainer.synthetic import colour_examples
    from mmrl_trainer.tiny import build_tokenizer
    from tests.unit.trainer.test_skyrl_overrides import reference_overrides

    _, cfg = reference_overrides()
    algorithm = cfg.algorithm.model_copy(update={"train_batch_size": 4, "mini_batch_size": 4, "epochs": 2})
    cfg = cfg.model_copy(update={"algorithm": algorithm})
    parquet = write_parquet(to_skyrl_rows(colour_examples(13, 0), data_source="colors"), tmp_path / "t.parquet")
    build_tokenizer().save_pretrained(tmp_path / "tok")
    overrides = skyrl_overrides(cfg, train_files=[str(parquet)], val_files=[])
    # No Ray here: SkyRL's vLLM metrics scraper would ask Ray for its nodes while the trainer is built.
    overrides["generator.inference_engine.enable_ray_prometheus_stats"] = False
    return [
        json.dumps(overrides),
        str(tmp_path / "metrics.jsonl"),
        str(tmp_path / "ckpt"),
        str(parquet),
        str(tmp_path / "tok"),
    ]


def test_skyrl_trainer_built_by_our_experiment_carries_the_hook(tmp_path: Path) -> None:
    overrides, *args = trainer_inputs(tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    out = run_in_skyrl(_TRAINER, *args, stdin=overrides)
    assert out["total"] == 6  # 13 prompts / batch 4 = 3 full batches a epoch, x 2 epochs: SkyRL's own count
    rows = records(metrics)
    assert [(r["step"], r["totalSteps"], r.get("reward")) for r in rows] == [
        (0, 6, None),
        (1, 6, 0.1),
        (2, 6, None),
        (2, 6, 0.2),
        (2, 6, None),
    ]
    assert progress_of(out["patches"][-1])["lastCheckpoint"]["step"] == 2


def test_skyrl_trainer_counts_rollouts_that_stopped_for_length(tmp_path: Path) -> None:
    overrides, *args = trainer_inputs(tmp_path)
    out = run_in_skyrl(_TRUNCATED, *args, stdin=overrides)
    assert out == {TRUNCATED_KEY: 0.75, "generate/avg_num_tokens": 2.75}


def test_truncated_fraction_reaches_the_status_progress(tmp_path: Path) -> None:
    patches: list[dict] = []
    progress = SkyRLProgress(ProgressReporter(None, patches.append, min_interval=0), str(tmp_path))
    progress.on_log(3, 10, {**SKYRL_LOGS, TRUNCATED_KEY: 0.5})
    assert step_metrics({TRUNCATED_KEY: 0.5, "x": 1})["truncated_fraction"] == 0.5
    assert progress_of(patches[-1])["truncatedFraction"] == 0.5
    assert truncated_fraction(["length", "stop", "abort", "length"]) == 0.5 and truncated_fraction([]) is None


def test_our_hook_maps_skyrls_environment_metrics_to_status_episodes(tmp_path: Path) -> None:
    # What SkyRL logs for a step of the maze (the helper's SkyRL run reported these two keys, see
    # tests/skyrl/test_skyrl_maze_episodes.py): the env's get_metrics averaged over the step's episodes.
    logs = {**SKYRL_LOGS, "environment/success": 0.333333, "environment/turns": 4.333333}
    assert step_metrics(logs)["episode_success"] == 0.333333 and step_metrics(logs)["episode_turns"] == 4.333333
    progress, patches, _ = make(tmp_path)
    progress.on_train_start(0, 6)
    progress.on_log(1, 6, logs)
    progress.on_train_end(1, 6)
    assert progress_of(patches[-1])["episodes"] == {"successRate": 0.3333, "turns": 4.3333, "tokens": 12.0}


def test_skyrl_trainer_logs_reach_the_tracking_sinks_under_both_names(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides, *args = trainer_inputs(tmp_path)
    out = run_in_skyrl(_TRACKED, *args, str(tmp_path), stdin=overrides)
    assert out == {"open": False}  # on_train_end closed the runs
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    values = {t: [(e.step, round(e.value, 5)) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    assert values["reward"] == [(1, 0.1), (2, 0.2)] and values["step_time"] == [(1, 2.0), (2, 2.0)]
    assert values["skyrl/reward/avg_raw_reward"] == values["reward"]
    assert values["skyrl/trainer/global_step"] == [(1, 1.0), (2, 2.0)]
