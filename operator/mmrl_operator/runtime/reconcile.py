"""One reconcile of one job: read the job and its children, decide, act, write status.

This is the only place that connects the pure decision (`core.decide.decide`) to the API (`kube.Kube`). The job
comes from the operator's job store (`jobstore.JobStore`: watch events and our own writes, never older than the
previous pass's write), or from the apiserver when the store has none. Its children come from the watch caches
when the operator has them (`caches.Caches`). A store or cache may be a moment behind, which only delays a
decision, except for the ones that start or stop an attempt: those are decided once more on a fresh GET of the job
and fresh LISTs of its children before they are carried out. `progress` is owned by the trainer and never written
here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mmrl_api import constants as c
from mmrl_api import parse_job
from mmrl_api.job import MultimodalRLJob
from mmrl_operator.core.builders import inference
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings
from mmrl_operator.core.builders.raycluster import SPEC_HASH_LABEL, avoided_nodes
from mmrl_operator.core.decide import Plan, decide, parse_ts, ts
from mmrl_operator.core.health import node_verdict
from mmrl_operator.core.names import attempt_of, inference_name, job_uid, raycluster_name
from mmrl_operator.core.observed import (
    Observed,
    PodInfo,
    ServingObserved,
    adapter_check_failure,
    avoided_by,
    pod_problem,
    ray_container_started,
)
from mmrl_operator.core.ownership import controlled_by, describe, ray_pod_of
from mmrl_operator.core.serving import deployment_state
from mmrl_operator.core.shape import dig
from mmrl_operator.core.status_input import split_status
from mmrl_operator.runtime import metrics
from mmrl_operator.runtime.caches import Caches
from mmrl_operator.runtime.identity import TrainerIdentities
from mmrl_operator.runtime.jobstore import JobStore
from mmrl_operator.runtime.kube import ApplyRejected, JobGone, Kube
from mmrl_operator.runtime.prober import Probe, Target
from mmrl_operator.runtime.service_proxy import describe_error

log = logging.getLogger("mmrl.controller")
TRAINER_OWNED = "progress"  # status.progress is written by the trainer only

NodeLookup = Callable[[str], "dict[str, Any] | None"]
Edited = Callable[[str, "dict[str, Any]"], bool]  # (kind, child): changed by someone else since we wrote it
ListOwned = Callable[[str, str, str, str], "list[dict[str, Any]]"]  # (apiVersion, kind, namespace, job)
ServerLookup = Callable[[str, str], "dict[str, Any] | None"]  # (namespace, name) -> the ModelServer


def observe(
    kube: Kube,
    job: MultimodalRLJob,
    node_lookup: NodeLookup | None = None,
    list_owned: ListOwned | None = None,
    serving: ServingObserved | None = None,
    status_problems: list[str] | None = None,
    edited: Edited | None = None,
    server_lookup: ServerLookup | None = None,
) -> Observed:
    """The job's children and their nodes, from `list_owned` (a watch cache) or, by default, fresh LISTs; the
    serving side is observed too unless `serving` is given."""
    ns, name, uid = job.namespace, job.name, job_uid(job)
    owned = list_owned or kube.list_owned
    foreign: list[str] = []
    clusters: list[dict[str, Any]] = []
    for obj in owned(c.RAY_API_VERSION, "RayCluster", ns, name):
        if obj["metadata"]["name"] != raycluster_name(name):
            continue
        if controlled_by(obj, uid):
            clusters.append(obj)
        else:
            foreign.append(f"RayCluster {obj['metadata']['name']}")
    rayjobs: dict[int, dict[str, Any]] = {}
    for obj in owned(c.RAY_API_VERSION, "RayJob", ns, name):
        attempt = attempt_of(obj["metadata"]["name"], name)
        if attempt is None:
            continue
        if controlled_by(obj, uid):
            rayjobs[attempt] = obj
        else:
            foreign.append(f"RayJob {obj['metadata']['name']}")
    cluster_uid = clusters[0]["metadata"].get("uid") if clusters else None
    pods, inference_pods = [], []
    for p in owned("v1", "Pod", ns, name):
        meta, spec, st = p["metadata"], p.get("spec") or {}, p.get("status") or {}
        if (meta.get("labels") or {}).get(c.LABEL_COMPONENT) == inference.COMPONENT:
            inference_pods.append(p)
            continue
        if not ray_pod_of(p, name, cluster_uid):
            continue
        pods.append(
            PodInfo(
                name=meta["name"],
                component=(meta.get("labels") or {}).get(c.LABEL_COMPONENT, ""),
                node=spec.get("nodeName"),
                created=parse_ts(meta.get("creationTimestamp")),
                phase=st.get("phase", ""),
                reason=st.get("reason"),
                terminating=bool(meta.get("deletionTimestamp")),
                problem=pod_problem(p),
                spec_hash=(meta.get("labels") or {}).get(SPEC_HASH_LABEL),
                avoids=avoided_by(p),
                started=parse_ts(ray_container_started(p)),
            )
        )
    lookup = node_lookup or kube.get_node
    nodes = {}
    # The running attempt's earlier nodes too: one deleted with its pods is still this job's fault to see.
    attempt_nodes = set(job.status.attempt_nodes) if job.status else set()
    for node_name in sorted({p.node for p in pods if p.node} | attempt_nodes):
        nodes[node_name] = node_verdict(node_name, lookup(node_name), hyperpod=job.spec.cluster.hyperpod)
    avoided_now = {
        name: nodes[name].uid if name in nodes else dig(lookup(name), "metadata", "uid") for name in avoided_nodes(job)
    }
    if serving is None:
        serving = (
            observe_serving(kube, job, inference_pods, owned, edited, server_lookup)
            if trained(job)
            else ServingObserved()
        )
    leftover = kueue_leftover(kube, job) if not clusters and may_create_cluster_under_kueue(job) else None
    return Observed(
        raycluster=clusters[0] if clusters else None,
        rayjobs=rayjobs,
        pods=pods,
        nodes=nodes,
        avoided_now=avoided_now,
        serving=serving,
        foreign=tuple(sorted(foreign)),
        status_problems=tuple(status_problems or ()),
        kueue_leftover=leftover,
    )


def may_create_cluster_under_kueue(job: MultimodalRLJob) -> bool:
    """Whether a pass may create the job's RayCluster through Kueue: not while suspended or finished, so those jobs'
    passes (every resync) make no Workload LIST."""
    finished = job.status is not None and job.status.phase in ("Succeeded", "Serving", "Failed")
    return job.spec.cluster.kueue is not None and not job.spec.suspend and not finished


def kueue_leftover(kube: Kube, job: MultimodalRLJob) -> str | None:
    """A Workload whose controller is a RayCluster of the job's cluster name (none exists now: a predecessor's)."""
    cluster = raycluster_name(job.name)
    for workload in kube.kueue_workloads(job.namespace):
        for ref in workload["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "RayCluster" and ref.get("name") == cluster:
                return str(workload["metadata"]["name"])
    return None


def trained(job: MultimodalRLJob) -> bool:
    return job.status is not None and job.status.phase in ("Succeeded", "Serving")


def observe_serving(
    kube: Kube,
    job: MultimodalRLJob,
    pods: list[dict[str, Any]],
    list_owned: ListOwned | None = None,
    edited: Edited | None = None,
    server_lookup: ServerLookup | None = None,
) -> ServingObserved:
    """The inference Deployment and Service, their pods' problems, and — only when the Deployment is Available —
    the adapter listing from /v1/models through the Service (the apiserver's service proxy). With the operator's
    prober (`kube.prober`) the listing is its latest answer and the pass never waits for the server; without one
    (a CLI, a test) it is asked now, under the same deadline and size cap."""
    ns, name = job.namespace, inference_name(job.name)
    owned = list_owned or kube.list_owned
    server = None
    if job.spec.inference.server:  # served from a ModelServer: its status says how far the loading got
        server = (server_lookup or kube.get_server)(ns, job.spec.inference.server)
    uid = job_uid(job)  # an object under the name that this job does not control is a NameConflict when written
    deps = [o for o in owned("apps/v1", "Deployment", ns, job.name) if _ours(o, name, uid)]
    svcs = [o for o in owned("v1", "Service", ns, job.name) if _ours(o, name, uid)]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    check_failure = next((f for p in live if (f := adapter_check_failure(p))), None)
    problem = next((pr for p in live if (pr := pod_problem(p))), None)
    models, error = None, None
    dep = deps[0] if deps else None
    key = (ns, job.name)
    if dep is not None and svcs and deployment_state(dep, job.spec.inference.replicas)[0]:
        target = Target(ns, name, inference.PORT, dep["metadata"].get("uid", ""))
        probe = kube.prober.seen(key, target) if kube.prober else ask_models(kube, target)
        models, error = (probe.models, probe.error) if probe else (None, "no answer yet")
    elif kube.prober:
        kube.prober.forget(key)
    return ServingObserved(
        deployment=dep,
        service=svcs[0] if svcs else None,
        models=models,
        probe_error=error,
        pod_problem=problem,
        check_failure=check_failure,
        deployment_edited=bool(dep is not None and edited is not None and edited("Deployment", dep)),
        server=server,
    )


def controlled_children(job: MultimodalRLJob, observed: Observed) -> set[tuple[str, str]]:
    """(kind, name) of the children this pass observed under the job's control: written without a read first."""
    known = {("RayJob", o["metadata"]["name"]) for o in observed.rayjobs.values()}
    for kind, obj in (
        ("RayCluster", observed.raycluster),
        ("Deployment", observed.serving.deployment),
        ("Service", observed.serving.service),
    ):
        if obj is not None:
            known.add((kind, obj["metadata"]["name"]))
    return known


def name_conflicts(kube: Kube, job: MultimodalRLJob, observed: Observed, objects: list[dict[str, Any]]) -> list[str]:
    """The objects of `objects` whose name is taken by one this job does not control. A child this pass observed
    under the job's control needs no read; any other is read by name (first writes, static children)."""
    known, uid, found = controlled_children(job, observed), job_uid(job), []
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if (kind, name) in known:
            continue
        existing = kube.get(obj["apiVersion"], kind, job.namespace, name)
        if existing is not None and not controlled_by(existing, uid):
            found.append(describe(kind, name, existing))
    return found


def _ours(obj: dict[str, Any], name: str, uid: str) -> bool:
    return bool(obj["metadata"]["name"] == name and controlled_by(obj, uid))


def ask_models(kube: Kube, target: Target) -> Probe:
    """GET /v1/models through the Service, now: the listing, or why there is none."""
    try:
        answer = kube.service_get_json(target.namespace, target.service, target.port, "/v1/models")
        if not isinstance(answer, dict):
            return Probe(target, None, "the answer is not a JSON object")
        return Probe(target, answer.get("data") or [])
    except Exception as exc:  # an unreachable, slow or not yet listening server is a fact, not an error
        return Probe(target, None, describe_error(exc))


def parse_read_back(raw: dict[str, Any]) -> tuple[MultimodalRLJob, list[str]]:
    """The job as stored, with the status fields that do not validate left out (see `status_input`): a bad spec
    raises ValueError; a bad status is one of the problems returned, reported on the job by the decision."""
    clean, problems = split_status(raw.get("status"))
    return parse_job({**raw, "status": clean} if problems else raw), problems


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Merge patch from old to new status, leaving the trainer's `progress` alone; keys that vanished → null."""
    patch: dict[str, Any] = {k: v for k, v in new.items() if k != TRAINER_OWNED and old.get(k) != v}
    for key in old:
        if key not in new and key != TRAINER_OWNED:
            patch[key] = None
    return patch


def _invalid(kube: Kube, raw: dict[str, Any], error: str, now: datetime) -> None:
    status = raw.get("status") or {}
    if status.get("phase") == "Failed" and status.get("message") == error:
        return
    gen = raw["metadata"].get("generation", 0)
    cond = [
        {
            "type": t,
            "status": s,
            "reason": "InvalidSpec",
            "message": error,
            "lastTransitionTime": ts(now),
            "observedGeneration": gen,
        }
        for t, s in (("Ready", "False"), ("Reconciling", "False"), ("Stalled", "True"), ("Failed", "True"))
    ]
    patch = {"phase": "Failed", "message": error, "observedGeneration": gen, "conditions": cond}
    kube.patch_status(raw["metadata"]["namespace"], raw["metadata"]["name"], patch)
    kube.event(raw, "Warning", "InvalidSpec", error)


def starts_or_stops(plan: Plan, status: dict[str, Any]) -> bool:
    """Whether carrying out `plan` starts or stops an attempt: it creates a RayJob, deletes anything, or changes the
    attempt history or restart budget. Only these are worth a fresh read when the plan came from a cache."""
    return (
        bool(plan.delete)
        or any(o.get("kind") == "RayJob" for o in plan.apply)
        or (plan.status.get("attempts") or []) != (status.get("attempts") or [])
        or (plan.status.get("restarts") or {}) != (status.get("restarts") or {})
    )


def settled(
    stored: dict[str, Any],
    generation: int,
    observed: Observed,
    now: datetime,
    network: NetworkPolicySettings | None = None,
) -> bool:
    """Whether a pass on the job as just stored, seeing the same children, would do nothing: then the watch event
    of our own write needs no pass. When the write is one step of several (the next one decided from the status
    just written), it does."""
    try:
        again = decide(parse_read_back(stored)[0], generation, observed, now, network)
    except ValueError:
        return False
    return not (again.apply or again.delete or again.events or _status_patch(stored.get("status") or {}, again.status))


def _read_job(
    kube: Kube, namespace: str, name: str, now: datetime, raw: dict[str, Any] | None = None
) -> tuple[dict[str, Any], MultimodalRLJob, list[str]] | None:
    """The job (`raw`, else read from the apiserver) parsed, or None when it is gone, being deleted, or has a spec
    that does not validate (which is reported on it, from a fresh read: a stored copy may predate the fix)."""
    fresh = raw is None
    raw = raw if raw is not None else kube.get_job(namespace, name)
    if raw is None or raw["metadata"].get("deletionTimestamp"):
        return None  # garbage collection removes the children through their ownerReferences
    try:
        job, problems = parse_read_back(raw)
    except ValueError as exc:
        if not fresh:
            return _read_job(kube, namespace, name, now)
        _invalid(kube, raw, f"invalid spec: {exc}", now)
        return None
    return raw, job, problems


def reconcile(
    kube: Kube,
    namespace: str,
    name: str,
    node_lookup: NodeLookup | None = None,
    now: datetime | None = None,
    caches: Caches | None = None,
    written: Callable[[dict[str, Any]], None] | None = None,
    jobs: JobStore | None = None,
    network: NetworkPolicySettings | None = None,
    identities: TrainerIdentities | None = None,
) -> Plan | None:
    """Bring one job one step closer to its desired state. Returns the plan it carried out (None if gone).
    `written` receives the job as the apiserver stored it after this pass's status write. With `jobs` the job is
    read from that store (no request) unless the pass starts or stops an attempt; our write goes into it.
    `network`: the platform's NetworkPolicy settings (the operator's MMRL_NETWORK_POLICY). With `identities` the
    namespace's trainer identity is applied too, where it is missing or not as built."""
    started = time.perf_counter()
    calls_before = kube.thread_calls()
    now = now or datetime.now(UTC).replace(microsecond=0)
    cached = jobs.get(namespace, name) if jobs is not None else None
    read = _read_job(kube, namespace, name, now, cached)
    if read is None:
        return None
    raw, job, problems = read
    generation = raw["metadata"].get("generation", 0)
    lookup = node_lookup or (caches.node if caches else None)
    edited = caches.edited if caches else None
    servers = caches.server if caches else None
    observed = observe(
        kube,
        job,
        lookup,
        caches.owned if caches else None,
        status_problems=problems,
        edited=edited,
        server_lookup=servers,
    )
    plan = decide(job, generation, observed, now, network)
    if caches is not None and starts_or_stops(plan, raw.get("status") or {}):
        # One attempt at a time is decided on what the apiserver says now, not on what the watches said so far:
        # its pods and their nodes alike (a pod list fresher than the node cache could show a pod gone with its
        # node while the cache still calls that node healthy).
        metrics.FRESH_READS.inc()
        if cached is not None:  # the job too, not only its children
            if (read := _read_job(kube, namespace, name, now)) is None:
                return None
            raw, job, problems = read
            generation = raw["metadata"].get("generation", 0)
        observed = observe(kube, job, node_lookup, status_problems=problems, edited=edited, server_lookup=servers)
        plan = decide(job, generation, observed, now, network)
    # An object under a child's name that the job does not control is never written (apply with force would take
    # it over), and neither is anything else this pass: a RayCluster must not start on a stranger's ConfigMap.
    conflicts = name_conflicts(kube, job, observed, plan.apply)
    # The namespace's identity is no child of the job (no name conflict: it is the operator's by name), and the pods
    # need the ServiceAccount before KubeRay creates them; its Role and binding matter once a trainer runs.
    due = identities.due(namespace) if identities is not None else []
    first = [o for o in due if o["kind"] == "ServiceAccount"]
    late = [o for o in due if o["kind"] != "ServiceAccount"]
    refused = []
    for obj in [*first, *([] if conflicts else plan.apply), *late]:
        try:
            stored = kube.apply(obj)
        except ApplyRejected as exc:
            refused.append(str(exc))
            continue
        if identities is not None and any(obj is o for o in due):
            identities.wrote(stored)
        elif caches is not None:
            caches.wrote(stored)  # the next pass sees our write even before the watch delivers it
    if refused or conflicts:
        # Decide again knowing the applies failed: the status then says why (Stalled: NameConflict or ApplyFailed)
        # instead of recording an attempt that was never created, while deletes (fault handling) still go ahead.
        failed = dataclasses.replace(
            observed, apply_error="; ".join(refused) or None, name_conflict="; ".join(conflicts) or None
        )
        plan = decide(job, generation, failed, now, network)
        plan.apply = []
    # Events before the status: whoever sees a condition the pass set (kubectl describe, a test) finds its event.
    for e in plan.events:
        kube.event(raw, e.type, e.reason, e.message)
        metrics.record_event(e.reason)
    patch = _status_patch(raw.get("status") or {}, plan.status)
    stored = None
    if patch:
        # Only onto the object this pass decided from: a concurrent write (another replica, an old process)
        # raises StatusConflict and the queue runs the pass again at once from a fresh read. Written before the
        # deletes: a process killed in between leaves the stop on record (the next pass deletes what it stopped),
        # never a RayJob gone without the reason; and a pass that lost the race deletes nothing.
        try:
            stored = kube.patch_status(namespace, name, patch, raw["metadata"].get("resourceVersion"))
        except JobGone:
            log.info("job %s/%s was deleted during the pass; its children go with it", namespace, name)
            return None
    for d in plan.delete:
        kube.delete(d.api_version, d.kind, namespace, d.name, d.grace_seconds)
        if caches is not None:
            caches.deleting(d.kind, namespace, d.name)
    if stored is not None:
        if jobs is not None:
            jobs.seen(stored)
        if written is not None and caches is not None:
            # Would the pass that our own write's watch event asks for do anything? Decide it now on the caches,
            # which already hold this pass's applies; if not, that event needs no pass.
            after = observe(kube, job, lookup, caches.owned, serving=observed.serving, status_problems=problems)
            if settled(stored, generation, after, now, network):
                written(stored)
        metrics.record_restarts((raw.get("status") or {}).get("restarts") or {}, plan.status.get("restarts") or {})
    metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    log.info(
        "reconciled job=%s/%s phase=%s attempt=%s applied=%d deleted=%d calls=%d",
        namespace,
        name,
        plan.status.get("phase"),
        plan.status.get("attempt"),
        len(plan.apply),
        len(plan.delete),
        kube.thread_calls() - calls_before,
    )
    return plan
