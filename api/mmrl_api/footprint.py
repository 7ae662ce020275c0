"""The storage a job's checkpoints need, so a platform team can size FSx before the first run fills it.

What SkyRL 0.3.0 writes per checkpoint with FSDP + LoRA (backends/skyrl_train/distributed/fsdp_strategy.py:
save_checkpoint): every rank's shard of the policy's full state dict, base weights included, in fp32 (the policy is
loaded with bf16=False, workers/fsdp/fsdp_worker.py, so the master copy is fp32); the AdamW state, two fp32 tensors
per trained parameter and none for the frozen base (torch's AdamW keeps state only for parameters with gradients);
the PEFT adapter (`lora_adapter/`, fp32); and small configs. SkyRL deletes the oldest checkpoint only after writing
a new one, so `keep + 1` checkpoints are on disk at the peak. The local (TRL) backend saves the adapter and its
optimizer state only.

Parameter counts come from the reference models' architectures (mmrl_api.architecture, which also sizes a LoRA) or
the `<N>B` in the model's name; for any other model the footprint is unknown (None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from mmrl_api.architecture import Architecture, reference_architecture
from mmrl_api.spec import LoRASpec, ModelSpec

FP32_BYTES = 4
ADAMW_STATES = 2  # exp_avg, exp_avg_sq


_BILLIONS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)b(?![a-z0-9])")


def model_size(name: str) -> tuple[int, Architecture | None] | None:
    """(parameters, architecture if known) for a model name, hub id, URI or path; None when unknown."""
    known = reference_architecture(name)
    if known is not None:
        return known.params, known
    return _from_name(name.rstrip("/").rsplit("/", 1)[-1].lower())


def _from_name(leaf: str) -> tuple[int, None] | None:
    found = _BILLIONS.search(leaf.replace("_", "-"))
    return (int(float(found.group(1)) * 1e9), None) if found else None


@dataclass(frozen=True)
class Footprint:
    params: int
    lora_params: int | None
    """None when the model's shape is unknown: the LoRA share (about 1% for rank 32) is then left out."""
    bytes_per_checkpoint: int
    checkpoints: int
    """keep + 1: the newest is written before the oldest is deleted."""

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_checkpoint * self.checkpoints

    def describe(self) -> str:
        return (
            f"{self.total_bytes / 1e9:.1f} GB ({self.checkpoints} checkpoints of {self.bytes_per_checkpoint / 1e9:.1f}"
            f" GB; {self.params / 1e9:.2f}B parameters"
            + ("" if self.lora_params is not None else ", LoRA share not included: model shape unknown")
            + ")"
        )


def checkpoint_footprint(model: ModelSpec, lora: LoRASpec, keep: int, backend: str) -> Footprint | None:
    """Expected checkpoint storage of a job; None when the model's parameter count is unknown."""
    size = model_size(model.name)
    if size is None:
        return None
    params, shape = size
    if backend == "local" and shape is None:
        return None  # the local backend saves only LoRA-sized state, which needs the shape
    lora_params = shape.lora_params(lora.rank, list(lora.target_modules)) if shape else None
    trained = lora_params or 0
    adapter_and_optimizer = trained * FP32_BYTES * (1 + ADAMW_STATES)
    if backend == "local":
        per_checkpoint = adapter_and_optimizer
    else:
        per_checkpoint = (params + trained) * FP32_BYTES + adapter_and_optimizer
    return Footprint(params, lora_params, per_checkpoint, keep + 1)


class _Job(Protocol):
    model: ModelSpec
    lora: LoRASpec


def footprint_of(job: _Job) -> Footprint | None:
    """The footprint of a MultimodalRLJob spec or a TrainerConfig (both carry model, LoRA and checkpoint.keep)."""
    backend = getattr(job, "backend", None) or job.trainer.backend  # type: ignore[attr-defined]
    return checkpoint_footprint(job.model, job.lora, job.checkpoint.keep, backend)  # type: ignore[attr-defined]


def footprint_status(job: _Job) -> dict[str, int | str] | None:
    """`status.checkpointFootprint` of a job spec (camelCase keys), or None when the model's size is unknown."""
    found = footprint_of(job)
    if found is None:
        return None
    return {
        "totalBytes": found.total_bytes,
        "perCheckpointBytes": found.bytes_per_checkpoint,
        "checkpoints": found.checkpoints,
        "summary": found.describe(),
    }
