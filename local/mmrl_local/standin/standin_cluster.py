"""Pure functions of the KubeRay stand-in for RayClusters: which pods a RayCluster wants, the pod and head
Service objects KubeRay v1.5 would create (its labels, generateName, ownerReferences), and the status it would
report for a set of observed pods. No API calls here; ``kuberay_standin`` does the I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

HEAD_GROUP = "headgroup"
CREATED_BY = "kuberay-operator"
# Ports KubeRay's head Service exposes.
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080, "serve": 8000}


@dataclass(frozen=True)
class GroupWant:
    group: str
    node_type: str  # "head" | "worker"
    count: int
    template: dict


def owner_ref(obj: dict) -> dict:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def head_service_name(cluster_name: str) -> str:
    return f"{cluster_name}-head-svc"


def wanted_groups(cluster: dict) -> list[GroupWant]:
    spec = cluster.get("spec") or {}
    head = spec.get("headGroupSpec") or {}
    wants = [GroupWant(HEAD_GROUP, "head", 1, head.get("template") or {})]
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        replicas = group.get("replicas", group.get("minReplicas", 0)) or 0
        hosts = group.get("numOfHosts", 1) or 1
        wants.append(GroupWant(group["groupName"], "worker", replicas * hosts, group.get("template") or {}))
    return wants


def ray_labels(cluster_name: str, want: GroupWant) -> dict[str, str]:
    return {
        "ray.io/cluster": cluster_name,
        "ray.io/node-type": want.node_type,
        "ray.io/group": want.group,
        "ray.io/identifier": f"{cluster_name}-{want.node_type}",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": CREATED_BY,
    }


POD_PREFIX_MAX = 50  # KubeRay v1.5 utils.PodName: 63 - len("-worker-") - 5 generated characters


def pod_generate_name(cluster_name: str, want: GroupWant) -> str:
    """KubeRay's generateName for a Ray pod (utils.PodName): the cluster's name for the head, `<cluster>-<group>` for a
    worker, cut to 50 characters, then `-head-` or `-worker-`, lowercased."""
    prefix = cluster_name if want.node_type == "head" else f"{cluster_name}-{want.group}"
    return f"{prefix[:POD_PREFIX_MAX]}-{want.node_type}-".lower()


def build_pod(cluster: dict, want: GroupWant) -> dict:
    """A pod for one Ray node, built from the group's template the way KubeRay does (template metadata kept,
    KubeRay's labels on top, owned by the RayCluster)."""
    name = cluster["metadata"]["name"]
    template = copy.deepcopy(want.template)
    meta = template.get("metadata") or {}
    prefix = pod_generate_name(name, want)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": prefix,
            "namespace": cluster["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **ray_labels(name, want)},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_ref(cluster)],
        },
        "spec": template.get("spec") or {"containers": [{"name": "ray", "image": "rayproject/ray"}]},
    }


def build_head_service(cluster: dict) -> dict:
    name = cluster["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": head_service_name(name),
            "namespace": cluster["metadata"]["namespace"],
            "labels": {"ray.io/cluster": name, "ray.io/node-type": "head", "app.kubernetes.io/created-by": CREATED_BY},
            "ownerReferences": [owner_ref(cluster)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
            "ports": [{"name": k, "port": v, "targetPort": v} for k, v in HEAD_PORTS.items()],
        },
    }


