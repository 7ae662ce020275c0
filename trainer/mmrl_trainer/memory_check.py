"""Before any engine starts: the GPU memory plan again, from the model's own config.json and the workers' GPU.

`mmrl validate` plans from the reference table; a job may name any model (a fine-tuned checkpoint, a mounted copy),
and its config.json is the truth about its shape. The trainer reads it (a local or mounted directory, or the hub's
config.json alone, which honours HF_HUB_OFFLINE and the cache) and refuses to start a job that would not fit:
exit 2, InvalidConfig, with the numbers of what does not fit. When neither the config nor the GPU is known, it
logs why it cannot check and goes on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mmrl_api.architecture import Architecture, reference_architecture
from mmrl_api.gpus import Gpu
from mmrl_api.memory_plan import MemoryPlan, task_plan
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.errors import InvalidConfig

log = logging.getLogger("mmrl_trainer.memory")


def read_model_config(cfg: TrainerConfig) -> tuple[dict[str, Any], str] | None:
    """(config.json's content, where it was read) for the job's model; None when it cannot be read here."""
    from mmrl_trainer.data import resolve_uri
    from mmrl_trainer.models import TINY_MODEL

    name = cfg.model.name
    if name == TINY_MODEL:
        from mmrl_trainer.tiny import build_tiny_vlm

        path: Path | None = build_tiny_vlm() / "config.json"
    elif name.startswith("s3://"):
        path = None  # staged onto the checkpoint volume later, by the SkyRL backend
    elif name.startswith(("/", "pvc://")):
        path = Path(resolve_uri(name)) / "config.json"
    else:
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(name.removeprefix("hf://"), "config.json", revision=cfg.model.revision))
        except Exception as err:  # offline without a cached copy, no such repo, no network: plan from the table
            log.info("memory plan: cannot read %s's config.json (%s)", name, err)
            path = None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text()), str(path)


def plan_memory(cfg: TrainerConfig) -> tuple[MemoryPlan | None, str]:
    """(the plan on the workers' GPU, where the model's shape came from), or (None, why there is no plan)."""
    place = cfg.placement
    if not place.gpu_memory_mib or place.gpus_per_node == 0:
        return None, "the workers' GPU is not known: no GPUs, or an instance type not in the table"
    found = read_model_config(cfg)
    arch = Architecture.from_hf_config(found[0]) if found else reference_architecture(cfg.model.name)
    if arch is None:
        return None, f"no config.json and no reference architecture for {cfg.model.name}"
    gpu = Gpu(place.gpu_model or "GPU", place.gpu_memory_mib)
    return task_plan(cfg, cfg.backend, gpu, place.world_size, arch), found[1] if found else "the reference table"


def check_memory(cfg: TrainerConfig) -> MemoryPlan | None:
    """Plan this job on its workers' GPU; raise InvalidConfig when it does not fit. None when it cannot check."""
    plan, source = plan_memory(cfg)
    if plan is None:
        log.info("memory plan: skipped (%s)", source)
        return None
    for line in plan.lines(problems=False):
        log.info("%s", line)
    if not plan.fits:
        raise InvalidConfig(f"GPU memory plan (model shape from {source}): " + "; ".join(map(str, plan.problems)))
    return plan
