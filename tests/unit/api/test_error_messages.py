"""Validation errors name the field and the fix: "did you mean" for a misspelt field, the schemes a dataset location
may use, and the batch split worked out with the job's own numbers. The paths stay the ones `kubectl apply` prints."""

from __future__ import annotations

from typing import Any

import pytest

from mmrl_api import validate_manifest
from mmrl_api.suggest import closest
from tests.support.corpus import example


def errors_of(change: Any, name: str = "job.yaml") -> dict[str, str]:
    doc = example(name)
    change(doc)
    job, errors = validate_manifest(doc)
    assert job is None
    return {e.path: e.message for e in errors}


@pytest.mark.parametrize(
    ("where", "typo", "path", "meant"),
    [
        (("spec", "algorithm"), "learningrate", "spec.algorithm.learningrate", "learningRate"),
        (("spec", "algorithm"), "learning_rate", "spec.algorithm.learning_rate", "learningRate"),
        (("spec", "lora"), "rnak", "spec.lora.rnak", "rank"),
        (("spec", "checkpoint"), "interval", "spec.checkpoint.interval", "intervalSteps"),
        (
            ("spec", "cluster", "workerGroups", 0),
            "gpusPernode",
            "spec.cluster.workerGroups[0].gpusPernode",
            "gpusPerNode",
        ),
        (
            ("spec", "cluster", "workerGroups", 0, "resources"),
            "request",
            "spec.cluster.workerGroups[0].resources.request",
            "requests",
        ),
        ((), "sepc", "sepc", "spec"),
    ],
)
def test_an_unknown_field_gets_the_closest_known_one(where: tuple, typo: str, path: str, meant: str) -> None:
    def add(doc: dict[str, Any]) -> None:
        node = doc
        for part in where:
            node = node[part]
        node[typo] = 1

    assert errors_of(add)[path] == f"unknown field; did you mean {meant}?"


def test_an_unknown_field_like_no_known_one_is_only_unknown() -> None:
    assert errors_of(lambda d: d["spec"]["algorithm"].update(zzz=1))["spec.algorithm.zzz"] == "unknown field"


def test_a_free_form_map_gets_no_suggestion() -> None:
    # metadata keeps every field Kubernetes manages, and a label is any key: neither is refused.
    doc = example()
    doc["metadata"]["labelz"] = {"a": "b"}
    doc["metadata"]["labels"] = {"learningrate": "x"}
    assert validate_manifest(doc)[1] == []


def test_closest_prefers_a_difference_of_case_and_gives_up_on_strangers() -> None:
    assert closest("GPUSPERNODE", ["gpusPerNode", "replicas"]) == "gpusPerNode"
    assert closest("repl", ["gpusPerNode", "replicas"]) == "replicas"
    assert closest("banana", ["gpusPerNode", "replicas"]) is None


SCHEMES = "s3://bucket/key, pvc://claim/path, hf://org/name, synthetic://NAME"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("data/train.parquet", f"'data/train.parquet' has no scheme; the trainer reads {SCHEMES}"),
        (
            "http://host/train.parquet",
            f"'http://host/train.parquet': the trainer reads no http:// locations; use {SCHEMES}",
        ),
        ("s3://bucket/my data.parquet", "'s3://bucket/my data.parquet' has ' ' after s3://, where only letters"),
        ("s3://", f"'s3://' names nothing after s3://; the trainer reads {SCHEMES}"),
    ],
)
def test_a_dataset_location_says_which_schemes_are_accepted(value: str, says: str) -> None:
    message = errors_of(lambda d: d["spec"]["dataset"].update(train=value))["spec.dataset.train"]
    assert message.startswith(says)
    assert "pattern" not in message


def geometry(doc: dict[str, Any], **algorithm: int) -> None:
    doc["spec"]["algorithm"].update(algorithm)


def test_too_small_a_mini_batch_gets_its_numbers_and_the_smallest_that_works() -> None:
    # examples/job.yaml trains on one node of 8 GPUs.
    found = errors_of(lambda d: geometry(d, miniBatchSize=1, trainBatchSize=4, samplesPerPrompt=4))
    assert found["spec.algorithm.miniBatchSize"].startswith(
        "1 x samplesPerPrompt 4 = 4 samples per update, fewer than the 8 data-parallel GPUs of cluster.workerGroups, "
        "so a GPU would train on none; use miniBatchSize 2 or more"
    )


def test_a_micro_batch_that_does_not_divide_the_gpus_share_gets_the_share_and_a_divisor() -> None:
    found = errors_of(lambda d: geometry(d, microBatchSizePerGpu=3))
    assert found["spec.algorithm.microBatchSizePerGpu"].startswith(
        "3 does not divide each GPU's share of a mini-batch, miniBatchSize 64 x samplesPerPrompt 4 / 8 GPUs = 32 "
        "(rounded down); use a divisor of 32 such as 2"
    )


def test_a_step_that_does_not_split_into_mini_batches_per_gpu_gets_both_shares() -> None:
    found = errors_of(lambda d: geometry(d, miniBatchSize=5, trainBatchSize=10, samplesPerPrompt=4))
    assert found["spec.algorithm.trainBatchSize"].startswith(
        "each GPU's share of a step, trainBatchSize 10 x samplesPerPrompt 4 / 8 GPUs = 5 (rounded down), is not a "
        "multiple of its share of a mini-batch, miniBatchSize 5 x samplesPerPrompt 4 / 8 GPUs = 2; make miniBatchSize "
        "x samplesPerPrompt a multiple of 8"
    )
