"""`mmrl plot`: the reward curve from a job's TensorBoard files, attempts marked, and where it looks for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_operator.cli.plot import draw, find_curves, from_tensorboard
from mmrl_trainer.checkpoint import Checkpoint
from mmrl_trainer.progress import ProgressReporter


def train(job_dir: Path, attempt: int, resumed: int | None, steps: range, final: float | None = None) -> None:
    """An attempt's reports, as a backend makes them (the real ProgressReporter and TensorBoard writer)."""
    cfg = TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "team", "name": "geo"},
            "model": {"name": "/m"},
            "dataset": {"train": "synthetic://colors"},
            "checkpoint": {"dir": str(job_dir)},
            "export_dir": str(job_dir / "adapter"),
            "progress": {"enabled": False},
        }
    )
    reporter = ProgressReporter.from_config(cfg, attempt=attempt)
    reporter.started(Checkpoint(resumed, job_dir / f"global_step_{resumed}") if resumed else None)
    if resumed is None:
        reporter.record(0, {"event": "baseline", "eval_reward": 0.2})
    for step in steps:
        reporter.report(step, 6, {"reward": 0.1 * step + attempt / 100})
        if step % 2 == 0:
            reporter.record(step, {"event": "eval", "eval_reward": 0.3 + 0.05 * step})
    if final is not None:
        reporter.report(steps[-1], 6, {"event": "finished", "held_out_reward": final})
    reporter.finish(ok=final is not None)


def test_the_curve_is_the_runs_history_with_each_later_attempt_marked(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    train(job_dir, 1, None, range(1, 6))  # lost after step 5; its last checkpoint was step 4
    train(job_dir, 2, 4, range(5, 7), final=0.75)
    curves = from_tensorboard(job_dir / "tracking" / "tensorboard")
    assert curves.series("reward") == [(s, pytest.approx(0.1 * s + (0.02 if s > 4 else 0.01))) for s in range(1, 7)]
    assert curves.held_out() == [(0, pytest.approx(0.2)), (2, pytest.approx(0.4)), (4, 0.5), (6, 0.75)]
    assert curves.attempt_starts() == [(1, 0, 0), (2, 4, 4)]
    assert curves.markers() == [(4.0, "attempt 2: resumed from step 4")]

    from PIL import Image

    out = draw(curves, tmp_path / "reward.png", "team/geo: reward")
    image = Image.open(out).convert("RGB")
    assert image.size == (720, 420)
    # The marker: a red vertical line at step 4 of 0..6 on the 60..700 px axis.
    x = round(60 + 4 / 6 * (720 - 60 - 20))
    assert sum(image.getpixel((x + dx, 200)) == (200, 0, 0) for dx in (-1, 0, 1)) >= 1


def test_an_attempt_that_started_over_is_marked_so(tmp_path: Path) -> None:
    train(tmp_path, 1, None, range(1, 3))
    train(tmp_path, 2, None, range(1, 4), final=0.5)
    assert from_tensorboard(tmp_path / "tracking" / "tensorboard").markers() == [(0.0, "attempt 2: started over")]


def test_where_the_curve_is_read_from(tmp_path: Path) -> None:
    train(tmp_path / "job", 1, None, range(1, 3), final=0.5)
    tb = tmp_path / "job" / "tracking" / "tensorboard"
    job = {"spec": {}, "status": {"tracking": {"tensorboard": "/not/mounted/here/tracking/tensorboard"}}}
    assert find_curves(job, tmp_path / "job").source == f"TensorBoard files in {tb}"  # --dir: a job directory
    assert find_curves(job, tb).source == f"TensorBoard files in {tb}"  # or the TensorBoard directory itself
    assert find_curves({"status": {"tracking": {"tensorboard": str(tb)}}}, None).series("reward")
    with pytest.raises(LookupError, match=r"/not/mounted/here/tracking/tensorboard .*pass --dir"):
        find_curves(job, None)
