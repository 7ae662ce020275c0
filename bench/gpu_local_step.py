"""The local backend on one GPU: GRPO step time and peak memory, per phase, for random-weight Qwen3-VL models.

Each size is a Qwen3-VL built offline from a config (the tiny model's tokenizer and processor, a Qwen-sized
vocabulary, random weights: the step's work and memory do not depend on what the weights say, and a random policy
rarely stops early, so every completion runs to `maxResponseLength`). The local backend trains it exactly as a job
would (`mmrl_trainer.backends.local.run`, fp32, LoRA, TRL's GRPOTrainer with its default gradient checkpointing).
Two TRL methods are wrapped to read CUDA's allocator counters per phase: `_generate_and_score_completions`
(generation, the reference log-probs, rewards) and `compute_loss` + backward (the rest of `training_step`). Printed
per size: parameters, LoRA parameters, the peak allocated bytes of each phase, the peak reserved bytes, and TRL's
own `step_time` (median over the steps after the first).

Runs where a GPU is (the device machine: torch, transformers, peft there; trl, datasets and pydantic travel as
wheels). `--plan` also prints mmrl's memory plan for the same model and batch next to what was measured.

    python bench/gpu_local_step.py [--sizes small medium] [--steps 6] [--out results.json]
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _src in ("api", "trainer", "operator"):
    sys.path.insert(0, str(ROOT / _src))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Text sizes of the models measured (the vision tower stays small: the prompts carry one small image each).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4},
    "small": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 8},
    "medium": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 20, "num_attention_heads": 16},
}
HEAD_DIM = 128
KV_HEADS = 4
VOCAB = 151_936  # Qwen3-VL's vocabulary, so the logits cost what they cost for the real models


def build_model(size: str, out: Path) -> Path:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from mmrl_trainer.tiny import build_config, build_processor

    processor = build_processor()
    config = build_config(processor.tokenizer)
    text = config.text_config
    for key, value in SIZES[size].items():
        setattr(text, key, value)
    text.head_dim = HEAD_DIM if SIZES[size]["hidden_size"] >= 1024 else 64
    text.num_key_value_heads = KV_HEADS if SIZES[size]["num_attention_heads"] >= KV_HEADS else 2
    hd = text.head_dim
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [hd // 4, hd // 8, hd // 8]}
    text.vocab_size = VOCAB
    text.max_position_embeddings = 4096
    config.vision_config.out_hidden_size = text.hidden_size
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def trainer_config(model: Path, tmp: Path, *, prompts: int, samples: int, steps: int, response: int):  # type: ignore[no-untyped-def]
    from mmrl_api.trainer_config import TrainerConfig

    return TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": "bench", "name": "gpu-step"},
            "model": {"name": str(model)},
            "lora": {"rank": 32, "alpha": 64},
            "algorithm": {
                "samplesPerPrompt": samples,
                "learningRate": 1e-5,
                "trainBatchSize": prompts,
                "miniBatchSize": prompts,
                "maxSteps": steps,
                "maxResponseLength": response,
            },
            "dataset": {"train": "synthetic://colors?n=512"},
            "checkpoint": {"dir": str(tmp / "ckpt"), "interval_steps": 10**6, "keep": 1},
            "export_dir": str(tmp / "adapter"),
            "progress": {"enabled": False},
        }
    )


_ACTIVE: PhasePeaks | None = None


class PhasePeaks:
    """Wraps GRPOTrainer's generation and loss to record each phase's peak allocated bytes."""

    def __init__(self) -> None:
        self.generation: list[int] = []
        self.training: list[int] = []
        self.reserved = 0
        self.base = 0

    def install(self) -> None:
        """Wrap the two methods once per process; a later size's PhasePeaks takes over the same wrappers."""
        import torch
        from trl import GRPOTrainer

        global _ACTIVE
        first = _ACTIVE is None
        _ACTIVE = self
        if not first:
            return

        generate, train_step = GRPOTrainer._generate_and_score_completions, GRPOTrainer.training_step

        def timed_generation(trainer, *args, **kwargs):  # type: ignore[no-untyped-def]
            peaks = _ACTIVE
            torch.cuda.synchronize()
            peaks.base = peaks.base or torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = generate(trainer, *args, **kwargs)
            torch.cuda.synchronize()
            peaks.generation.append(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            return out

        def timed_training(trainer, *args, **kwargs):  # type: ignore[no-untyped-def]
            peaks = _ACTIVE
            out = train_step(trainer, *args, **kwargs)
            torch.cuda.synchronize()
            peaks.training.append(torch.cuda.max_memory_allocated())
            peaks.reserved = max(peaks.reserved, torch.cuda.max_memory_reserved())
            return out

        GRPOTrainer._generate_and_score_completions = timed_generation  # type: ignore[method-assign]
        GRPOTrainer.training_step = timed_training  # type: ignore[method-assign]


def count_params(model_dir: Path, cfg) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Parameters of the model and of the LoRA the run trains, counted on the meta device."""
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForImageTextToText

    from mmrl_trainer.backends.local import lora_config

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(model_dir))
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in get_peft_model(model, lora_config(cfg)).parameters() if p.requires_grad)
    return {"params": total, "lora_params": trainable}


def measure(size: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from mmrl_trainer.backends import local

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        began = time.perf_counter()
        model = build_model(size, tmp / "model")
        built_s = time.perf_counter() - began
        cfg = trainer_config(
            model, tmp, prompts=args.prompts, samples=args.samples, steps=args.steps, response=args.response
        )
        peaks = PhasePeaks()
        peaks.install()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        began = time.perf_counter()
        local.run(cfg, evaluate=False)
        run_s = time.perf_counter() - began
        records = [json.loads(x) for x in (tmp / "ckpt" / "metrics.jsonl").read_text().splitlines()]
        times = [r["step_time"] for r in records if r.get("step_time") is not None]
        lengths = [r["completion_length"] for r in records if r.get("completion_length") is not None]
        counts = count_params(model, cfg)
    gib = 2**30
    return {
        "size": size,
        **SIZES[size],
        "head_dim": HEAD_DIM if SIZES[size]["hidden_size"] >= 1024 else 64,
        "vocab": VOCAB,
        **counts,
        "completions": args.prompts * args.samples,
        "max_response_length": args.response,
        "mean_completion_length": round(statistics.mean(lengths), 1) if lengths else None,
        "allocated_before_first_step_gib": round(peaks.base / gib, 3),
        "peak_generation_gib": round(max(peaks.generation) / gib, 3),
        "peak_training_gib": round(max(peaks.training) / gib, 3),
        "peak_reserved_gib": round(peaks.reserved / gib, 3),
        "step_time_p50_s": round(statistics.median(times[1:] or times), 3),
        "step_times_s": [round(t, 3) for t in times],
        "build_s": round(built_s, 1),
        "run_s": round(run_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "medium"], choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no GPU: this benchmark measures the local backend on one")
    device = torch.cuda.get_device_properties(0)
    result: dict[str, Any] = {
        "gpu": device.name,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "gpu_memory_gib": round(device.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": [],
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
    for size in args.sizes:
        row = measure(size, args)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
