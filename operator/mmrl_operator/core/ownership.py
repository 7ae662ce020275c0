"""Which objects belong to a job: those whose controller ownerReference carries the job's UID. Names and labels
are only where to look; anyone who may create objects in the namespace can choose them.

Pure readers, plus `conflict`, the check before a write: an object under a child's name that this job does not
control is never written (server-side apply with force would take it over); the job reports a NameConflict.
"""

from __future__ import annotations

from typing import Any

from mmrl_operator.core.names import raycluster_name


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with `controller: true`, if any (Kubernetes allows at most one)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None)


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    ref = controller_of(obj)
    return bool(uid) and ref is not None and ref.get("uid") == uid


def ray_pod_of(pod: dict[str, Any], job_name: str, cluster_uid: str | None) -> bool:
    """A Ray pod belongs to the job when its controller is the job's RayCluster. A terminating pod of an earlier
    RayCluster of the same name still counts (the next attempt waits for it to go); a live one must name the
    current cluster's UID."""
    ref = controller_of(pod)
    if ref is None or ref.get("kind") != "RayCluster" or ref.get("name") != raycluster_name(job_name):
        return False
    if cluster_uid is not None and ref.get("uid") == cluster_uid:
        return True
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def describe(kind: str, name: str, obj: dict[str, Any]) -> str:
    """One sentence naming an object this job does not control, and who does."""
    ref = controller_of(obj)
    by = f"controlled by {ref.get('kind')} {ref.get('name')}" if ref else "not controlled by any object"
    return f"{kind} {name} already exists and is {by}, not by this job"