def merge_patch_for(old: dict, new: dict) -> dict:
    """The JSON merge patch turning ``old`` into ``new`` (keys that disappear are set to null)."""
    patch: dict = {k: None for k in old if k not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            sub = merge_patch_for(old[key], value)
            if sub:
                patch[key] = sub
        elif old.get(key) != value:
            patch[key] = value
    return patch


# RayClusterStatus's counters are Go int32/int64 fields tagged `omitempty`: KubeRay never writes a zero.
OMITTED_WHEN_ZERO = (
    "readyWorkerReplicas",
    "availableWorkerReplicas",
    "desiredWorkerReplicas",
    "minWorkerReplicas",
    "maxWorkerReplicas",
    "observedGeneration",
)


def omit_zero(status: dict) -> dict:
    return {k: v for k, v in status.items() if not (k in OMITTED_WHEN_ZERO and not v)}


def prune(obj):
    """Drop None values recursively (the API server never stores them)."""
    if isinstance(obj, dict):
        return {k: prune(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [prune(v) for v in obj]
    return obj


def pod_is_live(pod: dict) -> bool:
    """Counts toward the group: not being deleted and not finished (finished ones get replaced)."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_is_ready(pod: dict, *, include_terminating: bool = False) -> bool:
    """Running and Ready. KubeRay v1.5 counts a Terminating pod that still reports Ready among the ready replicas
    (``include_terminating``, the stand-in's strict mode)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    if not pod_is_live(pod) and not (include_terminating and pod["metadata"].get("deletionTimestamp")):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _condition(ctype: str, ok: bool, reason: str, message: str, previous: list[dict], now: str) -> dict:
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == ctype), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}


def cluster_status(
    cluster: dict, pods: list[dict], service_name: str | None, now: str, *, strict: bool = False
) -> dict:
    """The status KubeRay v1.5 reports for ``cluster`` given its pods (all of them, any phase)."""
    spec = cluster.get("spec") or {}
    old = cluster.get("status") or {}
    previous = old.get("conditions") or []
    if spec.get("suspend"):
        return omit_zero(
            {
                "state": "suspended",
                "conditions": [_condition("RayClusterSuspended", True, "RayClusterSuspended", "", previous, now)],
                "readyWorkerReplicas": 0,
                "availableWorkerReplicas": 0,
                "desiredWorkerReplicas": 0,
                "observedGeneration": cluster["metadata"].get("generation"),
            }
        )
    wants = wanted_groups(cluster)
    heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head" and pod_is_live(p)]
    workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker" and pod_is_live(p)]
    desired = sum(w.count for w in wants if w.node_type == "worker")
    ready_workers = sum(1 for p in workers if pod_is_ready(p))
    if strict:  # ...plus the Terminating workers that still say Ready
        ready_workers += sum(
            1
            for p in pods
            if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
            and p["metadata"].get("deletionTimestamp")
            and pod_is_ready(p, include_terminating=True)
        )
    head = heads[0] if heads else None
    head_ready = head is not None and pod_is_ready(head)
    all_ready = head_ready and ready_workers >= desired
    provisioned_before = any(c.get("type") == "RayClusterProvisioned" and c.get("status") == "True" for c in previous)
    conditions = [
        _condition(
            "HeadPodReady",
            head_ready,
            "HeadPodRunningAndReady" if head_ready else ("HeadPodNotReady" if head else "HeadPodNotFound"),
            "" if head_ready else "the head pod is not running and ready",
            previous,
            now,
        ),
        # KubeRay keeps RayClusterProvisioned True once every pod was ready the first time.
        _condition(
            "RayClusterProvisioned",
            all_ready or provisioned_before,
            "AllPodRunningAndReadyFirstTime" if all_ready or provisioned_before else "RayClusterPodsProvisioning",
            "" if all_ready or provisioned_before else "not all Ray pods are ready yet",
            previous,
            now,
        ),
    ]
    status: dict = {
        "conditions": conditions,
        "readyWorkerReplicas": ready_workers,
        "availableWorkerReplicas": sum(1 for p in workers if (p.get("status") or {}).get("phase") == "Running"),
        "desiredWorkerReplicas": desired,
        "minWorkerReplicas": sum(
            (g.get("minReplicas") or 0) * (g.get("numOfHosts") or 1) for g in spec.get("workerGroupSpecs") or []
        ),
        "maxWorkerReplicas": sum(
            (g.get("maxReplicas") or 0) * (g.get("numOfHosts") or 1) for g in spec.get("workerGroupSpecs") or []
        ),
        "observedGeneration": cluster["metadata"].get("generation"),
        "head": {},
    }
    if old.get("state") == "ready" or all_ready:
        # Like KubeRay, the deprecated `state` stays "ready" after the first time; conditions tell the truth.
        status["state"] = "ready"
    if head is not None:
        status["head"] = {"podName": head["metadata"]["name"], "podIP": (head.get("status") or {}).get("podIP")}
    if service_name:
        status["head"]["serviceName"] = service_name
        status["endpoints"] = {k: str(v) for k, v in HEAD_PORTS.items()}
    return prune(omit_zero(status))
