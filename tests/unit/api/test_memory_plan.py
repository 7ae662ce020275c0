"""The GPU memory plan: the maze fits its engines, each kind of misfit is refused naming the field to change (by
`mmrl validate` and by the trainer, exit 2, before any engine), the plan reaches the TrainerConfig, and the local
backend's figures stay within reach of what a GPU measured (bench/measured, bench/gpu_local_step.py)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
import yaml

from mmrl_api import MultimodalRLJob
from mmrl_api.architecture import Architecture
from mmrl_api.context_budget import spec_max_model_len
from mmrl_api.gpus import H200, INSTANCE_TYPES
from mmrl_api.memory_plan import PROCESS_OVERHEAD, TRAINING_SHARE, GiB, PlanInputs, plan, spec_plan
from mmrl_operator.cli.main import validate_files
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from tests.support.corpus import example

MEASURED = Path(__file__).resolve().parents[3] / "bench" / "measured"


def maze(**changes: object) -> dict:
    doc = copy.deepcopy(example("visgym-maze.yaml"))
    for path, value in changes.items():
        node = doc["spec"]
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[leaf] = value
    return doc


def validate(doc: dict, tmp_path: Path) -> tuple[int, str, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    out, err = io.StringIO(), io.StringIO()
    return validate_files([str(path)], out=out, err=err), out.getvalue(), err.getvalue()


def test_the_maze_engines_hold_nine_of_their_longest_episodes(tmp_path: Path) -> None:
    job = MultimodalRLJob.model_validate(example("visgym-maze.yaml"))
    found = spec_plan(job.spec)
    assert found is not None and found.fits and found.engine is not None
    assert found.engine.max_model_len == spec_max_model_len(job.spec.algorithm, job.spec.dataset.environment)
    assert found.inputs.gpu == INSTANCE_TYPES["ml.g7e.12xlarge"].gpu and found.inputs.world_size == 6
    assert found.engine.sequences >= 1
    rc, out, err = validate(example("visgym-maze.yaml"), tmp_path)
    assert rc == 0 and not err
    assert (
        "GPU memory plan, per GPU (NVIDIA RTX PRO 6000" in out
        and f"max_model_len {found.engine.max_model_len:,}" in out
    )


@pytest.mark.parametrize(
    ("changes", "field", "numbers"),
    [
        # the engines' share leaves less KV cache than one 19,200-token episode
        ({"algorithm.rolloutGpuMemoryUtilization": 0.2}, "spec.algorithm.rolloutGpuMemoryUtilization", "19,200"),
        # vLLM's claim plus the colocated trainer's contexts is more than the GPU
        ({"algorithm.rolloutGpuMemoryUtilization": 1.0}, "spec.algorithm.rolloutGpuMemoryUtilization", "95.6 GiB"),
        # the fp32 master weights of 8.8B parameters on one 24 GB GPU
        (
            {
                "cluster.workerGroups.0.instanceType": "ml.g5.xlarge",
                "cluster.workerGroups.0.gpusPerNode": 1,
                "cluster.workerGroups.0.replicas": 1,
            },
            "spec.cluster.workerGroups[*].replicas",
            "22.5 GiB",
        ),
        # two sequences of 64 turns of 1,280 tokens per micro-batch: their logits alone are over the GPU
        (
            {"dataset.environment.maxTurns": 64, "inference.maxModelLen": 81_920, "algorithm.microBatchSizePerGpu": 2},
            "spec.algorithm.microBatchSizePerGpu",
            "95.6 GiB",
        ),
    ],
)
def test_a_job_that_does_not_fit_is_refused_naming_the_field(
    changes: dict, field: str, numbers: str, tmp_path: Path
) -> None:
    rc, out, err = validate(maze(**changes), tmp_path)
    assert rc == 1 and out == ""
    assert f"job.yaml: {field}: " in err and numbers in err and "does NOT fit" in err


def test_unknown_model_or_instance_type_is_not_planned(tmp_path: Path) -> None:
    assert spec_plan(MultimodalRLJob.model_validate(maze(**{"model.name": "org/mystery-vlm"})).spec) is None
    unknown = {"cluster.workerGroups.0.instanceType": "ml.p6e-gb200.36xlarge", "cluster.workerGroups.0.gpusPerNode": 4}
    rc, out, _ = validate(maze(**unknown), tmp_path)
    assert rc == 0 and "GPU memory plan: unknown" in out
    assert "instanceType ml.p6e-gb200.36xlarge is not in mmrl's table; did you mean ml.p6-b200.48xlarge?" in out


def test_the_trainer_config_carries_the_workers_gpu() -> None:
    job = MultimodalRLJob.model_validate(example("visgym-maze.yaml"))
    place = build_trainer_config(job).placement
    gpu = INSTANCE_TYPES["ml.g7e.12xlarge"].gpu
    assert (place.gpu_model, place.gpu_memory_mib, place.world_size) == (gpu.model, gpu.memory_mib, 6)


def measured_rows() -> list[dict]:
    rows = []
    for path in sorted(MEASURED.glob("gpu_local_step_*.json")):
        rows += json.loads(path.read_text())["rows"]
    return rows


@pytest.mark.parametrize("row", measured_rows(), ids=lambda r: f"{r['size']}-r{r['max_response_length']}")
def test_local_backend_plan_is_within_10_percent_of_the_measured_h200_peak(row: dict) -> None:
    """Each recorded run (random-weight Qwen3-VL sizes, TRL on an H200, bench/gpu_local_step.py): the plan's
    training phase against torch's peak allocated bytes (the plan's CUDA-context allowance left out: torch does
    not count it). The colour prompts are 22 tokens with their image."""
    arch = Architecture(
        layers=row["num_hidden_layers"],
        hidden=row["hidden_size"],
        intermediate=row["intermediate_size"],
        heads=row["num_attention_heads"],
        kv_heads=4,
        head_dim=row["head_dim"],
        vocab=row["vocab"],
        tied_embeddings=False,
        max_positions=4096,
        vision=None,
    )
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert arch.lora_params(32, list(targets)) == row["lora_params"]
    found = plan(
        PlanInputs("local", arch, H200, 1, 32, targets, 1, 0, 0.0, row["completions"], 22, row["max_response_length"])
    )
    planned = (found.training_bytes - PROCESS_OVERHEAD) / GiB
    assert abs(planned - row["peak_training_gib"]) / row["peak_training_gib"] <= 0.10
    # what a job is refused above (TRAINING_SHARE of the GPU) covers the estimate's shortfall
    assert found.training_bytes / TRAINING_SHARE > row["peak_training_gib"] * GiB


def test_the_operator_writes_the_plan_into_the_jobs_status_and_mmrl_status_shows_it() -> None:
    from mmrl_operator.cli.status import render_status
    from mmrl_operator.core.decide import decide
    from mmrl_operator.core.observed import Observed
    from tests.support.factories import T0, job

    j = job()  # examples/job.yaml: Qwen3-VL-8B on ml.p5.48xlarge
    status = decide(j, 1, Observed(), T0).status
    expected = spec_plan(j.spec)
    assert expected is not None and expected.engine is not None
    found = status["memoryPlan"]
    assert found["fits"] is True and found["kvCacheTokens"] == expected.engine.kv_tokens
    assert (found["trainingBytes"], found["maxModelLen"]) == (expected.training_bytes, expected.engine.max_model_len)
    shown = render_status({"metadata": {"namespace": "team", "name": "maze"}, "status": status}, [])
    assert "GPU memory (expected, per GPU): training:" in shown
    unknown = job({"spec": {"model": {"name": "s3://models/my-own-vlm/"}}})
    assert "memoryPlan" not in decide(unknown, 1, Observed(), T0).status
