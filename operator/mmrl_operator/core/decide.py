"""The decision: (job, observed children and nodes, now) → a Plan of API actions and the new status. Pure.

Level-triggered: the plan depends only on the job object (spec + status) and what exists now, never on which
event arrived. Every action is idempotent — objects are server-side applied under fixed names (attempt N is
always RayJob `<name>-a<N>`), deletions of missing objects are no-ops — so the controller may be killed between
any two actions and the next reconcile converges to the same state without duplicates. Budgets are charged in
the same status write that records an attempt's end, so a repeated reconcile cannot charge twice.

This module drives one pass; the decision is split by concern into `attempts`, `faults`, `report` and `serving`,
all working on one `decision.Decision`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api.status import InferenceStatus, JobStatus
from mmrl_operator.core.attempts import adopt_orphan_attempt, budget_of, budget_raised, step_attempts
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings, build_network_policy
from mmrl_operator.core.builders.raycluster import SPEC_HASH_ANNOTATION, build_raycluster
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.conditions import Facts, compute_conditions
from mmrl_operator.core.decision import Decision, Delete, Event, Plan, parse_ts, ts
from mmrl_operator.core.faults import record_attempt_nodes, watch_nodes
from mmrl_operator.core.names import job_dir
from mmrl_operator.core.observed import Observed, avoided_by
from mmrl_operator.core.serving import decide_serving
from mmrl_operator.core.shape import dig
from mmrl_operator.core.status import finish

__all__ = ["Delete", "Event", "Plan", "budget_of", "decide", "parse_ts", "ts"]


log = logging.getLogger("mmrl.reconcile")
UNDECIDED_RETRY_SECONDS = 60


def decide(
    job: MultimodalRLJob,
    generation: int,
    observed: Observed,
    now: datetime,
    network: NetworkPolicySettings | None = None,
) -> Plan:
    """Compute the actions and the new status for one job. See the module docstring for the guarantees. `network`
    is the platform's NetworkPolicy choice (default: on, KubeRay in `default`).

    Total: malformed input (status read back, children, vLLM's answers) is handled where it is read, which the
    property tests check on `run` itself. Should a case still escape, this job alone gets no actions, a Stalled
    condition and a Warning, and is tried again later; the operator and every other job go on."""
    try:
        return run(Decision(job, generation, observed, now, network))
    except Exception as exc:
        log.exception("no decision for job %s/%s", job.namespace, job.name)
        return undecided(job, generation, now, f"{type(exc).__name__}: {exc}")


def undecided(job: MultimodalRLJob, generation: int, now: datetime, error: str) -> Plan:
    status = (job.status or JobStatus()).model_copy(deep=True)
    message = f"the operator could not decide on this job ({error[:500]}); it retries every {UNDECIDED_RETRY_SECONDS}s"
    facts = Facts(
        phase=status.phase,
        generation=generation,
        message=message,
        reason="DecisionError",
        cluster_ready=None,
        training=False,
        node_faults_message=None,
        stalled=("DecisionError", message),
    )
    before = next((x for x in status.conditions if x.type == "Stalled"), None)
    events = [] if before and before.message == message else [Event("Warning", "DecisionError", message)]
    status.conditions = compute_conditions(status.conditions, facts, ts(now))
    return Plan(events=events, status=status.wire(), requeue_after=UNDECIDED_RETRY_SECONDS)


def run(d: Decision) -> Plan:
    d.status.job_dir = job_dir(d.job)
    adopt_orphan_attempt(d)
    if d.failed_reason() == "InvalidSpec" and d.status.observed_generation != d.gen:
        d.status.phase = "Pending"  # the spec was fixed: an invalid spec never started anything to keep
        d.status.finished_at = None
    elif d.failed_reason() == "RestartBudgetExhausted" and budget_raised(d):
        d.status.phase, d.status.finished_at = "Recovering", None
        d.event("Normal", "Resumed", "restart budget raised: resuming from the latest complete checkpoint")
    if d.status.phase in ("Succeeded", "Serving", "Failed"):
        finished(d)
    elif d.spec.suspend:
        suspend(d)
    else:
        ensure_children(d)
        watch_nodes(d)
        step_attempts(d)
    record_attempt_nodes(d)
    if d.status.phase in ("Succeeded", "Serving"):
        serve(d)
    return finish(d)


def serve(d: Decision) -> None:
    """Training is done: serve the adapter (see `serving`), or stay Succeeded when serving is off."""
    sd = decide_serving(d.job, d.status, d.obs.serving)
    d.plan.apply += sd.apply
    d.plan.delete += [Delete(api, kind, name) for api, kind, name in sd.delete]
    for type_, reason, message in sd.events:
        d.event(type_, reason, message)
    if sd.phase == "Failed":
        d.status.message = sd.message  # a Failed job's message is kept as written here
    d.set_phase(sd.phase, sd.message or d.status.message or sd.phase, sd.reason)
    d.status.inference = InferenceStatus.model_validate(sd.inference) if sd.inference else None
    d.inference_ready = sd.ready
    if sd.promoted is not None:
        passed, message = sd.promoted
        before = next((c for c in d.status.conditions if c.type == "Promoted"), None)
        if before is None or before.status != ("True" if passed else "False"):
            d.event("Normal" if passed else "Warning", "Promoted" if passed else "NotPromoted", message)
        d.promoted = (passed, "GatePassed" if passed else "GateMissed", message)
    if sd.requeue_after is not None:
        d.due.append(d.now + timedelta(seconds=sd.requeue_after))


def finished(d: Decision) -> None:
    ttl = d.spec.ttl_seconds_after_finished
    done = parse_ts(d.status.finished_at)
    # A cluster already terminating (our delete, before the watch reports it gone) is not deleted or announced again.
    live = d.obs.raycluster is not None and not dig(d.obs.raycluster, "metadata", "deletionTimestamp")
    if ttl is not None and done is not None and live:
        due = done + timedelta(seconds=ttl)
        if d.now >= due:
            d.delete_raycluster()
            d.event("Normal", "ClusterDeleted", f"RayCluster deleted {ttl}s after the job finished")
        else:
            d.due.append(due)
    for attempt in d.obs.rayjobs:
        d.stop_if_active(attempt)  # a finished job leaves nothing running
    d.message = d.status.message or d.status.phase
    d.reason = d.status.phase if d.status.phase != "Failed" else d.failed_reason()


def suspend(d: Decision) -> None:
    cur = d.current()
    if cur is not None and cur.result == "Running":
        cur.result, cur.end_time, cur.message = "Stopped", ts(d.now), "suspended"
    for attempt in list(d.obs.rayjobs):
        d.delete_rayjob(attempt)
    d.delete_raycluster()
    if d.status.phase != "Suspended":
        d.event("Normal", "Suspended", "job suspended: RayJob and RayCluster deleted, checkpoints kept")
    d.set_phase("Suspended", "suspended; set spec.suspend=false to resume from the latest checkpoint")


def refused_before(d: Decision) -> bool:
    """Whether the last pass could not write all it meant to (the apiserver refused an apply, or a name was taken):
    which children it wrote is not recorded, so this pass applies the static ones again."""
    return d.failed_reason() in ("ApplyFailed", "NameConflict")


def ensure_children(d: Decision) -> None:
    first_time = d.status.observed_generation != d.gen or d.obs.raycluster is None or refused_before(d)
    if first_time:
        # The pods need the ConfigMap before KubeRay can start the cluster. (Their ServiceAccount is the namespace's
        # trainer identity, which the runtime applies before this plan when it is missing: runtime/identity.py.)
        d.plan.apply.append(build_config_map(d.job))
    desired = build_raycluster(d.job)
    current_hash = dig(d.obs.raycluster, "metadata", "annotations", SPEC_HASH_ANNOTATION)
    d.desired_hash = desired["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    cur = d.current()
    if d.obs.raycluster is None and d.obs.kueue_leftover:
        d.cluster_wait = f"the RayCluster is recreated once Kueue has removed Workload {d.obs.kueue_leftover}"
        d.due.append(d.now + timedelta(seconds=1))
    elif d.obs.raycluster is None:
        d.plan.apply.append(desired)
        d.event("Normal", "RayClusterCreated", f"creating RayCluster {desired['metadata']['name']}")
    elif current_hash == d.desired_hash and avoided_changed(d.obs.raycluster, desired):
        if cur is None or cur.result != "Running":  # the running attempt's pods are placed already
            d.plan.apply.append(desired)
    elif current_hash != d.desired_hash:
        if cur is not None and cur.result == "Running":
            # A running attempt keeps the cluster it started on (its world size, its pods); the change is
            # applied once it ends, and the next attempt starts on pods built from the new spec.
            d.spec_change_pending = f"the Ray cluster spec changed; it is applied when attempt {cur.index} ends"
        else:
            d.plan.apply.append(desired)
            d.event("Normal", "RayClusterUpdated", "applied the changed Ray cluster spec")
    d.status.ray_cluster = desired["metadata"]["name"]
    guard_ray_pods(d, first_time)


def guard_ray_pods(d: Decision, first_time: bool) -> None:
    """The job's NetworkPolicy goes with the static children, and again with every write of the RayCluster (so a
    job older than the policy gets it once its cluster is next applied), ahead of the RayCluster: its pods are never
    reachable before the policy exists."""
    policy = build_network_policy(d.job, d.network)
    writes_cluster = [i for i, o in enumerate(d.plan.apply) if o["kind"] == "RayCluster"]
    if policy is None or not (first_time or writes_cluster):
        return
    d.plan.apply.insert(writes_cluster[0] if writes_cluster else len(d.plan.apply), policy)


def avoided_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Whether the RayCluster's pod templates avoid other nodes than the job's faulty-node memory says."""
    return current is not None and avoided_by(current) != avoided_by(desired)
