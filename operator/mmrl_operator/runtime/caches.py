"""The operator's watch caches: every node, and the RayClusters, RayJobs, pods, Deployments and Services of every job.

A reconcile pass reads a job's children here instead of listing them (one GET of the job instead of a GET and
five LISTs), and a change to any of them wakes its job. Each cache keeps only the fields the decisions read
(`slim_*`), so 2,000 nodes or 3,000 pods cost a few MiB, not a copy of every object. A cache can be a moment
behind the apiserver; `runtime.reconcile.reconcile` therefore confirms any decision that starts or stops an attempt on a
fresh read before carrying it out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from mmrl_api import constants as c
from mmrl_operator.core.health import health_signature
from mmrl_operator.core.observed import avoided_by
from mmrl_operator.core.ownership import controller_of
from mmrl_operator.runtime.informer import Informer, Kind, Obj, key_of
from mmrl_operator.runtime.kube import Kube

log = logging.getLogger("mmrl.caches")
JobKey = tuple[str, str]

RAYCLUSTERS = Kind(c.RAY_GROUP, c.RAY_VERSION, "rayclusters")
RAYJOBS = Kind(c.RAY_GROUP, c.RAY_VERSION, "rayjobs")
PODS = Kind("", "v1", "pods")
DEPLOYMENTS = Kind("apps", "v1", "deployments")
SERVICES = Kind("", "v1", "services")
NODES = Kind("", "v1", "nodes", namespaced=False)


def _meta(obj: Obj) -> dict[str, Any]:
    """Metadata without managedFields; of the owner references only the controller's identity, which decides
    whether the object is the job's (see `ownership`)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("managedFields", "ownerReferences")}
    ref = controller_of(obj)
    if ref is not None:
        meta["ownerReferences"] = [{k: ref.get(k) for k in ("kind", "name", "uid", "controller")}]
    return meta


def slim_raycluster(obj: Obj) -> Obj:
    """Annotations (the spec hash), generation, suspend (Kueue), the worker groups' sizes and KubeRay's status —
    not the pod templates, which are most of the object."""
    spec = obj.get("spec") or {}
    groups = [
        {k: g[k] for k in ("groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts") if k in g}
        for g in spec.get("workerGroupSpecs") or []
    ]
    slim_spec = {"workerGroupSpecs": groups, **({"suspend": spec["suspend"]} if "suspend" in spec else {})}
    return {"metadata": _meta(obj), "spec": slim_spec, "status": obj.get("status") or {}}


def slim_rayjob(obj: Obj) -> Obj:
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k not in ("rayClusterSpec", "submitterPodTemplate")}
    return {"metadata": _meta(obj), "spec": spec, "status": obj.get("status") or {}}


def slim_pod(obj: Obj) -> Obj:
    """Labels, timestamps, the node, the containers' names (which one is Ray's) and the whole status (phase,
    reason, conditions, container states)."""
    spec = obj.get("spec") or {}
    return {
        "metadata": _meta(obj),
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [{"name": k.get("name")} for k in spec.get("containers") or []],
        },
        "status": obj.get("status") or {},
    }


def slim_deployment(obj: Obj) -> Obj:
    """The serving Deployment as `serving.deployment_state` and `serving.out_of_date` read it: metadata (generation,
    the spec digest), the replica count and the roll-out status, not the pod template."""
    spec = obj.get("spec") or {}
    slim_spec = {"replicas": spec["replicas"]} if "replicas" in spec else {}
    return {"metadata": _meta(obj), "spec": slim_spec, "status": obj.get("status") or {}}


def slim_service(obj: Obj) -> Obj:
    """The serving Service: that it is there, whose it is and what it was built from (metadata)."""
    return {"metadata": _meta(obj)}


def slim_node(obj: Obj) -> Obj:
    """What `health.node_verdict` reads: labels, taints, unschedulable and the Ready condition (not the images,
    addresses, capacity and every other condition a Node carries: ~58 KiB per node otherwise)."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    ready = [
        {"type": "Ready", "status": cd.get("status")}
        for cd in status.get("conditions") or []
        if cd.get("type") == "Ready"
    ]
    return {
        "metadata": {
            k: meta[k] for k in ("name", "uid", "resourceVersion", "labels", "deletionTimestamp") if k in meta
        },
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"conditions": ready},
    }


def job_of(obj: Obj) -> JobKey | None:
    meta = obj["metadata"]
    job = (meta.get("labels") or {}).get(c.LABEL_JOB)
    return (meta.get("namespace") or "", job) if job else None


def _child_key(kind: str, obj: Obj) -> tuple[str, str, str]:
    return (kind, *key_of(obj))


class WrittenGenerations:
    """The generation each child had in the answer to this process's last write of it, so a pass can tell an edit
    by someone else (a later generation) from its own. Unknown (not written since this process started) is not an
    edit: the spec digest alone decides then. Shared by the passes' worker threads."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    def wrote(self, obj: Obj) -> None:
        if "generation" in obj["metadata"]:
            with self._lock:
                self._seen[_child_key(obj.get("kind", ""), obj)] = obj["metadata"]["generation"]

    def edited(self, kind: str, obj: Obj) -> bool:
        with self._lock:
            written = self._seen.get(_child_key(kind, obj))
        return written is not None and obj["metadata"].get("generation") != written

    def forget(self, kind: str, obj: Obj) -> None:
        """The child was deleted: one made again under the name is a new one."""
        with self._lock:
            self._seen.pop(_child_key(kind, obj), None)


