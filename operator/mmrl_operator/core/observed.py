"""What the controller observed about one job's children and nodes, reduced to the facts decisions need.

Pure readers of KubeRay status (RayJob outcome, RayCluster readiness) live here so the decision function never
parses raw KubeRay objects itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from mmrl_operator.core.health import NodeVerdict
from mmrl_operator.core.shape import dig, integer, mapping, records, text

Outcome = Literal["Pending", "Running", "Succeeded", "Failed"]
AVOIDED_NODES_ANNOTATION = "mmrl.dev/avoided-nodes"


@dataclass(frozen=True)
class PodInfo:
    name: str
    component: str  # ray-head | ray-worker
    node: str | None
    created: datetime | None
    phase: str
    reason: str | None = None
    terminating: bool = False
    problem: tuple[str, str] | None = None
    """(reason, message) when the pod cannot start or keeps failing: see `pod_problem`."""
    spec_hash: str | None = None
    """Digest of the RayCluster spec the pod was built from (label mmrl.dev/spec-hash)."""
    avoids: tuple[str, ...] = ()
    """The nodes the pod's template told the scheduler to avoid (annotation mmrl.dev/avoided-nodes)."""
    started: datetime | None = None
    """When the pod's Ray container (KubeRay's container 0) last started running; None when it is not running."""

    @property
    def evicted_or_lost(self) -> bool:
        return self.reason in ("Evicted", "NodeLost", "Preempting", "Terminated", "NodeShutdown")


@dataclass(frozen=True)
class ServingObserved:
    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    models: list[dict[str, Any]] | None = None
    """`data` of GET /v1/models through the Service; None when it was not asked or did not answer."""
    probe_error: str | None = None
    pod_problem: tuple[str, str] | None = None
    """(reason, message) of an inference pod that cannot start (scheduling, image pull, crash loop)."""
    check_failure: str | None = None
    """The init container's error lines when it refused the adapter (exit 3)."""
    deployment_edited: bool = False
    """The Deployment's spec changed since this process last wrote it (its generation moved): written again."""
    server: dict[str, Any] | None = None
    """The ModelServer the job names (`spec.inference.server`), as the operator's cache holds it; None when there is
    none (or the job names none)."""


@dataclass(frozen=True)
class Observed:
    raycluster: dict[str, Any] | None = None
    rayjobs: dict[int, dict[str, Any]] = field(default_factory=dict)  # attempt -> RayJob
    pods: list[PodInfo] = field(default_factory=list)
    nodes: dict[str, NodeVerdict] = field(default_factory=dict)  # verdicts for nodes hosting our pods
    avoided_now: dict[str, str | None] = field(default_factory=dict)
    """The current uid of each node in status.avoidedNodes (None: the node is gone); a node not in it was not
    looked at this pass."""
    serving: ServingObserved = field(default_factory=ServingObserved)
    """The inference Deployment, Service and /v1/models answer (only read once training succeeded)."""
    foreign: tuple[str, ...] = ()
    """`Kind name` of objects that carry this job's label and a child's name (or name form) but are controlled by
    something else: never adopted, never written; the job warns about each once."""
    name_conflict: str | None = None
    """Set when this pass meant to write an object whose name is taken by one the job does not control (see
    runtime.reconcile.reconcile): decide again with it, so the job is Stalled with reason NameConflict."""
    status_problems: tuple[str, ...] = ()
    """Fields of the job's status (as read back) that did not validate and were left out of this pass: the trainer
    and anything else with write access to the status subresource may write them. Reported, never fatal."""
    apply_error: str | None = None
    """Set when this pass's applies were refused by the apiserver (see runtime.reconcile.reconcile): decide again with
    it, so the status says why and no attempt is recorded that was never created."""
    kueue_leftover: str | None = None
    """A Kueue Workload still owned by this job's RayCluster after that cluster is gone (looked for only while a
    job that goes through Kueue has none). Kueue (0.17) finds a job's Workloads by the owner's name, not its uid: a
    RayCluster recreated under the name before Kueue removed its predecessor's Workload is admitted with that
    Workload, then stopped when it goes, and can never start under its own. So it is recreated after."""


# Container waiting reasons that mean the pod will not become ready without someone changing something.
STUCK_CONTAINER_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)


