"""The three sinks a job's metrics go to. Each takes a step and a dict of finite floats, and knows its run.

- TensorBoard: `torch.utils.tensorboard.SummaryWriter` on `<jobDir>/tracking/tensorboard`. A resumed attempt opens
  a new event file with `purge_step` one past the checkpoint it resumed from, so TensorBoard (and its
  EventAccumulator) drops the steps the failed attempt logged after that checkpoint: the curve is the run's real
  history, not two overlapping ones.
- MLflow: `MlflowClient` against spec.tracking.mlflow.trackingUri. The first attempt creates the run (in the
  experiment, created if missing) and every later one reopens it (status RUNNING again).
- W&B: `wandb.init(id=<job's run id>, resume="allow")`. Every value is logged with our `step` as its x axis
  (`define_metric`), because W&B's own step may only grow and a resume repeats steps.
Imports happen in the constructors: a job without MLflow never imports mlflow.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

from mmrl_api.tracking import MlflowSpec, WandbSpec

TENSORBOARD_DIR = "tensorboard"
WANDB_STEP = "trainer/step"


class Sink(Protocol):
    name: str

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self, ok: bool) -> None: ...

    def describe(self) -> dict[str, Any] | str: ...


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, directory: Path, *, purge_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = directory / TENSORBOARD_DIR
        self.writer = SummaryWriter(str(self.dir), purge_step=purge_step, flush_secs=30)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a pod lost right after a step must not take the step's values with it

    def close(self, ok: bool) -> None:
        self.writer.close()

    def describe(self) -> str:
        return str(self.dir)


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


class MlflowSink:
    name = "mlflow"

    def __init__(self, spec: MlflowSpec, saved: dict[str, Any] | None, *, job: str, namespace: str, tags: dict) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = spec.tracking_uri
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = spec.experiment or namespace
        run = None
        self.created = False
        if saved and saved.get("trackingUri") == self.uri and saved.get("runId"):
            try:
                run = self.client.get_run(saved["runId"])
                self.client.update_run(run.info.run_id, status="RUNNING")
            except Exception:  # deleted on the server, or another server under the same URL: a new run
                run = None
        if run is None:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
            run = self.client.create_run(experiment_id, run_name=job, tags=tags)
            self.created = True
        self.run_id = run.info.run_id
        self.experiment_id = run.info.experiment_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def close(self, ok: bool) -> None:
        # A failed attempt leaves the run RUNNING: the next attempt continues it. Only the end is final.
        if ok:
            self.client.set_terminated(self.run_id, "FINISHED")

    def describe(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "experimentId": self.experiment_id,
            "url": mlflow_run_url(self.uri, self.experiment_id, self.run_id),
            "trackingUri": self.uri,
        }


class WandbSink:
    name = "wandb"

    def __init__(self, spec: WandbSpec, run_id: str, directory: Path, *, job: str, config: dict[str, Any]) -> None:
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", x_disable_stats=True, silent=True)
        if spec.base_url:
            settings.base_url = spec.base_url
        self.run = wandb.init(
            project=spec.project,
            entity=spec.entity,
            id=run_id,
            resume="allow",
            name=job,
            dir=str(directory),
            mode=spec.mode,
            config=config,
            settings=settings,
        )
        self.run.define_metric(WANDB_STEP)
        self.run.define_metric("*", step_metric=WANDB_STEP)
        self.run_id = run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, WANDB_STEP: step})

    def close(self, ok: bool) -> None:
        self.run.finish(exit_code=0 if ok else 1)

    def describe(self) -> dict[str, Any]:
        url = self.run.url  # None offline
        return {"runId": self.run_id, **({"url": url} if url else {})}
