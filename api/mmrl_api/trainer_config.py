"""TrainerConfig: the contract between the operator (which writes it into a ConfigMap) and the trainer.

It reuses the API's own models for everything the user specified (model, LoRA, algorithm, dataset and its task:
a reward, or a multi-turn environment), so there is no second field mapping to drift; it adds only what the
operator decides at run time: the job's identity, its checkpoint directory, resume mode, export location,
placement and where to report progress.
Importable without torch, kopf or kubernetes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mmrl_api.spec import AlgorithmSpec, DatasetSpec, LoRASpec, ModelSpec
from mmrl_api.tracking import TrackingSpec

CONFIG_VERSION = 1
log = logging.getLogger("mmrl_api.trainer_config")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class JobRef(_Strict):
    namespace: str
    name: str
    uid: str = ""


class CheckpointConfig(_Strict):
    dir: str
    """This job's checkpoint directory: a local/mounted path or an s3:// URI. Checkpoints are
    `<dir>/global_step_N/`, complete only once `<dir>/latest_ckpt_global_step.txt` names them."""
    interval_steps: int = Field(default=5, ge=1)
    keep: int = Field(default=3, ge=1)
    hf_save_interval_steps: int | None = Field(default=None, ge=1)


class ProgressConfig(_Strict):
    """Where the trainer reports progress: the job's status subresource, through the pod's ServiceAccount."""

    enabled: bool = True
    min_interval_seconds: float = Field(default=10.0, ge=0.0)
    metrics_file: str | None = None
    """JSONL metrics file; defaults to `<checkpoint.dir>/metrics.jsonl`."""


class Placement(_Strict):
    num_nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    gpu_model: str | None = None
    gpu_memory_mib: int | None = Field(default=None, ge=1)
    """The workers' GPU (mmrl_api.gpus, from the worker group's instanceType), for the trainer's memory check
    before any engine starts; None when the instance type is not in the table."""

    @property
    def world_size(self) -> int:
        """GPUs one SkyRL attempt trains on (FSDP world size, one vLLM engine each): every GPU of every worker,
        at least one per node."""
        return self.num_nodes * max(1, self.gpus_per_node)


class TrainerConfig(_Strict):
    version: Literal[1] = CONFIG_VERSION
    backend: Literal["skyrl", "local"] = "skyrl"
    job: JobRef
    model: ModelSpec
    lora: LoRASpec = Field(default_factory=LoRASpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    dataset: DatasetSpec
    checkpoint: CheckpointConfig
    resume: Literal["latest", "none"] = "latest"
    export_dir: str
    """Final PEFT adapter (adapter_config.json + adapter_model.safetensors), normally `<checkpoint.dir>/adapter`."""
    placement: Placement = Field(default_factory=Placement)
    progress: ProgressConfig = Field(default_factory=ProgressConfig)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    """The job's sinks (spec.tracking); credentials come as environment variables, never through this file."""
    seed: int = 0

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def load(cls, path: str | Path) -> TrainerConfig:
        return cls.model_validate(json.loads(Path(path).read_text()))


def wait_for_digest(path: str | Path, digest: str, timeout: float | None = None) -> bool:
    """Wait until the file at `path` hashes to `digest` (contract.config_digest). A ConfigMap volume is refreshed by
    the kubelet's periodic sync (about a minute), so a new attempt may start before its config arrives."""
    from mmrl_api.contract import config_digest

    limit = float(os.environ.get("MMRL_CONFIG_WAIT_SECONDS", "300")) if timeout is None else timeout
    deadline = time.monotonic() + limit
    while True:
        try:
            if config_digest(Path(path).read_text()) == digest:
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        log.info("waiting for %s to be updated to this attempt's config (%s)", path, digest[:12])
        time.sleep(2.0)
