"""The SkyRL settings issue #19 found wrong: vLLM's LoRA rank, the LoRA sync path, logs and example printing, the
placement-group timeout and the staged model path; checked on our mapping and then through SkyRL's own code (its
config class, validate_cfg, the vLLM argument builder and the Ray runtime environment it gives workers)."""

from __future__ import annotations

import json

import pytest

from mmrl_api.constants import VLLM_LORA_RANKS
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.backends.skyrl_config import RAY_PG_TIMEOUT_SECONDS, skyrl_environment, skyrl_overrides, skyrl_paths
from tests.support.corpus import example
from tests.support.skyrl import last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import TRAIN, VAL, reference_overrides

S3 = {"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://ckpt-bucket/prefix"}}}}


def with_rank(rank: int) -> dict:
    return {"spec": {"lora": {"rank": rank, "alpha": rank}}}


def two_nodes(patch: dict | None = None) -> dict:
    groups = {"spec": {"cluster": {"workerGroups": [{"name": "p5", "replicas": 2, "gpusPerNode": 8}]}}}
    return {"spec": {**groups["spec"], **((patch or {}).get("spec", {}))}}


@pytest.mark.parametrize(("rank", "engine_rank"), [(24, 32), (1, 1), (8, 8), (9, 16), (320, 320), (321, 512)])
def test_our_overrides_give_vllm_the_smallest_allowed_max_lora_rank_that_fits(rank: int, engine_rank: int) -> None:
    o, _ = reference_overrides(with_rank(rank))
    assert o["trainer.policy.model.lora.rank"] == rank
    assert o["generator.inference_engine.engine_init_kwargs"]["max_lora_rank"] == engine_rank
    assert engine_rank in VLLM_LORA_RANKS


def test_lora_sync_path_and_logs_are_on_the_checkpoint_volume_every_pod_mounts() -> None:
    o, cfg = reference_overrides(two_nodes())
    assert cfg.placement.num_nodes == 2
    assert o["trainer.policy.model.lora.lora_sync_path"] == f"{cfg.checkpoint.dir}/lora_sync"
    assert o["trainer.log_path"] == f"{cfg.checkpoint.dir}/logs"
    assert o["trainer.policy.model.lora.lora_sync_path"].startswith("/fsx/")


def test_multi_node_job_with_s3_checkpoints_is_refused_at_admission_and_by_the_trainer() -> None:
    from mmrl_api.job import validate_manifest

    _, errors = validate_manifest(merge_patch(example("job.yaml"), two_nodes(S3)))
    assert [e.path for e in errors] == ["spec.checkpoint"] and "one worker node" in errors[0].message
    # A config written by hand (admission never saw it) is refused by the trainer too, naming the field.
    _, cfg = reference_overrides(S3)
    cfg = cfg.model_copy(update={"placement": cfg.placement.model_copy(update={"num_nodes": 2})})
    with pytest.raises(ValueError, match=r"spec\.checkpoint\.s3: .*2 nodes"):
        skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL)


def test_single_node_job_with_s3_checkpoints_syncs_lora_on_its_own_node() -> None:
    o, cfg = reference_overrides(S3)
    paths = skyrl_paths(cfg)
    assert o["trainer.policy.model.lora.lora_sync_path"] == paths.lora_sync
    assert paths.lora_sync.startswith("/tmp/mmrl/hyperpod-ns-research/qwen3vl-geo3k-lora/")
    assert not paths.logs.startswith("s3://")


def test_no_example_rollout_is_printed() -> None:
    o, _ = reference_overrides()
    assert o["trainer.print_example_interval"] == 0


def test_our_overrides_point_skyrl_at_the_staged_model_path() -> None:
    _, cfg = reference_overrides()
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL, model_path="/fsx/mmrl/models/qwen3vl-8b@abc123")
    assert o["trainer.policy.model.path"] == o["trainer.ref.model.path"] == "/fsx/mmrl/models/qwen3vl-8b@abc123"
    assert skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL)["trainer.policy.model.path"] == cfg.model.name


def test_our_environment_for_skyrl_raises_the_placement_group_timeout() -> None:
    _, cfg = reference_overrides()
    assert skyrl_environment(cfg) == {"SKYRL_RAY_PG_TIMEOUT_IN_S": str(RAY_PG_TIMEOUT_SECONDS)}
    assert RAY_PG_TIMEOUT_SECONDS > 180  # skyrl/env_vars.py's default


