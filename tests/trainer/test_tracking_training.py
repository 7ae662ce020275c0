"""The local backend's real GRPO training reaches a real MLflow tracking server and the TensorBoard files: reward,
KL and step time for every step, and the base model's held-out reward at step 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_trainer.backends import local
from tests.support.mlflow_server import running_mlflow
from tests.trainer.conftest import make_config

pytestmark = pytest.mark.trainer
STEPS = 2


def test_training_metrics_reach_mlflow_and_tensorboard(tmp_path: Path, tiny_model: Path) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job_dir = tmp_path / "job"
    with running_mlflow(tmp_path / "mlflow") as url:
        cfg = make_config(job_dir, tiny_model, maxSteps=STEPS, klCoef=0.05)
        cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_validate({"mlflow": {"trackingUri": url}})})
        result = local.run(cfg, attempt=1)
        assert result.final_step == STEPS

        client = MlflowClient(url)
        (run,) = client.search_runs([client.get_experiment_by_name("default").experiment_id])
        assert run.info.status == "FINISHED"
        history = {
            k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics
        }
    for key in ("reward", "kl", "step_time"):
        assert sorted(step for step, _ in history[key]) == list(range(1, STEPS + 1)), key
    assert all(value > 0 for _, value in history["step_time"])
    assert min(step for step, _ in history["eval_reward"]) == 0  # the baseline, before any training
    assert history["held_out_reward"] == [(STEPS, result.held_out_reward)]

    acc = EventAccumulator(str(job_dir / "tracking" / "tensorboard"))
    acc.Reload()
    for key in ("reward", "kl", "step_time"):
        tb = [(e.step, round(e.value, 5)) for e in acc.Scalars(key)]
        assert tb == sorted((s, round(v, 5)) for s, v in history[key]), key