def pod_problem(pod: dict[str, Any]) -> tuple[str, str] | None:
    """Why a pod is stuck, as (reason, message), from what the scheduler and kubelet wrote into its status."""
    name = text(dig(pod, "metadata", "name"))
    status = mapping(pod.get("status"))
    if dig(pod, "metadata", "deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    for cond in records(status.get("conditions")):
        reason = text(cond.get("reason"))
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and reason:
            detail = " ".join((text(cond.get("message")) or "no node fits").split())
            return reason, f"pod {name} cannot be scheduled: {detail}"
    for cs in records(status.get("initContainerStatuses")) + records(status.get("containerStatuses")):
        waiting = mapping(dig(cs, "state", "waiting"))
        reason = text(waiting.get("reason"))
        if reason in STUCK_CONTAINER_REASONS:
            detail = " ".join(text(waiting.get("message")).split())
            line = f"pod {name} container {text(cs.get('name'))}: {reason}"
            return reason, f"{line}: {detail}" if detail else line
    return None


def ray_container_started(pod: dict[str, Any]) -> str | None:
    """`startedAt` of the running Ray container: KubeRay puts Ray in the pod's first container."""
    containers = records(dig(pod, "spec", "containers"))
    name = text(containers[0].get("name")) if containers else ""
    for cs in records(dig(pod, "status", "containerStatuses")):
        if text(cs.get("name")) == name:
            return text(dig(cs, "state", "running", "startedAt")) or None
    return None


def avoided_by(obj: dict[str, Any]) -> tuple[str, ...]:
    """The nodes a RayCluster's pod templates, or a pod built from them, avoid (faulty-node memory)."""
    listed = text(dig(obj, "metadata", "annotations", AVOIDED_NODES_ANNOTATION))
    return tuple(n for n in listed.split(",") if n)


def pod_set_digest(pods: list[PodInfo]) -> str:
    """A short fingerprint of the live Ray pods: KubeRay gives a replacement pod a new name, so a change of
    this digest during an attempt means a pod was lost or recreated under it."""
    names = sorted(p.name for p in pods if not p.terminating and p.component in ("ray-head", "ray-worker"))
    return hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]


def rayjob_outcome(rayjob: dict[str, Any]) -> tuple[Outcome, str]:
    """Map KubeRay's (jobDeploymentStatus, jobStatus) to an outcome and a message."""
    st = mapping(rayjob.get("status"))
    deployment = text(st.get("jobDeploymentStatus"))
    job_status = text(st.get("jobStatus"))
    message = text(st.get("message")) or text(st.get("reason"))
    if job_status == "SUCCEEDED" and deployment in ("Complete", ""):
        return "Succeeded", message or "the Ray job succeeded"
    if job_status in ("FAILED", "STOPPED") or deployment in ("Failed", "ValidationFailed"):
        reason = text(st.get("reason")) or job_status or deployment
        return "Failed", f"{reason}: {message}" if message and message != reason else reason
    if job_status == "RUNNING" or deployment == "Running":
        return "Running", "the Ray job is running"
    return "Pending", "the Ray job is being submitted"


def desired_workers(raycluster: dict[str, Any]) -> int:
    groups = records(dig(raycluster, "spec", "workerGroupSpecs"))
    return sum(max(0, integer(g.get("replicas"))) * max(1, integer(g.get("numOfHosts"), 1)) for g in groups)


def queued_by_kueue(raycluster: dict[str, Any] | None) -> bool:
    """Kueue holds a RayCluster it has not admitted (or has preempted) with `spec.suspend: true`. mmrl never sets
    that field, so when it is true it is Kueue's (or another admission controller's) doing."""
    return dig(raycluster, "spec", "suspend") is True


def raycluster_ready(raycluster: dict[str, Any] | None) -> bool | None:
    """None when there is no cluster; True when the head is ready and every desired worker is ready."""
    if raycluster is None:
        return None
    st = mapping(raycluster.get("status"))
    conditions = {text(c.get("type")): c.get("status") for c in records(st.get("conditions"))}
    head_ok = conditions.get("HeadPodReady") == "True" or (
        st.get("state") == "ready" and "HeadPodReady" not in conditions
    )
    workers_ok = integer(st.get("readyWorkerReplicas")) >= desired_workers(raycluster)
    # KubeRay reports the generation it last acted on: until it has seen our latest apply, the pods it reports on
    # may have been built from the previous spec.
    generation = integer(dig(raycluster, "metadata", "generation"), -1)
    seen = integer(st.get("observedGeneration"), -1)
    current = generation < 0 or seen < 0 or seen >= generation
    return bool(head_ok and workers_ok and current and st.get("state") == "ready")


def adapter_check_failure(pod: dict[str, Any]) -> str | None:
    """The error lines of an adapter check (the inference pod's init container) when it refused the adapter (exit
    3)."""
    from mmrl_api.contract import ERROR_PREFIX, EXIT_BAD_INPUT

    statuses = records(dig(pod, "status", "initContainerStatuses")) + records(dig(pod, "status", "containerStatuses"))
    for cs in statuses:
        for state in (mapping(cs.get("state")), mapping(cs.get("lastState"))):
            term = mapping(state.get("terminated"))
            if integer(term.get("exitCode"), -1) == EXIT_BAD_INPUT:
                lines = [
                    ln.split(ERROR_PREFIX, 1)[1].strip()
                    for ln in text(term.get("message")).splitlines()
                    if ERROR_PREFIX in ln
                ]
                return "; ".join(lines) or f"the adapter check in pod {text(dig(pod, 'metadata', 'name'))} exited 3"
    return None
