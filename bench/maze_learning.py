"""Maze learning: the local backend trains the tiny Qwen3-VL on `synthetic://maze` (CPU) and the held-out success
rate is compared before and after, for several training seeds.

Each seed runs the real local backend (backends/local_episodes.py) on a small maze: its metrics file holds the
untrained policy's held-out success (`baseline`) and the trained one's (`finished`), both sampled at the RL
temperature over the same held-out mazes. Printed per seed, then the mean. No threshold: this is a measurement,
not a test. The defaults are the set-up bench/notes.md (maze learning) measured learning with, and `make demo
MAZE=1` trains: 3x3 mazes from the top-left to the bottom-right corner, shaped reward, 8 turns, 30 steps of 4 x 8
episodes at lr 2e-2 (about 5-6 minutes a seed on one shared core). `--ends random --reward goal --size 4
--turns 5` is the set-up that does not learn.

    PYTHONPATH=api:operator:trainer:local python bench/maze_learning.py [--seeds 0 1 2] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MMRL_TORCH_THREADS", "1")

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.backends import local
from mmrl_trainer.tiny import build_tiny_vlm


def maze_params(args: argparse.Namespace) -> dict[str, str]:
    return {"size": str(args.size), "walls": str(args.walls), "ends": args.ends, "reward": args.reward}


def maze_config(job_dir: Path, model: Path, seed: int, args: argparse.Namespace) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "bench", "name": f"maze-{seed}"},
            "model": {"name": str(model)},
            "lora": {"rank": 8, "alpha": 16},
            "algorithm": {
                "samplesPerPrompt": args.samples,
                "learningRate": args.lr,
                "trainBatchSize": args.batch,
                "miniBatchSize": args.batch,
                "maxSteps": args.steps,
                "maxResponseLength": 3,
                "maxPromptLength": 128,
                "klCoef": 0.0,
            },
            "dataset": {
                "train": "synthetic://maze?n=256&seed=0",
                "validation": f"synthetic://maze?n={args.held_out}&seed=1",
                "environment": {"name": "maze", "maxTurns": args.turns, "params": maze_params(args)},
            },
            "checkpoint": {"dir": str(job_dir), "interval_steps": 1000, "keep": 1},
            "export_dir": str(job_dir / "adapter"),
            "progress": {"enabled": False},
            "seed": seed,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-2)
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--walls", type=float, default=0.2)
    parser.add_argument("--ends", choices=["random", "corners"], default="corners")
    parser.add_argument("--reward", choices=["goal", "shaped"], default="shaped")
    args = parser.parse_args()
    model = build_tiny_vlm()
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="maze-bench-") as tmp:
            started = time.monotonic()
            local.run(maze_config(Path(tmp), model, seed, args))
            records = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        before = next(r for r in records if r.get("event") == "baseline")
        after = next(r for r in records if r.get("event") == "finished")
        train = [r for r in records if "episode_success" in r]
        rows.append((seed, before["eval_success"], after["eval_success"], time.monotonic() - started))
        curve = " ".join(f"{r['episode_success']:.2f}" for r in train[:: max(1, len(train) // 10)])
        print(
            f"seed {seed}: held-out success {before['eval_success']:.3f} -> {after['eval_success']:.3f} "
            f"(reward {before['eval_reward']:.3f} -> {after['eval_reward']:.3f}; train success first/last step "
            f"{train[0]['episode_success']:.2f}/{train[-1]['episode_success']:.2f}; {rows[-1][3]:.0f}s)\n"
            f"  train success along the run: {curve}",
            flush=True,
        )
    n = len(rows)
    print(
        f"mean over {n} seeds: held-out success {sum(r[1] for r in rows) / n:.3f} -> {sum(r[2] for r in rows) / n:.3f}"
        f" ({args.steps} steps of {args.batch}x{args.samples} episodes, lr {args.lr}, maze {maze_params(args)},"
        f" {args.turns} turns)"
    )


if __name__ == "__main__":
    main()
