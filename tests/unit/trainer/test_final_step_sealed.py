"""An attempt that starts once the run's last step is sealed exports it and trains nothing (SkyRL's loop, like
TRL's, checks the step limit only after a step; the local backend's side runs for real in tests/trainer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl import final_step_sealed
from tests.unit.trainer.skyrl_job import skyrl_config


def config(job: Path, max_steps: int | None, resume: str = "latest") -> TrainerConfig:
    algorithm = {"maxSteps": max_steps} if max_steps else {}
    return TrainerConfig.model_validate(skyrl_config(str(job), algorithm=algorithm, resume=resume))


@pytest.mark.parametrize(
    ("marker", "max_steps", "resume", "expected"),
    [
        ("12", 12, "latest", 12),  # the last step is sealed: export it
        ("11", 12, "latest", None),  # one step left
        ("12", 20, "latest", None),  # the user raised maxSteps: train on
        ("12", None, "latest", None),  # epochs bound the run: SkyRL starts past its last epoch
        ("12", 12, "none", None),  # not resuming: a fresh run
        (None, 12, "latest", None),  # no checkpoint yet
    ],
)
def test_the_last_step_counts_as_sealed_only_when_it_is_the_runs_last(
    tmp_path: Path, marker: str | None, max_steps: int | None, resume: str, expected: int | None
) -> None:
    if marker is not None:
        (tmp_path / ckpt.MARKER).write_text(marker)
    assert final_step_sealed(config(tmp_path, max_steps, resume)) == expected
