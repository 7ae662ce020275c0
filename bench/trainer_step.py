"""CPU step time of the local backend against plain TRL GRPOTrainer, and checkpoint save/load time.

The same tiny Qwen3-VL, the same colour task, LoRA rank 8, the same GRPOConfig (built by the local backend's own
`grpo_kwargs`, so the settings cannot drift) and the same reward; "plain TRL" is GRPOTrainer.train() with none of
mmrl's callbacks (checkpoint commit, progress reporting) and no adapter export. Step time is what TRL itself
logs as `step_time` (generation + reward + update). Checkpoint save and load: the time spent in
transformers.Trainer's own checkpoint methods (`_save_checkpoint`: adapter, optimizer, scheduler, RNG state;
`_load_from_checkpoint`, `_load_optimizer_and_scheduler`, `_load_rng_state`, `_load_scaler` on resume), timed by
wrapping them on the trainer instance; mmrl's commit on top of a save is one rename and a marker file.

    python bench/trainer_step.py [--steps 20] [--prompts 4 8] [--samples 4] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import common

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MMRL_TORCH_THREADS", "1")


def trainer_config(model: Path, prompts: int, samples: int, steps: int, tmp: Path, interval: int = 10**6):  # type: ignore[no-untyped-def]
    from mmrl_api.trainer_config import TrainerConfig

    return TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "bench", "name": "trainer-step"},
            "model": {"name": str(model)},
            "lora": {"rank": 8, "alpha": 16},
            "algorithm": {
                "samplesPerPrompt": samples,
                "learningRate": 3e-3,
                "trainBatchSize": prompts,
                "miniBatchSize": prompts,
                "maxSteps": steps,
                "maxResponseLength": 6,
            },
            "dataset": {"train": "synthetic://colors?n=512"},
            "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": interval, "keep": 1},
            "export_dir": str(tmp / "adapter"),
            "progress": {"enabled": False},
        }
    )


def step_stats(step_times: list[float]) -> dict[str, float]:
    p90 = statistics.quantiles(step_times, n=10)[-1] if len(step_times) > 1 else step_times[0]
    return {"p50": round(statistics.median(step_times), 4), "p90": round(p90, 4), "steps": len(step_times)}


def run_mmrl(cfg) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from mmrl_trainer.backends import local

    start = time.perf_counter()
    local.run(cfg, evaluate=False)
    wall = time.perf_counter() - start
    records = [json.loads(x) for x in (Path(cfg.checkpoint.dir) / "metrics.jsonl").read_text().splitlines()]
    times = [r["step_time"] for r in records if r.get("step_time") is not None]
    return {**step_stats(times), "wall_s": round(wall, 2), "step_times": times}


def plain_trl(cfg, output_dir: Path, *, save_at_end: bool = False, resume: str | None = None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """GRPOTrainer exactly as TRL documents it: model, reward function, config, dataset, peft config; nothing else."""
    import datasets
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, set_seed
    from trl import GRPOConfig, GRPOTrainer

    from mmrl_trainer.backends.local import _reward_fn, configure_threads, grpo_kwargs, lora_config
    from mmrl_trainer.data import load_examples, to_trl_rows

    configure_threads()
    kwargs = grpo_kwargs(cfg, str(output_dir), use_cpu=not torch.cuda.is_available())
    if save_at_end:
        kwargs["save_steps"] = cfg.algorithm.max_steps
    processor = AutoProcessor.from_pretrained(cfg.model.name)
    model = AutoModelForImageTextToText.from_pretrained(cfg.model.name, dtype=torch.float32)
    set_seed(cfg.seed)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=_reward_fn(cfg),
        args=GRPOConfig(**kwargs),
        train_dataset=datasets.Dataset.from_list(to_trl_rows(load_examples(cfg.dataset.train, cfg.dataset))),
        processing_class=processor,
        peft_config=lora_config(cfg),
    )
    spent = {"save": 0.0, "load": 0.0}
    for method, kind in CHECKPOINT_METHODS.items():
        setattr(trainer, method, timed(getattr(trainer, method), spent, kind))
    trainer.train(resume_from_checkpoint=resume)
    times = [h["step_time"] for h in trainer.state.log_history if h.get("step_time") is not None]
    out: dict[str, Any] = step_stats(times) if times else {}
    return {**out, "save_s": round(spent["save"], 3), "load_s": round(spent["load"], 3), "step_times": times}


# transformers.Trainer's own checkpoint steps (private, so looked up by name): what a save and a resume cost.
CHECKPOINT_METHODS = {
    "_save_checkpoint": "save",
    "_load_from_checkpoint": "load",
    "_load_optimizer_and_scheduler": "load",
    "_load_rng_state": "load",
    "_load_scaler": "load",
}


def timed(method, spent: dict[str, float], kind: str):  # type: ignore[no-untyped-def]
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent[kind] += time.perf_counter() - start

    return wrapper


def checkpoint_times(model: Path, prompts: int, samples: int, steps: int) -> dict[str, float]:
    """Save at the last of `steps`, then resume from that checkpoint for one more step."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trl"
        saved = plain_trl(trainer_config(model, prompts, samples, steps, Path(tmp)), out, save_at_end=True)
        ckpt = next(out.glob("checkpoint-*"))
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        resumed = plain_trl(trainer_config(model, prompts, samples, steps + 1, Path(tmp)), out, resume=str(ckpt))
    return {"save_s": saved["save_s"], "load_s": resumed["load_s"], "checkpoint_mib": round(size / 2**20, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="runs per side, interleaved; step times pooled")
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()

    from mmrl_trainer.tiny import build_tiny_vlm

    began = time.monotonic()
    model = build_tiny_vlm()
    print(f"threads={os.environ['MMRL_TORCH_THREADS']} model={model}")
    print(f"{'prompts':>7} {'samples':>7} {'mmrl s/step':>11} {'TRL s/step':>10} {'mmrl run s':>10}")
    rows = []
    for prompts in args.prompts:
        runs: dict[str, list[dict[str, Any]]] = {"mmrl_local": [], "plain_trl": []}
        for r in range(args.repeat):
            # ABBA order, so a machine that gets busier or quieter during the run favours neither side.
            for side in ("mmrl_local", "plain_trl") if r % 2 == 0 else ("plain_trl", "mmrl_local"):
                with tempfile.TemporaryDirectory() as tmp:
                    cfg = trainer_config(model, prompts, args.samples, args.steps, Path(tmp))
                    runs[side].append(run_mmrl(cfg) if side == "mmrl_local" else plain_trl(cfg, Path(tmp) / "out"))
        mmrl = step_stats([t for run in runs["mmrl_local"] for t in run["step_times"]])
        mmrl["wall_s"] = round(statistics.median(run["wall_s"] for run in runs["mmrl_local"]), 2)
        trl = step_stats([t for run in runs["plain_trl"] for t in run["step_times"]])
        rows.append({"prompts": prompts, "samples": args.samples, "mmrl_local": mmrl, "plain_trl": trl})
        print(f"{prompts:>7} {args.samples:>7} {mmrl['p50']:>11.3f} {trl['p50']:>10.3f} {mmrl['wall_s']:>10.1f}")
    ckpt = checkpoint_times(model, args.prompts[0], args.samples, max(2, args.steps // 4))
    print(f"checkpoint ({ckpt['checkpoint_mib']} MiB): save {ckpt['save_s']:.3f}s, load {ckpt['load_s']:.3f}s")
    result = {
        "threads": os.environ["MMRL_TORCH_THREADS"],
        "steps": args.steps,
        "repeat": args.repeat,
        "rows": rows,
        "checkpoint": ckpt,
        "seconds": round(time.monotonic() - began, 1),
    }
    common.write_result("trainer", result, args.out)


if __name__ == "__main__":
    main()
