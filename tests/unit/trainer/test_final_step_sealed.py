"""An attempt that starts once the run's last step is sealed exports it and trains nothing (SkyRL's loop, like
TRL's, checks the step limit only after a step; the local backend's side runs for real in tests/trainer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl import final_step_sealed, last_step
from mmrl_trainer.world_size import check_resume_world_size
from tests.unit.trainer.skyrl_job import skyrl_config


def config(job: Path, max_steps: int | None = None, resume: str = "latest", epochs: int = 3) -> TrainerConfig:
    algorithm = {"epochs": epochs, **({"maxSteps": max_steps} if max_steps else {})}  # trainBatchSize 4
    return TrainerConfig.model_validate(skyrl_config(str(job), algorithm=algorithm, resume=resume))


@pytest.mark.parametrize(
    ("rows", "max_steps", "expected"),
    [
        (8, None, 6),  # 2 batches x 3 epochs
        (9, None, 6),  # the partial batch is dropped, as SkyRL's dataloader does
        (8, 4, 4),  # maxSteps ends the run first
        (8, 20, 6),  # the epochs end it first
        (3, None, 0),  # not one batch: SkyRL refuses such a run itself
    ],
)
def test_the_last_step_is_counted_as_skyrl_counts_it(tmp_path: Path, rows: int, max_steps: int | None, expected: int):
    assert last_step(config(tmp_path, max_steps), rows) == expected


@pytest.mark.parametrize(
    ("marker", "max_steps", "resume", "expected"),
    [
        ("6", None, "latest", 6),  # the last epoch's last step is sealed: export it
        ("5", None, "latest", None),  # one step left
        ("4", 4, "latest", 4),  # maxSteps reached
        ("4", 20, "latest", None),  # the user raised maxSteps: train on
        ("6", None, "none", None),  # not resuming: a fresh run
        (None, None, "latest", None),  # no checkpoint yet
    ],
)
def test_an_attempt_skips_training_only_when_the_sealed_step_is_the_last(
    tmp_path: Path, marker: str | None, max_steps: int | None, resume: str, expected: int | None
) -> None:
    if marker is not None:
        (tmp_path / ckpt.MARKER).write_text(marker)
    cfg = config(tmp_path, max_steps, resume)
    # The checkpoint the attempt resumes, as the driver reads it before deciding (skyrl._prepare).
    assert final_step_sealed(cfg, check_resume_world_size(cfg), train_rows=8) == expected


def test_a_run_too_small_for_one_batch_never_counts_as_finished(tmp_path: Path) -> None:
    (tmp_path / ckpt.MARKER).write_text("0")
    cfg = config(tmp_path)
    assert final_step_sealed(cfg, check_resume_world_size(cfg), train_rows=3) is None
