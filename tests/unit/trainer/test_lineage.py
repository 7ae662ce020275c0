"""The evaluation and lineage the trainer reports with its adapter: the baseline is the step-0 evaluation (kept in
metrics.jsonl across attempts), the held-out reward the finishing attempt's, datasets by digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.lineage import adapter_evaluation, adapter_lineage, baseline_due, dataset_digest, evaluations


def write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    return path


def test_the_baseline_is_step_zeros_evaluation_from_the_first_attempt(tmp_path: Path) -> None:
    metrics = write(
        tmp_path / "metrics.jsonl",
        {"step": 0, "attempt": 1, "event": "baseline", "eval_reward": 0.25},
        {"step": 4, "attempt": 1, "event": "eval", "eval_reward": 0.4},
        {"step": 4, "attempt": 2, "event": "started"},  # attempt 2 resumed: no second baseline
        {"step": 8, "attempt": 2, "event": "eval", "eval_reward": 0.55},
        {"step": 8, "attempt": 2, "event": "eval", "eval_reward": float("nan")},
    )
    assert evaluations(metrics) == [(0, 0.25), (4, 0.4), (8, 0.55)]
    # The local backend measures the final held-out reward itself; SkyRL's is its evaluation at the final step.
    assert adapter_evaluation(metrics, 8, 0.6) == {"heldOutReward": 0.6, "baselineReward": 0.25, "step": 8}
    assert adapter_evaluation(metrics, 8, None) == {"heldOutReward": 0.55, "baselineReward": 0.25, "step": 8}
    assert adapter_evaluation(metrics, 12, None) == {"heldOutReward": None, "baselineReward": 0.25, "step": 12}
    assert adapter_evaluation(None, 8, None) is None  # an s3:// job without validation: nothing measured
    assert adapter_evaluation(None, 8, 0.7) == {"heldOutReward": 0.7, "baselineReward": None, "step": 8}


def test_lineage_names_the_step_revision_and_dataset_digests(tmp_path: Path) -> None:
    train = tmp_path / "train.parquet"
    train.write_bytes(b"rows")
    shards = tmp_path / "val"
    (shards / "a").mkdir(parents=True)
    (shards / "a" / "part-0.parquet").write_bytes(b"x")
    cfg = TrainerConfig.model_validate(
        {
            "job": {"namespace": "team", "name": "geo"},
            "model": {"name": "Qwen/Qwen3-VL-8B-Instruct", "revision": "0123abc"},
            "dataset": {"train": str(train), "validation": str(shards)},
            "checkpoint": {"dir": str(tmp_path / "ckpt")},
            "export_dir": str(tmp_path / "adapter"),
        }
    )
    lineage = adapter_lineage(cfg, 40)
    assert lineage["checkpointStep"] == 40 and lineage["baseModelRevision"] == "0123abc"
    assert lineage["datasets"]["train"] == hashlib.sha256(b"rows").hexdigest()
    before = lineage["datasets"]["validation"]
    (shards / "a" / "part-0.parquet").write_bytes(b"y")
    assert dataset_digest(str(shards)) != before  # a changed shard changes the digest
    assert dataset_digest("synthetic://colors?n=8") == hashlib.sha256(b"synthetic://colors?n=8").hexdigest()
    assert dataset_digest("s3://bucket/train.parquet") is None  # streamed from elsewhere: not claimed


def test_the_base_model_is_evaluated_by_the_first_fresh_attempt_only(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    assert baseline_due(metrics, resuming=False)  # the job's first attempt
    assert not baseline_due(metrics, resuming=True)
    # Attempt 1 died during its baseline: the next fresh attempt takes it.
    write(metrics, {"step": 0, "attempt": 1, "event": "started"}, {"step": 3, "attempt": 1, "eval_reward": 0.5})
    assert baseline_due(metrics, resuming=False)
    # Attempt 1 recorded it and died before its first checkpoint: attempt 2 starts from no checkpoint again, and must
    # not add a second step-0 point.
    write(metrics, {"step": 0, "attempt": 1, "event": "baseline", "eval_reward": 0.25})
    assert not baseline_due(metrics, resuming=False)
    assert baseline_due(None, resuming=False)  # an s3:// job keeps no metrics file: each fresh start measures