KINDS = {
    "RayCluster": (RAYCLUSTERS, slim_raycluster),
    "RayJob": (RAYJOBS, slim_rayjob),
    "Pod": (PODS, slim_pod),
    "Deployment": (DEPLOYMENTS, slim_deployment),
    "Service": (SERVICES, slim_service),
}


class Caches:
    """Informers for nodes and the jobs' children. `wake(job)` is called for every change that concerns a job:
    any change of one of its children, and a change of a node's health verdict (or its replacement) for jobs with
    pods on that node or avoiding it."""

    def __init__(self, kube: Kube, namespaces: list[str], wake: Callable[[JobKey], None]) -> None:
        self.kube, self.wake = kube, wake
        self.children = {
            kind: Informer(
                kube.api_client,
                k,
                namespaces,
                label_selector=c.LABEL_JOB,
                keep=keep,
                index=job_of,
                on_change=partial(self._child_changed, kind),
            )
            for kind, (k, keep) in KINDS.items()
        }
        self.nodes = Informer(kube.api_client, NODES, keep=slim_node, on_change=self._node_changed)
        self.server_source: Callable[[str, str], dict[str, Any] | None] | None = None
        # The generation each child had in the answer to this process's last write of it (see `edited`).
        self._written = WrittenGenerations()

    def start(self, also: list[Informer] | None = None) -> None:
        """List everything (blocking: the first passes after a start see every node and child), then watch. The
        LISTs run at once, with those of `also` (the ModelServer controller's): a restart's first pass waits for the
        slowest, not for their sum (issue #32). Called again after a failure, it lists only the kinds not yet
        watched."""
        every = (self.nodes, *self.children.values(), *(also or []))
        informers = [i for i in every if not i.started]  # again: what failed
        if not informers:
            return
        with ThreadPoolExecutor(len(informers), thread_name_prefix="mmrl-list") as pool:
            list(pool.map(Informer.run, informers))  # re-raises the first LIST that failed

    def stop(self) -> None:
        for informer in (self.nodes, *self.children.values()):
            informer.stop()

    # --- reads ---------------------------------------------------------------------------------------------------
    def owned(self, api_version: str, kind: str, namespace: str, job: str) -> list[dict[str, Any]]:
        """The job's children of `kind`, as `Kube.list_owned` returns them; kinds not cached are listed."""
        if kind not in self.children:
            return self.kube.list_owned(api_version, kind, namespace, job)
        return self.children[kind].indexed((namespace, job))

    def server(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ModelServer from `server_source` (the server controller's informer, set by dispatch.Runtime), else read."""
        if self.server_source is not None:
            return self.server_source(namespace, name)
        return self.kube.get_server(namespace, name)

    def node(self, name: str) -> dict[str, Any] | None:
        """The node from the cache; a miss is not a deletion: the watch may not have delivered it yet (a node that
        joined a moment ago). Only the apiserver's 404 means the node is gone."""
        cached = self.nodes.get("", name)
        if cached is not None:
            return cached
        found = self.kube.get_node(name)
        return None if found is None else self.nodes.wrote(found)

    def jobs_on_node(self, name: str) -> set[JobKey]:
        """Jobs with pods on the node, and jobs whose RayCluster avoids it (faulty-node memory: they forget it when
        it is replaced)."""
        pods = self.children["Pod"].items(lambda p: p["spec"].get("nodeName") == name)
        clusters = self.children["RayCluster"].items(lambda r: name in avoided_by(r))
        return {job for o in [*pods, *clusters] if (job := job_of(o)) is not None}

    def edited(self, kind: str, obj: dict[str, Any]) -> bool:
        """Whether someone else changed the child's spec since this process last wrote it: its generation is not the
        one our write got back. Unknown (not written since this process started) is not an edit: the spec digest
        alone decides then."""
        return self._written.edited(kind, obj)

    # --- our own writes --------------------------------------------------------------------------------------------
    def wrote(self, obj: dict[str, Any]) -> None:
        self._written.wrote(obj)
        if (informer := self.children.get(obj.get("kind", ""))) is not None:
            informer.wrote(obj)

    def deleting(self, kind: str, namespace: str, name: str) -> None:
        if (informer := self.children.get(kind)) is not None:
            informer.deleting(namespace, name)

    # --- watch callbacks --------------------------------------------------------------------------------------------
    def _child_changed(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if new is None and old is not None:
            self._written.forget(kind, old)
        job = job_of(new or old or {"metadata": {}})
        if job is not None:
            self.wake(job)

    def _node_changed(self, old: Obj | None, new: Obj | None) -> None:
        if health_signature(old) == health_signature(new):
            return  # heartbeats and unrelated edits change no verdict: wake no job
        name = (new or old or {}).get("metadata", {}).get("name")
        if name:
            for job in self.jobs_on_node(name):
                self.wake(job)
