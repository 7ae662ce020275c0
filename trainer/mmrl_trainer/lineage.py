"""What the trainer reports with the adapter besides its files: the held-out evaluation the promotion gate reads
(status.adapter.evaluation) and where the adapter came from (status.adapter.lineage).

The evaluations come from the job's metrics.jsonl, which every attempt appends to on the checkpoint volume: the
base model's held-out reward is the one logged at step 0 (the local backend's "baseline" record, SkyRL's
eval_before_train), measured once by the attempt that started from scratch and kept there for every later
attempt; the adapter's is the final held-out reward of the attempt that finished (or, for SkyRL, its evaluation at
the final step). An s3:// job has no metrics file, so only what the finishing attempt measured itself is known.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.adapter import sha256_file


def evaluations(metrics_file: Path | None) -> list[tuple[int, float]]:
    """(step, held-out reward) of every evaluation recorded, in file order; unreadable lines are skipped."""
    if metrics_file is None or not metrics_file.is_file():
        return []
    found = []
    for line in metrics_file.read_text().splitlines():
        try:
            record = json.loads(line)
            step, reward = int(record["step"]), float(record["eval_reward"])
        except (ValueError, KeyError, TypeError):
            continue
        if math.isfinite(reward):
            found.append((step, reward))
    return found


def baseline_due(metrics_file: Path | None, *, resuming: bool) -> bool:
    """Whether this attempt evaluates the base model before training: only when it starts from no checkpoint and no
    earlier attempt recorded that evaluation (one that died before its first checkpoint may have), so a job has one
    step-0 evaluation in metrics.jsonl and tracking, whichever backend and however many attempts."""
    return not resuming and not any(step == 0 for step, _ in evaluations(metrics_file))


def adapter_evaluation(metrics_file: Path | None, step: int | None, held_out: float | None) -> dict[str, Any] | None:
    """status.adapter.evaluation: `held_out` when the finishing attempt measured it, else the evaluation recorded
    at `step`; the baseline is the first evaluation at step 0. None when nothing was evaluated."""
    recorded = evaluations(metrics_file)
    baseline = next((reward for s, reward in recorded if s == 0), None)
    if held_out is None and step is not None:
        held_out = next((reward for s, reward in reversed(recorded) if s == step), None)
    if held_out is None and baseline is None:
        return None
    return {"heldOutReward": held_out, "baselineReward": baseline, "step": step}


def dataset_digest(uri: str | None) -> str | None:
    """sha256 of what the trainer reads for a dataset: a file's bytes, a directory's files (names and bytes), or the
    URI of a synthetic:// dataset, whose rows are a function of it. None for what is streamed from elsewhere."""
    if not uri:
        return None
    if uri.startswith("synthetic://"):
        return hashlib.sha256(uri.encode()).hexdigest()
    path = Path(uri)
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{f.relative_to(path)}\0{sha256_file(f)}\n".encode())
        return digest.hexdigest()
    return None


def adapter_lineage(cfg: TrainerConfig, step: int | None) -> dict[str, Any]:
    """status.adapter.lineage."""
    datasets = {
        name: digest
        for name, uri in (("train", cfg.dataset.train), ("validation", cfg.dataset.validation))
        if (digest := dataset_digest(uri)) is not None
    }
    return {"checkpointStep": step, "baseModelRevision": cfg.model.revision, "datasets": datasets}