# SkyRL's own path from our settings to vLLM's engine arguments and the Ray workers' environment: SkyRL's
# build_vllm_cli_args on vLLM 0.23's own argument parser (the SkyRL venv holds it, as the image does), including the
# order in which it applies engine_init_kwargs. prepare_runtime_environment probes GPU peer access (on a GPU-less
# driver it starts Ray and waits for a 2-GPU placement group, SKYRL_RAY_PG_TIMEOUT_IN_S long); that probe alone is
# stood in.
_THROUGH_SKYRL = r"""
import json, os, sys

overrides, environment = json.load(sys.stdin)
os.environ.update(environment)  # what the trainer does before initialize_ray
from skyrl.backends.skyrl_train.inference_servers.utils import build_vllm_cli_args
import skyrl.train.utils.utils as skyrl_utils
from skyrl.train.utils.utils import prepare_runtime_environment, validate_cfg
skyrl_utils.peer_access_supported = lambda max_num_gpus_per_node: True
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
c = build_skyrl_config(overrides)
validate_cfg(c)
args = build_vllm_cli_args(c)
from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
# What `vllm serve` checks before it builds an engine (raises on a refusal); the engine's own checks need the model
# and run in tests/skyrl/test_vllm_takes_our_context_and_pixel_cap.py on the tiny one.
validate_parsed_serve_args(args)
workers = prepare_runtime_environment(c)
import skyrl.env_vars  # the entry task and its actors read it from their environment, which is `workers`
print(json.dumps({
    "lora_rank": c.trainer.policy.model.lora.rank,
    "vllm_max_lora_rank": args.max_lora_rank,
    "vllm_enable_lora": args.enable_lora,
    "vllm_mm_processor_kwargs": args.mm_processor_kwargs,
    "vllm_max_model_len": args.max_model_len,
    "vllm_model": args.model,
    "lora_sync_path": c.trainer.policy.model.lora.lora_sync_path,
    "log_path": c.trainer.log_path,
    "print_example_interval": c.trainer.print_example_interval,
    "worker_env_pg_timeout": workers.get("SKYRL_RAY_PG_TIMEOUT_IN_S"),
    "pg_timeout_read": skyrl.env_vars.SKYRL_RAY_PG_TIMEOUT_IN_S,
    "pg_timeout_read_by_driver": skyrl_utils.SKYRL_RAY_PG_TIMEOUT_IN_S,
}))
"""


@pytest.fixture(scope="module")
def through_skyrl() -> tuple[dict, object]:
    _, cfg = reference_overrides(with_rank(24))
    overrides = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL, model_path="/fsx/mmrl/models/staged")
    return last_json(run_skyrl(_THROUGH_SKYRL, stdin=json.dumps([overrides, skyrl_environment(cfg)]), fresh=True)), cfg


def test_skyrl_accepts_rank_24_and_builds_vllm_args_with_max_lora_rank_32(through_skyrl) -> None:
    got, _ = through_skyrl
    assert (got["lora_rank"], got["vllm_max_lora_rank"], got["vllm_enable_lora"]) == (24, 32, True)
    assert got["vllm_model"] == "/fsx/mmrl/models/staged"
    assert set(got["vllm_mm_processor_kwargs"]["size"]) == {"longest_edge", "shortest_edge"}


def test_skyrl_hands_vllm_the_trained_context_as_max_model_len(through_skyrl) -> None:
    # SkyRL sets no max_model_len of its own; without ours vLLM would take the model's maximum (issue #31 item 1).
    got, cfg = through_skyrl
    assert got["vllm_max_model_len"] == cfg.algorithm.max_prompt_length + cfg.algorithm.max_response_length == 3072


def test_skyrl_syncs_lora_and_writes_infra_logs_under_the_job_dir(through_skyrl) -> None:
    got, cfg = through_skyrl
    assert got["lora_sync_path"] == f"{cfg.checkpoint.dir}/lora_sync"
    assert got["log_path"] == f"{cfg.checkpoint.dir}/logs"
    assert got["print_example_interval"] == 0


def test_skyrl_forwards_the_raised_placement_group_timeout_to_its_ray_workers(through_skyrl) -> None:
    got, _ = through_skyrl
    assert got["worker_env_pg_timeout"] == str(RAY_PG_TIMEOUT_SECONDS)
    assert got["pg_timeout_read"] == RAY_PG_TIMEOUT_SECONDS
    # The driver reads it too (peer_access_supported waits for a GPU placement group), at import: the trainer must
    # set the environment before it imports skyrl.
    assert got["pg_timeout_read_by_driver"] == RAY_PG_TIMEOUT_SECONDS
