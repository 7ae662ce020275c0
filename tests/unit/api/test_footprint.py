"""Expected checkpoint footprint: the 8B reference job's numbers, the LoRA and optimizer counts checked on a real
PEFT Qwen3-VL (the tiny one) with a real AdamW step, unknown models, and `mmrl validate` printing it."""

from __future__ import annotations

import io

import pytest

from mmrl_api import MultimodalRLJob
from mmrl_api.architecture import REFERENCE_MODELS, Architecture
from mmrl_api.footprint import ADAMW_STATES, FP32_BYTES, checkpoint_footprint, footprint_of, model_size
from mmrl_api.spec import LoRASpec, ModelSpec
from mmrl_operator.cli.main import validate_files
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from tests.support.corpus import EXAMPLES, example

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_reference_8b_job_needs_about_35_gb_per_checkpoint_times_keep_plus_one() -> None:
    job = MultimodalRLJob.model_validate(example("job.yaml"))
    found = footprint_of(job.spec)
    assert found is not None and found.checkpoints == job.spec.checkpoint.keep + 1 == 4
    assert 35e9 <= found.bytes_per_checkpoint <= 37e9  # 8.77B fp32 parameters, plus LoRA and its AdamW state
    assert found.total_bytes == 4 * found.bytes_per_checkpoint
    assert footprint_of(build_trainer_config(job)) == found  # the trainer's config gives the same answer


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("Qwen/Qwen3-VL-8B-Instruct", REFERENCE_MODELS["qwen3-vl-8b"].params),
        ("/fsx/models/Qwen3-VL-2B-Thinking", REFERENCE_MODELS["qwen3-vl-2b"].params),
        ("hf://Qwen/Qwen3-VL-30B-A3B-Instruct", 30_000_000_000),  # not in the table: the name's 30B
        ("s3://models/llava-v1.6-7b", 7_000_000_000),
    ],
)
def test_parameter_count_from_the_table_or_the_name(name: str, params: int) -> None:
    found = model_size(name)
    assert found is not None and found[0] == params


def test_unknown_model_has_no_footprint() -> None:
    assert model_size("pvc://claim/models/tiny-qwen3-vl") is None
    assert checkpoint_footprint(ModelSpec(name="org/mystery-vlm"), LoRASpec(), 3, "skyrl") is None


def test_local_backend_keeps_only_the_adapter_and_its_optimizer_state() -> None:
    lora = LoRASpec(rank=32, alpha=32, target_modules=ALL)
    skyrl = checkpoint_footprint(ModelSpec(name="Qwen/Qwen3-VL-8B-Instruct"), lora, 2, "skyrl")
    local = checkpoint_footprint(ModelSpec(name="Qwen/Qwen3-VL-8B-Instruct"), lora, 2, "local")
    assert skyrl is not None and local is not None and skyrl.lora_params == local.lora_params
    assert local.bytes_per_checkpoint == local.lora_params * FP32_BYTES * (1 + ADAMW_STATES)
    assert skyrl.bytes_per_checkpoint - local.bytes_per_checkpoint == (skyrl.params + skyrl.lora_params) * FP32_BYTES


@pytest.mark.parametrize(("rank", "targets"), [(8, ALL), (16, ["q_proj", "v_proj"]), (4, ["down_proj", "o_proj"])])
def test_lora_count_and_adamw_state_match_a_real_peft_qwen3_vl(rank: int, targets: list[str]) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    from mmrl_api.adapter_rules import VISION_TOWER_MODULES
    from mmrl_trainer.tiny import build_config, build_tokenizer

    torch.manual_seed(0)
    config = build_config(build_tokenizer())
    model = get_peft_model(
        Qwen3VLForConditionalGeneration(config),
        LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, exclude_modules=VISION_TOWER_MODULES),
    )
    trained = [p for p in model.parameters() if p.requires_grad]
    shape = Architecture.from_hf_config(config.to_dict())
    assert sum(p.numel() for p in trained) == shape.lora_params(rank, targets)

    # AdamW as SkyRL builds it (over all FSDP parameters): state only for those with gradients.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    state = sum(t.numel() for s in optimizer.state.values() for k, t in s.items() if k != "step")
    assert state == ADAMW_STATES * shape.lora_params(rank, targets)


def test_mmrl_validate_prints_the_footprint_per_file() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert validate_files([str(EXAMPLES / "job.yaml"), str(EXAMPLES / "local.yaml")], out=out, err=err) == 0
    lines = [line for line in out.getvalue().splitlines() if "checkpoint footprint" in line]
    assert lines[0].startswith(f"{EXAMPLES / 'job.yaml'}: checkpoint footprint: 145.9 GB (4 checkpoints of 36.5 GB")
    assert lines[1].endswith("unknown (no parameter count for pvc://mmrl-checkpoints/models/tiny-qwen3-vl)")


def test_the_operator_writes_the_footprint_into_the_jobs_status_and_mmrl_status_shows_it() -> None:
    from mmrl_operator.cli.status import render_status
    from mmrl_operator.core.decide import decide
    from mmrl_operator.core.observed import Observed
    from tests.support.factories import T0, job

    j = job()  # examples/job.yaml: Qwen3-VL-8B, rank 32, keep 3
    plan = decide(j, 1, Observed(), T0)
    found = plan.status["checkpointFootprint"]
    assert (found["checkpoints"], round(found["totalBytes"] / 1e9, 1)) == (4, 145.9)
    assert found["perCheckpointBytes"] * 4 == found["totalBytes"]
    shown = render_status({"metadata": {"namespace": "team", "name": "geo"}, "status": plan.status}, [])
    assert "checkpoint storage (expected): 145.9 GB (4 checkpoints of 36.5 GB" in shown
    unknown = job({"spec": {"model": {"name": "s3://models/my-own-vlm/"}}})
    assert "checkpointFootprint" not in decide(unknown, 1, Observed(), T0).status
