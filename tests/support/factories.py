"""Small factories for jobs and KubeRay/Kubernetes objects as the controller observes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_operator.core.health import node_verdict
from tests.support.corpus import example, merge_patch

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def job(
    patch: dict[str, Any] | None = None, status: dict[str, Any] | None = None, name: str = "geo"
) -> MultimodalRLJob:
    doc = merge_patch(example(), patch or {})
    doc["metadata"].update({"name": name, "namespace": "team", "uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000000"})
    if status is not None:
        doc["status"] = status
    return MultimodalRLJob.model_validate(doc)


def raycluster(ready: bool = True, workers: int = 1, spec_hash: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "geo", "annotations": {"mmrl.dev/spec-hash": spec_hash or "x"}},
        "spec": {"workerGroupSpecs": [{"groupName": "p5", "replicas": workers}]},
        "status": {},
    }
    if ready:
        obj["status"] = {
            "state": "ready",
            "readyWorkerReplicas": workers,
            "conditions": [{"type": "HeadPodReady", "status": "True"}],
        }
    return obj


def rayjob(deployment: str = "Running", job_status: str = "RUNNING", reason: str = "", message: str = "") -> dict:
    st = {"jobDeploymentStatus": deployment, "jobStatus": job_status}
    if reason:
        st["reason"] = reason
    if message:
        st["message"] = message
    return {"metadata": {"name": "x"}, "status": st}


def node(
    name: str, health: str = c.HEALTH_SCHEDULABLE, ready: bool = True, uid: str | None = None, **labels: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "labels": {c.HYPERPOD_HEALTH_LABEL: health, **labels}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def verdicts(*nodes: dict[str, Any] | tuple[str, None]) -> dict:
    out = {}
    for n in nodes:
        if isinstance(n, tuple):
            out[n[0]] = node_verdict(n[0], None)
        else:
            out[n["metadata"]["name"]] = node_verdict(n["metadata"]["name"], n)
    return out


def adapter_report(where: str, **more: Any) -> dict[str, Any]:
    """What the trainer reports at the end (status.adapter) for examples/job.yaml's rank-32 LoRA, exported to `where`,
    with the digest of its files; `more` replaces or adds fields (`path` too)."""
    return {
        "path": where,
        "rank": 32,
        "alpha": 32,
        "targetModules": ["q_proj", "v_proj"],
        "baseModel": "Qwen/Qwen3-VL-8B-Instruct",
        "sha256": "ab" * 32,
        "digest": "d1" * 32,
        "config": {"peft_type": "LORA", "r": 32, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]},
        **more,
    }
