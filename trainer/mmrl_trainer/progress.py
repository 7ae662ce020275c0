"""Progress reporting: every step's metrics to a JSONL file, and a rate-limited patch of the job's status.progress.

The patch is a JSON merge patch on the `status` subresource of the trainer's own MultimodalRLJob, sent with the
pod's ServiceAccount (the operator grants it exactly this, by resourceNames) or KUBECONFIG when set. Every report
names the attempt it comes from. `started` is sent once, before the slow start-up (model load, data): it says which
checkpoint this attempt really resumed from (read from the checkpoint directory) and clears the previous attempt's
heartbeat. The operator's hang detection reads `heartbeat`, so it is only sent from the training loop (a hung loop
must stop beating); until the first one, the job's startup timeout applies instead.
Reporting never fails training: API errors are logged and counted, and the next report simply tries again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmrl_api.constants import GROUP, PLURAL, VERSION
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.checkpoint import Checkpoint

if TYPE_CHECKING:
    from mmrl_trainer.tracking import Tracker

log = logging.getLogger("mmrl_trainer.progress")
Patcher = Callable[[dict[str, Any]], None]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_patcher(namespace: str, name: str, *, timeout: float = 5.0) -> Patcher:
    """A patcher bound to one job; the client is built on first use so an absent API cannot fail start-up."""
    api = None

    def patch(body: dict[str, Any]) -> None:
        nonlocal api
        if api is None:
            from kubernetes import client, config

            # A private ApiClient: never mutate the process-wide default configuration. KUBECONFIG is read
            # here, not at import time, so a value set after start-up is honoured.
            if os.environ.get("KUBECONFIG"):
                api_client = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
            else:
                conf = client.Configuration()
                config.load_incluster_config(client_configuration=conf)
                api_client = client.ApiClient(conf)
            api = client.CustomObjectsApi(api_client)
        api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=timeout,
        )

    return patch


def checkpoint_ref(checkpoint: Checkpoint) -> dict[str, Any]:
    return {"step": checkpoint.step, "path": str(checkpoint.path), "time": checkpoint.time}


def started_body(attempt: int, resumed: Checkpoint | None, passed_over: list[str] | None = None) -> dict[str, Any]:
    """The first report of an attempt. Explicit nulls remove the previous attempt's heartbeat and numbers.
    `passed_over`: why newer checkpoints were not resumed (a merge patch replaces the list whole)."""
    progress: dict[str, Any] = {
        "attempt": attempt,
        "resumedFromStep": resumed.step if resumed else None,
        "passedOver": [why[:500] for why in (passed_over or [])[:8]] or None,
        "step": resumed.step if resumed else 0,
        "heartbeat": None,
        "rewardMean": None,
        "truncatedFraction": None,
        "episodes": None,
    }
    if resumed is not None:
        progress["lastCheckpoint"] = checkpoint_ref(resumed)
    return {"status": {"progress": progress}}


def progress_body(
    step: int,
    total_steps: int | None,
    reward_mean: float | None,
    checkpoint: Checkpoint | None,
    heartbeat: str,
    attempt: int | None = None,
    truncated_fraction: float | None = None,
    episodes: dict[str, float] | None = None,
) -> dict[str, Any]:
    # None values are left out: in a merge patch they would delete what an earlier report set.
    progress: dict[str, Any] = {"step": step, "heartbeat": heartbeat}
    if episodes:
        progress["episodes"] = episodes
    if truncated_fraction is not None:
        progress["truncatedFraction"] = round(float(truncated_fraction), 4)
    if attempt is not None:
        progress["attempt"] = attempt
    if total_steps is not None:
        progress["totalSteps"] = total_steps
    if reward_mean is not None:
        progress["rewardMean"] = round(float(reward_mean), 6)
    if checkpoint is not None:
        progress["lastCheckpoint"] = checkpoint_ref(checkpoint)
    return {"status": {"progress": progress}}


# A step's metrics (metrics.jsonl names) → status.progress.episodes, for multi-turn jobs. The episode's length is
# the step's mean response tokens per rollout, which for an episode counts every turn's reply.
EPISODE_METRICS = {"episode_success": "successRate", "episode_turns": "turns", "completion_length": "tokens"}


def episode_stats(metrics: dict[str, Any]) -> dict[str, float] | None:
    """status.progress.episodes from one step's metrics; None for a step without episodes (single-turn jobs). A
    step has episodes when its environment reported a success rate or turns (a SkyRL-Gym class may report one)."""
    if metrics.get("episode_turns") is None and metrics.get("episode_success") is None:
        return None
    out = {}
    for name, field in EPISODE_METRICS.items():
        if metrics.get(name) is not None:
            out[field] = round(float(metrics[name]), 4)
    return out


class ProgressReporter:
    def __init__(
        self,
        metrics_file: str | Path | None,
        patcher: Patcher | None,
        *,
        min_interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        attempt: int | None = None,
    ) -> None:
        self.metrics_file = Path(metrics_file) if metrics_file else None
        self.patcher = patcher
        self.min_interval = min_interval
        self.clock = clock
        self.last_patch: float | None = None
        self.patches_sent = 0
        self.patch_failures = 0
        self.checkpoint: Checkpoint | None = None
        self.reward_mean: float | None = None
        self.truncated_fraction: float | None = None
        self.episodes: dict[str, float] | None = None
        self.attempt = attempt
        self.config: TrainerConfig | None = None  # set by from_config: the tracking sinks open at `started`
        self.tracker: Tracker | None = None

    @classmethod
    def from_config(cls, cfg: TrainerConfig, attempt: int | None = None) -> ProgressReporter:
        metrics = cfg.progress.metrics_file
        if metrics is None and not cfg.checkpoint.dir.startswith("s3://"):
            metrics = str(Path(cfg.checkpoint.dir) / "metrics.jsonl")
        patcher = kube_patcher(cfg.job.namespace, cfg.job.name) if cfg.progress.enabled else None
        reporter = cls(metrics, patcher, min_interval=cfg.progress.min_interval_seconds, attempt=attempt)
        reporter.config = cfg
        return reporter

    def started(self, resumed: Checkpoint | None, passed_over: list[str] | None = None) -> bool:
        """Announce the attempt and the checkpoint it resumes from (None: a fresh start), and why newer ones were
        passed over. No heartbeat."""
        self.checkpoint = resumed
        record: dict[str, Any] = {"event": "started", "resumed_from_step": resumed.step if resumed else None}
        if passed_over:
            record["passed_over"] = list(passed_over)
        self._append({"step": resumed.step if resumed else 0, "time": now_rfc3339(), "attempt": self.attempt, **record})
        sent = self._send(started_body(self.attempt or 1, resumed, passed_over))
        if self.config is not None and self.tracker is None:
            from mmrl_trainer.tracking import Tracker

            self.tracker = Tracker.open(
                self.config, attempt=self.attempt or 1, resumed_step=resumed.step if resumed else None
            )
            if self.tracker is not None:
                self._send({"status": {"tracking": self.tracker.status()}})
        return sent

    def finish(self, ok: bool = True) -> None:
        """The attempt's end: deliver what the tracking sinks still hold and close their runs (finished when ok)."""
        if self.tracker is not None:
            self.tracker.close(ok)
            self.tracker = None

    def report(
        self,
        step: int,
        total_steps: int | None,
        metrics: dict[str, Any],
        *,
        checkpoint: Checkpoint | None = None,
        force: bool = False,
        extra: dict[str, Any] | None = None,
        extra_prefix: str = "",
    ) -> bool:
        """Record a step; returns True when a status patch was sent (and accepted). `extra` goes to the tracking
        sinks only, under `extra_prefix` (SkyRL's own metric names)."""
        if checkpoint is not None:
            self.checkpoint = checkpoint
        if metrics.get("reward") is not None:
            self.reward_mean = float(metrics["reward"])
        if metrics.get("truncated_fraction") is not None:
            self.truncated_fraction = float(metrics["truncated_fraction"])
        if (episodes := episode_stats(metrics)) is not None:
            self.episodes = episodes
        heartbeat = now_rfc3339()
        if self.tracker is not None:
            self.tracker.log(step, metrics)
            if extra:
                self.tracker.log(step, extra, prefix=extra_prefix)
        self._append({"step": step, "totalSteps": total_steps, "time": heartbeat, "attempt": self.attempt, **metrics})
        if self.patcher is None:
            return False
        now = self.clock()
        if not force and self.last_patch is not None and now - self.last_patch < self.min_interval:
            return False
        self.last_patch = now
        body = progress_body(
            step,
            total_steps,
            self.reward_mean,
            self.checkpoint,
            heartbeat,
            self.attempt,
            self.truncated_fraction,
            self.episodes,
        )
        return self._send(body)

    def adapter(self, adapter_status: dict[str, Any], tries: int = 3) -> bool:
        """Report the exported adapter (status.adapter); retried, because serving starts from it."""
        for i in range(tries):
            if self._send({"status": {"adapter": adapter_status}}):
                return True
            time.sleep(min(2.0**i, 5.0))
        return False

    def record(self, step: int, metrics: dict[str, Any]) -> None:
        """Append to the metrics file and the tracking sinks only (no status patch, no heartbeat): e.g. an evaluation
        before training."""
        if self.tracker is not None:
            self.tracker.log(step, metrics)
        self._append({"step": step, "time": now_rfc3339(), "attempt": self.attempt, **metrics})

    def _send(self, body: dict[str, Any]) -> bool:
        if self.patcher is None:
            return False
        try:
            self.patcher(body)
        except Exception as err:  # reporting must never stop training
            self.patch_failures += 1
            log.warning("status patch failed (training continues): %s", str(err).splitlines()[0][:200])
            return False
        self.patches_sent += 1
        return True

    def _append(self, record: dict[str, Any]) -> None:
        if self.metrics_file is None:
            return
        try:
            self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_file, "a") as fh:
                fh.write(json.dumps(record, default=float) + "\n")
        except OSError as err:
            log.warning("metrics file %s not writable: %s", self.metrics_file, err)
