"""Where Ray puts the training work on the RayCluster mmrl builds: a real Ray cluster on this machine, started with
the head's rayStartParams exactly as the builder writes them, and a worker with CPUs as KubeRay's worker pods have."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import cluster_utils

from mmrl_operator.core.builders.raycluster import build_raycluster
from tests.support.factories import job

pytestmark = pytest.mark.trainer


# The rayStartParams that reserve resources, as `ray start` flags and as Cluster.add_node arguments.
RESOURCE_PARAMS = {"num-cpus": "num_cpus", "num-gpus": "num_gpus"}


def node_args(ray_start_params: dict[str, str]) -> dict[str, Any]:
    """What `ray start` gets from KubeRay for these params; unset ones leave Ray to detect the node's resources."""
    return {arg: int(ray_start_params[param]) for param, arg in RESOURCE_PARAMS.items() if param in ray_start_params}


@pytest.fixture
def ray_cluster() -> Iterator[tuple[str, str]]:
    """(head node id, worker node id) of a two-node Ray cluster shaped like the job's RayCluster."""
    head_params = build_raycluster(job())["spec"]["headGroupSpec"]["rayStartParams"]
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={**node_args(head_params), "include_dashboard": False}
    )
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address)
        yield cluster.head_node.node_id, worker.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_task_shaped_like_our_skyrl_entry_runs_on_a_worker_never_on_the_head(ray_cluster: tuple[str, str]) -> None:
    head, worker = ray_cluster

    # The shape of mmrl_trainer/backends/skyrl.py's entry: SkyRL's whole training loop runs inside this task.
    @ray.remote(num_cpus=1)
    def entry() -> str:
        return ray.get_runtime_context().get_node_id()

    # Submitted from the head, like the RayJob's driver: with CPUs on the head, Ray would keep the task local.
    assert ray.get(entry.remote(), timeout=120) == worker != head
