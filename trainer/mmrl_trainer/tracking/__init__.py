"""Experiment tracking for every training path (TRL, the multi-turn loop, SkyRL): one `Tracker` per attempt.

Every path already reports each step's metrics through `ProgressReporter` (metrics.jsonl and status.progress), so
the tracker is fed there, with the same names in all three: `reward`, `kl`, `loss`, `step_time`, `eval_reward` (the
held-out reward; its step-0 point is the base model's), `held_out_reward` (the final one), `episode_success`, ...
plus `attempt` and `resumed_from_step` at the step each attempt starts from. SkyRL's own keys come along under
`skyrl/`. This is why SkyRL's `trainer.logger` stays `console` and TRL's `report_to` stays empty: SkyRL's
`Tracking` takes one backend and starts a new MLflow or W&B run in each process, TRL's callbacks likewise, and
neither reaches the multi-turn loop; here one job is one run in each sink, continued by every attempt.

Sinks never stop training. They open before the model loads (a sink that cannot open is logged and left out);
after that a background thread feeds them, so a slow tracking server cannot stall a step, and a sink that fails
five times in a row is dropped for the rest of the attempt.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
from typing import TYPE_CHECKING, Any

from mmrl_trainer.tracking.runs import read_runs, tracking_dir, wandb_run_id, write_runs
from mmrl_trainer.tracking.sinks import MlflowSink, Sink, TensorBoardSink, WandbSink

if TYPE_CHECKING:
    from mmrl_api.trainer_config import TrainerConfig

log = logging.getLogger("mmrl_trainer.tracking")
MAX_FAILURES = 5
_STOP = object()


def scalars(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a metrics dict (no booleans, strings or None), optionally renamed with a prefix."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[prefix + key] = float(value)
    return out


def run_params(cfg: TrainerConfig) -> dict[str, Any]:
    """What the run was asked to do, as flat parameters (MLflow params, W&B config)."""
    algo = cfg.algorithm
    params: dict[str, Any] = {
        "backend": cfg.backend,
        "model": cfg.model.name,
        "model_revision": cfg.model.revision or "",
        "lora_rank": cfg.lora.rank,
        "lora_alpha": cfg.lora.alpha,
        "learning_rate": algo.learning_rate,
        "samples_per_prompt": algo.samples_per_prompt,
        "train_batch_size": algo.train_batch_size,
        "kl_coef": algo.kl_coef,
        "max_steps": algo.max_steps or 0,
        "dataset": cfg.dataset.train,
        "seed": cfg.seed,
    }
    if cfg.dataset.environment is not None:
        params["environment"] = cfg.dataset.environment.name
        params["max_turns"] = cfg.dataset.environment.max_turns
    return params


class Tracker:
    def __init__(self, sinks: list[Sink], *, queue_size: int = 1024) -> None:
        self.sinks = sinks
        self.failures = dict.fromkeys((s.name for s in sinks), 0)
        self.dropped = 0
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self.thread = threading.Thread(target=self._drain, name="mmrl-tracking", daemon=True)
        self.thread.start()

    @classmethod
    def open(cls, cfg: TrainerConfig, *, attempt: int, resumed_step: int | None) -> Tracker | None:
        """The attempt's tracker, its runs opened (created on the first attempt, reopened after); None for an
        s3:// job directory, which has no file system for TensorBoard or runs.json."""
        if cfg.checkpoint.dir.startswith("s3://"):
            log.warning("tracking is off: the job directory %s is not a file system", cfg.checkpoint.dir)
            return None
        # A tracking server that does not answer must not hold the attempt for minutes of client retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
        directory = tracking_dir(cfg.checkpoint.dir)
        runs = read_runs(directory)
        job = cfg.job
        sinks: list[Sink] = []

        def add(name: str, make: Any) -> None:
            try:
                sink = make()
            except Exception as err:  # tracking never fails training
                log.warning("tracking sink %s could not start (training continues without it): %s", name, err)
                return
            sinks.append(sink)
            if name != "tensorboard":
                runs[name] = sink.describe()

        add(
            "tensorboard",
            lambda: TensorBoardSink(directory, purge_step=None if resumed_step is None else resumed_step + 1),
        )
        tags = {"mmrl.dev/job": job.name, "mmrl.dev/namespace": job.namespace, "mmrl.dev/uid": job.uid}
        if cfg.tracking.mlflow is not None:
            spec = cfg.tracking.mlflow
            add(
                "mlflow", lambda: MlflowSink(spec, runs.get("mlflow"), job=job.name, namespace=job.namespace, tags=tags)
            )
        if cfg.tracking.wandb is not None:
            wspec = cfg.tracking.wandb
            run_id = (runs.get("wandb") or {}).get("runId") or wandb_run_id(job.namespace, job.name, job.uid)
            add("wandb", lambda: WandbSink(wspec, run_id, directory / "wandb", job=job.name, config=run_params(cfg)))
        try:
            write_runs(directory, runs)
        except OSError as err:
            log.warning("could not keep the run ids in %s (a resume will start new runs): %s", directory, err)
        tracker = cls(sinks)
        for sink in sinks:
            if isinstance(sink, MlflowSink) and sink.created:
                tracker.call(sink, "log_params", run_params(cfg))
        tracker.log(resumed_step or 0, {"attempt": attempt, "resumed_from_step": resumed_step or 0})
        return tracker

    def status(self) -> dict[str, Any]:
        """status.tracking: the TensorBoard directory and each run's id and URL."""
        out: dict[str, Any] = {}
        for sink in self.sinks:
            described = sink.describe()
            if isinstance(described, dict):
                described = {k: v for k, v in described.items() if k in ("runId", "url", "experimentId")}
            out[sink.name] = described
        return out

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> None:
        values = scalars(metrics, prefix)
        if values:
            self._put((None, "log", (step, values)))

    def call(self, sink: Sink, method: str, *args: Any) -> None:
        self._put((sink, method, args))

    def close(self, ok: bool = True, timeout: float = 30.0) -> None:
        """Deliver what is queued (at most `timeout` seconds), then close every sink's run for this attempt."""
        self.queue.put(_STOP)
        self.thread.join(timeout)
        for sink in self.sinks:
            try:
                sink.close(ok)
            except Exception as err:
                log.warning("tracking sink %s did not close cleanly: %s", sink.name, err)

    def _put(self, item: Any) -> None:
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("tracking is behind: dropping values (training continues)")

    def _drain(self) -> None:
        while (item := self.queue.get()) is not _STOP:
            target, method, args = item
            for sink in [target] if target is not None else list(self.sinks):
                self._deliver(sink, method, args)

    def _deliver(self, sink: Sink, method: str, args: tuple[Any, ...]) -> None:
        if sink not in self.sinks:
            return
        try:
            getattr(sink, method)(*args)
            self.failures[sink.name] = 0
        except Exception as err:
            self.failures[sink.name] += 1
            log.warning("tracking sink %s failed (%d in a row): %s", sink.name, self.failures[sink.name], err)
            if self.failures[sink.name] >= MAX_FAILURES:
                log.warning("tracking sink %s dropped for the rest of this attempt", sink.name)
                self.sinks.remove(sink)
