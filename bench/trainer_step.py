"""Seconds per GRPO step of the local backend on CPU: the tiny Qwen3-VL on the colour task, LoRA rank 8.

Prints the median per-step time TRL measured (generation + reward + update), its p90, and the wall-clock time of
the whole run (model load, trainer set-up, steps, adapter export), for a few batch sizes. Usage:
`python bench/trainer_step.py [--steps 20] [--prompts 4 8] [--samples 4]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "trainer")]  # measure this checkout, not another install
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MMRL_TORCH_THREADS", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args()

    from mmrl_api.trainer_config import TrainerConfig
    from mmrl_trainer.backends import local
    from mmrl_trainer.tiny import build_tiny_vlm

    model = build_tiny_vlm()
    print(f"threads={os.environ['MMRL_TORCH_THREADS']} model={model}")
    print(f"{'prompts':>7} {'samples':>7} {'steps':>5} {'s/step p50':>10} {'s/step p90':>10} {'run wall s':>10}")
    for prompts in args.prompts:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = TrainerConfig.model_validate(
                {
                    "backend": "local",
                    "job": {"namespace": "bench", "name": "trainer-step"},
                    "model": {"name": str(model)},
                    "lora": {"rank": 8, "alpha": 16},
                    "algorithm": {
                        "samplesPerPrompt": args.samples,
                        "learningRate": 3e-3,
                        "trainBatchSize": prompts,
                        "miniBatchSize": prompts,
                        "maxSteps": args.steps,
                        "maxResponseLength": 6,
                    },
                    "dataset": {"train": "synthetic://colors?n=512"},
                    "checkpoint": {"dir": tmp, "interval_steps": 10**6, "keep": 1},
                    "export_dir": str(Path(tmp) / "adapter"),
                    "progress": {"enabled": False},
                }
            )
            start = time.perf_counter()
            result = local.run(cfg, evaluate=False)
            wall = time.perf_counter() - start
            records = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
            step_times = [r["step_time"] for r in records if r.get("step_time") is not None]
            p50 = statistics.median(step_times)
            p90 = statistics.quantiles(step_times, n=10)[-1] if len(step_times) > 1 else p50
            print(f"{prompts:>7} {args.samples:>7} {result.final_step:>5} {p50:>10.3f} {p90:>10.3f} {wall:>10.1f}")


if __name__ == "__main__":
    main()
