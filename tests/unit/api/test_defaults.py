"""Defaults come from the reference recipe and are the same whether pydantic or the apiserver applies them."""

from __future__ import annotations

from mmrl_api import MultimodalRLJob, validate_manifest
from mmrl_api.constants import MAX_JOB_NAME_LENGTH, RAYJOB_NAME_LIMIT
from tests.support.corpus import example


def minimal() -> dict:
    return {
        "apiVersion": "mmrl.dev/v1alpha1",
        "kind": "MultimodalRLJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "model": {"name": "Qwen/Qwen3-VL-8B-Instruct"},
            "dataset": {"train": "s3://bucket/train.parquet"},
            "checkpoint": {"pvc": {"claimName": "fsx-claim"}},
        },
    }


def test_minimal_job_gets_the_reference_recipe() -> None:
    job, errors = validate_manifest(minimal())
    assert errors == [] and job is not None
    s = job.spec
    assert (s.lora.rank, s.lora.alpha, s.lora.dropout) == (32, 32, 0.0)
    assert "lm_head" not in s.lora.target_modules and "q_proj" in s.lora.target_modules
    assert s.algorithm.name == "grpo"
    assert (s.algorithm.samples_per_prompt, s.algorithm.learning_rate, s.algorithm.kl_coef) == (4, 3e-5, 0.0)
    assert (s.algorithm.train_batch_size, s.algorithm.mini_batch_size) == (128, 64)
    assert (s.algorithm.max_prompt_length, s.algorithm.max_response_length) == (1024, 2048)
    assert s.checkpoint.interval_steps == 5 and s.checkpoint.pvc.mount_path == "/fsx"
    assert s.dataset.reward.name == "exact_match" and s.dataset.format == "parquet"
    assert [g.name for g in s.cluster.worker_groups] == ["gpu"]
    group = s.cluster.worker_groups[0]
    assert (group.instance_type, group.gpus_per_node, group.gpus) == ("ml.p5.48xlarge", None, 8)
    assert s.cluster.hyperpod is True
    assert (s.resilience.max_restarts, s.resilience.max_infra_restarts) == (2, 10)
    assert s.inference.enabled and s.suspend is False and s.ttl_seconds_after_finished is None


def test_wire_form_is_camel_case_and_round_trips() -> None:
    job = MultimodalRLJob.model_validate(example())
    wire = job.wire()
    assert wire["spec"]["algorithm"]["samplesPerPrompt"] == 4
    assert wire["spec"]["cluster"]["workerGroups"][0]["efaPerNode"] == 32
    assert "samples_per_prompt" not in str(wire)
    assert MultimodalRLJob.model_validate(wire) == job


def test_quantities_accept_yaml_integers_like_the_apiserver() -> None:
    doc = minimal()
    doc["spec"]["cluster"] = {"head": {"resources": {"requests": {"cpu": 4, "memory": "16Gi"}}}}
    job, errors = validate_manifest(doc)
    assert errors == []
    assert job.spec.cluster.head.resources.requests == {"cpu": "4", "memory": "16Gi"}


def test_longest_allowed_name_still_fits_our_rayjob_name_limit_constant() -> None:
    longest_rayjob = "x" * MAX_JOB_NAME_LENGTH + "-a9999"
    assert len(longest_rayjob) <= RAYJOB_NAME_LIMIT
    doc = minimal()
    doc["metadata"]["name"] = "a" * MAX_JOB_NAME_LENGTH
    assert validate_manifest(doc)[1] == []


def test_credentials_by_reference_are_accepted() -> None:
    doc = minimal()
    doc["spec"]["trainer"] = {
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "NCCL_DEBUG", "value": "WARN"},
        ],
        "envFrom": [{"secretRef": {"name": "wandb"}}],
    }
    assert validate_manifest(doc)[1] == []


def test_s3_checkpoints_instead_of_pvc() -> None:
    doc = minimal()
    doc["spec"]["checkpoint"] = {"s3": {"uri": "s3://my-bucket/mmrl"}}
    job, errors = validate_manifest(doc)
    assert errors == [] and job.spec.checkpoint.s3.uri == "s3://my-bucket/mmrl"


def test_every_problem_is_reported_not_just_the_first() -> None:
    doc = minimal()
    doc["spec"]["lora"] = {"rank": 0}
    doc["spec"]["algorithm"] = {"samplesPerPrompt": 1}
    paths = {e.path for e in validate_manifest(doc)[1]}
    assert {"spec.lora.rank", "spec.algorithm.samplesPerPrompt"} <= paths


def test_non_mapping_document_is_an_error() -> None:
    job, errors = validate_manifest(["not", "a", "job"])
    assert job is None and errors[0].path == "(document)"
