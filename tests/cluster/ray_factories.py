"""Small factories for RayCluster / RayJob bodies used by the cluster tests."""

from __future__ import annotations

from mmrl_api.constants import TRAINER_RAY_VERSION
from mmrl_local.cluster import hyperpod as hp

RAY = ("ray.io", "v1")


def pod_template(*, gpus: int = 0, instance_group: str | None = None, env: dict[str, str] | None = None) -> dict:
    container: dict = {
        "name": "ray",
        "image": f"rayproject/ray:{TRAINER_RAY_VERSION}",
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    spec: dict = {"containers": [container]}
    if gpus:
        container["resources"] = {"limits": {hp.GPU: str(gpus)}, "requests": {hp.GPU: str(gpus)}}
    if instance_group:
        spec["nodeSelector"] = {hp.INSTANCE_GROUP_NAME: instance_group}
    return {"metadata": {"labels": {"mmrl.dev/job": "test"}}, "spec": spec}


def raycluster(
    name: str,
    *,
    workers: int = 2,
    gpus: int = 8,
    worker_group: str = "gpu-workers",
    head_env: dict[str, str] | None = None,
) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": TRAINER_RAY_VERSION,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": pod_template(instance_group="controller", env=head_env),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": pod_template(gpus=gpus, instance_group=worker_group),
                }
            ],
        },
    }


def rayjob(name: str, cluster: str, *, entrypoint: str = "python -m mmrl_trainer", script: str | None = None) -> dict:
    annotations = {hp.RAYJOB_SCRIPT: script} if script is not None else {}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"entrypoint": entrypoint, "clusterSelector": {"ray.io/cluster": cluster}},
    }
