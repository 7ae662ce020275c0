"""Runs vLLM's own argument parsing and config checks on our arguments, inside a cached CPU build of vLLM.

Two ways in, as the two processes that start vLLM do: SkyRL's rollout engines take vLLM's parser defaults and set
`engine_init_kwargs` over them as attributes (skyrl backends/skyrl_train/inference_servers/utils.py:
build_vllm_cli_args); the serving Deployment passes a command line. Either way vLLM builds its model config (which
checks max_model_len against the model's own maximum) and its multimodal processor, which here resizes one large
image through the same path a request's image takes (`call_hf_processor` merges the configured
mm_processor_kwargs), so the reply says how many tokens that image became. Then the same arguments with
`too_long` as max_model_len: vLLM's verdict on them, or None if it accepts them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from mmrl_local.toolchain import vllm_cpu
from tests.support.vllm_engine import engine_env

_CHECK = r"""
import json, sys
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args  # 0.32
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # 0.23
from PIL import Image
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.utils.argparse_utils import FlexibleArgumentParser

req = json.load(sys.stdin)
parser = make_arg_parser(FlexibleArgumentParser())
if "engine_kwargs" in req:
    args = parser.parse_args([])
    args.model = req["model"]
    for key, value in req["engine_kwargs"].items():
        setattr(args, key, value)
else:
    args = parser.parse_args(req["argv"])
    validate_parsed_serve_args(args)
config = AsyncEngineArgs.from_cli_args(args).create_model_config()
info = MULTIMODAL_REGISTRY.create_processor(config).info
image = Image.new("RGB", (req["image_side"], req["image_side"]), (200, 30, 30))
features = info.ctx.call_hf_processor(info.get_hf_processor(), {"text": ["<|image_pad|>"], "images": [image]})
merge = info.get_hf_config().vision_config.spatial_merge_size
t, h, w = (int(x) for x in features["image_grid_thw"][0])
out = {
    "max_model_len": config.max_model_len,
    "mm_processor_kwargs": config.multimodal_config.mm_processor_kwargs,
    "image_tokens": t * h * w // merge**2,
}
args.max_model_len = req["too_long"]
try:
    AsyncEngineArgs.from_cli_args(args).create_model_config()
    out["too_long"] = None
except Exception as err:
    out["too_long"] = f"{type(err).__name__}: {err}"
print("RESULT " + json.dumps(out))
"""


def vllm_verdict(python: Path, request: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run the check with `python` (a venv with vLLM: `serving_python()`, or the SkyRL venv's, where the rollout
    engines' vLLM is) and return its reply."""
    version = python.parent.parent.name
    env = {**engine_env(python), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(python), "-c", _CHECK], input=json.dumps(request), capture_output=True, text=True, timeout=timeout, env=env
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"vLLM {version} check failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def serving_python() -> Path:
    """The vLLM the local demo serves with (mmrl_local.toolchain.vllm_cpu, built by `make vllm-cpu`)."""
    return vllm_cpu.bin_dir() / "python"
