"""A TrainerConfig file for the SkyRL backend's entrypoint tests (a tiny synthetic dataset, progress off)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def skyrl_config(
    job_dir: str, *, num_nodes: int = 1, gpus_per_node: int = 8, algorithm: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    return {
        "backend": "skyrl",
        "job": {"namespace": "default", "name": "tiny"},
        "model": {"name": "/models/base"},
        "dataset": {"train": "synthetic://colors?n=4"},
        "algorithm": {"trainBatchSize": 4, "miniBatchSize": 4, "samplesPerPrompt": 4, **(algorithm or {})},
        "checkpoint": {"dir": job_dir, "interval_steps": 1, "keep": 2},
        "export_dir": f"{job_dir}/adapter",
        "placement": {"num_nodes": num_nodes, "gpus_per_node": gpus_per_node},
        "progress": {"enabled": False},
        **top,
    }


def skyrl_config_file(tmp_path: Path, **kwargs: Any) -> Path:
    path = tmp_path / "trainer.json"
    path.write_text(json.dumps(skyrl_config(str(tmp_path / "job"), **kwargs)))
    return path
