"""Reading what the real Kueue did (tests/cluster/test_kueue.py, test_hyperpod_recovery.py): the Workload it made for
a RayCluster (``mmrl_local.addons.kueue_incluster``), its conditions, and a quota that fits exactly what a Workload
requests."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

from mmrl_local.addons import kueue_incluster
from mmrl_local.addons.kueue_incluster import GROUP, VERSION, workload_of


def workload_condition(custom: client.CustomObjectsApi, ns: str, cluster: str, type_: str) -> str | None:
    """The status of the condition ``type_`` of the RayCluster's Workload."""
    cond = kueue_incluster.workload_condition(workload_of(custom, ns, cluster), type_)
    return cond["status"] if cond else None


def set_active(custom: client.CustomObjectsApi, ns: str, cluster: str, active: bool) -> None:
    """Deactivate (or reactivate) the RayCluster's Workload, as an administrator does with kubectl: Kueue evicts a
    deactivated workload by suspending its job, through the path every eviction takes."""
    workload = workload_of(custom, ns, cluster)
    assert workload is not None, f"no Workload for {cluster}"
    name = workload["metadata"]["name"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name, {"spec": {"active": active}})


def quota_for(workload: dict[str, Any], times: int = 1) -> dict[str, str]:
    """What Kueue counts against quota for ``times`` such workloads (every pod set's requests times its count)."""
    total: dict[str, Decimal] = {}
    for pod_set in workload["spec"]["podSets"]:
        for container in pod_set["template"]["spec"]["containers"]:
            for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
                total[resource] = total.get(resource, Decimal(0)) + parse_quantity(value) * pod_set["count"] * times
    return {r: f"{int(v * 1000)}m" for r, v in total.items()}


def suspend_managers(rc: dict[str, Any]) -> set[str]:
    """The field managers that own the RayCluster's spec.suspend."""
    return {
        m["manager"]
        for m in rc["metadata"].get("managedFields") or []
        if "f:suspend" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    }
