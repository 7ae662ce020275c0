"""The trainer's start-up and checkpoint steps for attempts that the KubeRay stand-in only pretends to run (a
scripted RayJob runs no entrypoint), done with the trainer's own code as `mmrl_trainer.backends.local` does them:
the attempt reads the config the operator rendered for it (the job's ConfigMap), finds the newest complete
checkpoint with `mmrl_trainer.checkpoint` and reports it through `ProgressReporter.started` over `kube_patcher`.
The job's s3:// checkpoint directory is a local directory here, under `bucket`. tests/e2e runs the real trainer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

from mmrl_api.trainer_config import TrainerConfig
from mmrl_operator.core.names import config_map_name
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.progress import ProgressReporter, kube_patcher
from tests.support.operator import Jobs


class StandInTrainer:
    def __init__(self, jobs: Jobs, name: str, bucket: Path, kubeconfig: Path) -> None:
        self.jobs, self.name, self.bucket, self.kubeconfig = jobs, name, bucket, kubeconfig

    def config(self) -> TrainerConfig:
        """What every attempt's trainer reads: trainer.json of the job's ConfigMap."""
        data = self.jobs.core.read_namespaced_config_map(config_map_name(self.name), self.jobs.ns).data
        return TrainerConfig.model_validate(json.loads(data["trainer.json"]))

    def root(self) -> Path:
        uri = self.config().checkpoint.dir
        assert uri.startswith("s3://"), uri
        return self.bucket / uri.removeprefix("s3://")

    def save(self, step: int, *, sealed: bool = True) -> Path:
        """A checkpoint of `step`; one not `sealed` is a save cut short (the attempt died while writing it)."""
        path = ckpt.begin_step(self.root(), step)
        (path / "model.safetensors").write_bytes(b"\0" * 64)
        if sealed:
            ckpt.commit_step(self.root(), step)
        return path

    def start(self, attempt: int) -> ckpt.Checkpoint | None:
        """The first thing attempt `attempt` does: find where to resume and tell the operator (`started`)."""
        cfg = self.config()
        resume = ckpt.latest_complete(self.root()) if cfg.resume == "latest" else None
        reporter = ProgressReporter(None, kube_patcher(cfg.job.namespace, cfg.job.name), attempt=attempt)
        with mock.patch.dict(os.environ, {"KUBECONFIG": str(self.kubeconfig)}):  # what kube_patcher reads
            assert reporter.started(resume), "the trainer's started report was not accepted"
        return resume
