"""The TrainerConfig the RayJob's entrypoint reads, and the ConfigMap that carries it to every Ray pod."""

from __future__ import annotations

import json
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api.cluster import WorkerGroup
from mmrl_api.gpus import instance_gpu
from mmrl_api.trainer_config import CheckpointConfig, JobRef, Placement, TrainerConfig
from mmrl_operator.core.builders.common import child_metadata
from mmrl_operator.core.builders.volumes import build_mounts, local_path
from mmrl_operator.core.names import config_map_name, job_dir


def build_trainer_config(job: MultimodalRLJob) -> TrainerConfig:
    spec = job.spec
    claims = build_mounts(job).claim_paths
    directory = job_dir(job)
    groups = spec.cluster.worker_groups
    return TrainerConfig(
        backend=spec.trainer.backend,
        job=JobRef(namespace=job.namespace, name=job.name, uid=(job.metadata.model_extra or {}).get("uid", "")),
        model=spec.model.model_copy(update={"name": local_path(spec.model.name, claims)}),
        lora=spec.lora,
        algorithm=spec.algorithm,
        dataset=spec.dataset.model_copy(
            update={
                "train": local_path(spec.dataset.train, claims),
                "validation": local_path(spec.dataset.validation, claims),
            }
        ),
        checkpoint=CheckpointConfig(
            dir=directory,
            interval_steps=spec.checkpoint.interval_steps,
            keep=spec.checkpoint.keep,
            hf_save_interval_steps=spec.checkpoint.hf_save_interval_steps,
        ),
        resume="latest",
        export_dir=f"{directory}/adapter",
        placement=placement(groups),
        tracking=spec.tracking,
    )


def placement(groups: list[WorkerGroup]) -> Placement:
    """Nodes, GPUs per node, and the GPU when the first group's instance type is known (mmrl_api.gpus)."""
    found = instance_gpu(groups[0].instance_type)
    return Placement(
        num_nodes=sum(g.replicas for g in groups),
        gpus_per_node=groups[0].gpus,
        gpu_model=found.gpu.model if found else None,
        gpu_memory_mib=found.gpu.memory_mib if found else None,
    )


def build_config_map(job: MultimodalRLJob) -> dict[str, Any]:
    config = build_trainer_config(job)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, config_map_name(job.name), "trainer-config"),
        "data": {"trainer.json": json.dumps(json.loads(config.to_json()), indent=2, sort_keys=True)},
    }
