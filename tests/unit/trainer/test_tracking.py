"""Experiment tracking: one job is one run in every sink, and a resumed attempt continues it.

Against the real things: TensorBoard files read back with tensorboard's own EventAccumulator, a real MLflow
tracking server (mlflow's `mlflow server` with a sqlite store, tests/support/mlflow_server.py), and W&B in offline
mode with its run file read back through W&B's own record schema (tests/support/wandb_records.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mmrl_api.trainer_config import TrainerConfig
from mmrl_local.cluster.controlplane import free_port
from mmrl_operator.cli.plot import from_mlflow, from_tensorboard
from mmrl_trainer.checkpoint import Checkpoint
from mmrl_trainer.progress import ProgressReporter
from mmrl_trainer.tracking import scalars
from mmrl_trainer.tracking.runs import read_runs, tracking_dir, wandb_run_id
from tests.support.mlflow_server import running_mlflow
from tests.support.wandb_records import history, run_ids

os.environ.setdefault("WANDB_SILENT", "true")

UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000000"


def config(job_dir: Path, tracking: dict) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "team-a", "name": "vqa", "uid": UID},
            "model": {"name": "/models/tiny"},
            "dataset": {"train": "synthetic://colors?n=8"},
            "checkpoint": {"dir": str(job_dir)},
            "export_dir": str(job_dir / "adapter"),
            "tracking": tracking,
        }
    )


def attempt(cfg: TrainerConfig, n: int, resumed: int | None, steps: range, ok: bool) -> list[dict]:
    """One attempt as the backends drive the reporter: started, a baseline on a fresh start, steps, finish."""
    sent: list[dict] = []
    reporter = ProgressReporter.from_config(cfg, attempt=n)
    reporter.patcher = sent.append
    reporter.started(Checkpoint(resumed, Path(cfg.checkpoint.dir) / f"global_step_{resumed}") if resumed else None)
    if resumed is None:
        reporter.record(0, {"event": "baseline", "eval_reward": 0.25})
    for step in steps:
        reporter.report(step, 5, {"reward": n + step / 10, "kl": 0.01 * step, "step_time": 1.5, "event": "x"})
    reporter.finish(ok=ok)
    return sent


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_two_attempts_log_into_one_run_in_every_sink(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    with running_mlflow(tmp_path / "mlflow") as url:
        tracking = {
            "mlflow": {"trackingUri": url, "experiment": "vlm-rl"},
            "wandb": {"project": "p", "mode": "offline"},
        }
        cfg = config(job_dir, tracking)
        first = attempt(cfg, 1, None, range(1, 5), ok=False)  # steps 1-4, then the node is lost
        runs = read_runs(tracking_dir(job_dir))
        second = attempt(cfg, 2, 2, range(3, 6), ok=True)  # resumed from the step-2 checkpoint
        assert read_runs(tracking_dir(job_dir)) == runs  # the same runs, not new ones

        from mlflow.tracking import MlflowClient

        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("vlm-rl")
        found = client.search_runs([experiment.experiment_id])
        assert [r.info.run_id for r in found] == [runs["mlflow"]["runId"]]
        run = found[0]
        assert run.info.status == "FINISHED" and run.info.run_name == "vqa"
        assert run.data.tags["mmrl.dev/uid"] == UID and run.data.params["backend"] == "local"

        def series(key: str) -> list[tuple[int, float]]:
            return sorted((m.step, round(m.value, 6)) for m in client.get_metric_history(run.info.run_id, key))

        # MLflow keeps every logged point: the failed attempt's steps 3-4 and the resumed ones side by side.
        assert series("reward") == [(1, 1.1), (2, 1.2), (3, 1.3), (3, 2.3), (4, 1.4), (4, 2.4), (5, 2.5)]
        assert series("kl") == [(s, round(0.01 * s, 6)) for s in (1, 2, 3, 3, 4, 4, 5)]
        assert {v for _, v in series("step_time")} == {1.5}
        assert series("attempt") == [(0, 1.0), (2, 2.0)] and series("eval_reward") == [(0, 0.25)]

        # `mmrl plot` reads the same curve from MLflow (newest value per step) as from TensorBoard (purged).
        from_server = from_mlflow(url, run.info.run_id)
    from_files = from_tensorboard(job_dir / "tracking" / "tensorboard")
    expected = [(1, 1.1), (2, 1.2), (3, 2.3), (4, 2.4), (5, 2.5)]
    assert [(s, round(v, 5)) for s, v in from_server.series("reward")] == expected
    assert [(s, round(v, 5)) for s, v in from_files.series("reward")] == expected  # float32 in TensorBoard
    assert from_server.markers() == from_files.markers() == [(2.0, "attempt 2: resumed from step 2")]

    # TensorBoard: the resumed attempt purged what the first logged after its checkpoint.
    scalars_tb = tensorboard_scalars(job_dir / "tracking" / "tensorboard")
    assert scalars_tb["reward"] == [(1, 1.1), (2, 1.2), (3, 2.3), (4, 2.4), (5, 2.5)]
    assert scalars_tb["step_time"] == [(s, 1.5) for s in range(1, 6)]
    assert scalars_tb["attempt"] == [(0, 1.0), (2, 2.0)] and scalars_tb["eval_reward"] == [(0, 0.25)]

    # W&B offline: one run id, a run directory per attempt (`wandb sync` uploads both into that run).
    files = sorted((job_dir / "tracking" / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    assert {i for f in files for i in run_ids(f)} == {wandb_run_id("team-a", "vqa", UID)} == {runs["wandb"]["runId"]}
    rows = [r for f in files for r in history(f) if "reward" in r]
    assert [(r["trainer/step"], round(r["reward"], 6)) for r in rows] == [
        (1, 1.1),
        (2, 1.2),
        (3, 1.3),
        (4, 1.4),
        (3, 2.3),
        (4, 2.4),
        (5, 2.5),
    ]

    # status.tracking, sent when each attempt starts: the same runs both times.
    reports = [b["status"]["tracking"] for b in first + second if "tracking" in b["status"]]
    assert len(reports) == 2 and reports[0] == reports[1]
    assert reports[0]["tensorboard"] == str(job_dir / "tracking" / "tensorboard")
    assert reports[0]["mlflow"]["runId"] == runs["mlflow"]["runId"]
    assert reports[0]["mlflow"]["url"] == f"{url}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}"
    assert reports[0]["wandb"] == {"runId": runs["wandb"]["runId"]}  # offline: no URL yet


def test_a_tracking_server_that_does_not_answer_leaves_training_and_tensorboard_alone(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # a port nobody listens on
    cfg = config(tmp_path / "job", {"mlflow": {"trackingUri": dead}})
    sent = attempt(cfg, 1, None, range(1, 3), ok=True)
    assert [b["status"]["tracking"] for b in sent if "tracking" in b["status"]] == [
        {"tensorboard": str(tmp_path / "job" / "tracking" / "tensorboard")}
    ]
    assert "mlflow" not in read_runs(tracking_dir(tmp_path / "job"))
    assert tensorboard_scalars(tmp_path / "job" / "tracking" / "tensorboard")["reward"] == [(1, 1.1), (2, 1.2)]


def test_metrics_file_is_unchanged_by_tracking(tmp_path: Path) -> None:
    cfg = config(tmp_path / "job", {})
    attempt(cfg, 1, None, range(1, 2), ok=True)
    lines = [json.loads(x) for x in (tmp_path / "job" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("event") for r in lines] == ["started", "baseline", "x"]


def test_only_finite_numbers_are_tracked() -> None:
    got = scalars({"a": 1, "b": 0.5, "c": True, "d": "x", "e": None, "f": float("nan"), "g": float("inf")}, "p/")
    assert got == {"p/a": 1.0, "p/b": 0.5}


def test_wandb_run_ids_are_stable_per_job_and_differ_across_recreations() -> None:
    assert wandb_run_id("team-a", "vqa", UID) == "team-a-vqa-0f1e2d3c"
    assert wandb_run_id("team-a", "vqa", "ffff0000-1") != wandb_run_id("team-a", "vqa", UID)
    assert wandb_run_id("ns", "a.b", "") == "ns-a-b"
