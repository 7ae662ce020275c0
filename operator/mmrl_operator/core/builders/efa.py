"""The environment that makes NCCL use EFA, for the Ray pods that request EFA devices.

A pod that asks for `vpc.amazonaws.com/efa` gets libfabric's efa provider and the aws-ofi-nccl plugin that the
trainer image carries; without them NCCL quietly falls back to TCP sockets between nodes, which trains, only slowly.
Derived from the pod's own resources and instance type, so whatever requests EFA (a worker group's `efaPerNode`,
or the resource in `resources`) gets it, and a variable the user set in `spec.trainer.env` is never overridden.
"""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c


def requests_efa(resources: dict[str, Any]) -> bool:
    counts = [str((resources.get(kind) or {}).get(c.EFA_RESOURCE, "0")) for kind in ("limits", "requests")]
    return any(count not in ("0", "") for count in counts)


def rdma_capable(instance_type: str | None) -> bool:
    """p4d.24xlarge, ml.p5.48xlarge, ml.p6-b200.48xlarge: a family whose EFA devices do GPUDirect RDMA."""
    family = (instance_type or "").removeprefix("ml.").split(".")[0]
    return family.startswith(c.EFA_RDMA_INSTANCE_FAMILIES)


def efa_env(resources: dict[str, Any], instance_type: str | None, taken: set[str]) -> list[dict[str, str]]:
    """Env entries for a container with these resources on this instance type, leaving out the names in `taken`."""
    if not requests_efa(resources):
        return []
    wanted = {**c.EFA_ENV, **(c.EFA_RDMA_ENV if rdma_capable(instance_type) else {})}
    return [{"name": name, "value": value} for name, value in wanted.items() if name not in taken]
