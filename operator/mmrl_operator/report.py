"""Status and conditions: the last step of every pass turns the decision into the status write and the requeue."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api.status import MAX_ATTEMPT_HISTORY
from mmrl_operator.conditions import Facts, compute_conditions
from mmrl_operator.decision import Decision, Plan, ts
from mmrl_operator.observed import queued_by_kueue, rayjob_outcome

APPLY_RETRY_SECONDS = 30  # a refused apply (webhook, quota, policy) is retried on this period and on every change


def finish(d: Decision) -> Plan:
    if d.obs.apply_error:
        d.message = f"the apiserver refused a child object: {d.obs.apply_error}"
        before = next((x for x in d.status.conditions if x.type == "Stalled"), None)
        if not (before and before.reason == "ApplyFailed" and before.message == d.obs.apply_error):
            d.event("Warning", "ApplyFailed", d.obs.apply_error)  # once per distinct refusal
        d.due.append(d.now + timedelta(seconds=APPLY_RETRY_SECONDS))
    d.status.attempts = d.status.attempts[-MAX_ATTEMPT_HISTORY:]
    d.status.observed_generation = d.gen
    if d.status.phase not in ("Failed",):
        d.status.message = d.message or None
    cur = d.current()
    rayjob = d.obs.rayjobs.get(cur.index) if cur else None
    training = bool(cur and cur.result == "Running" and rayjob is not None and rayjob_outcome(rayjob)[0] == "Running")
    degraded = ", ".join(f"{n} ({d.obs.nodes[n].reason})" for n in d.status.degraded_nodes)
    facts = Facts(
        phase=d.status.phase,
        generation=d.gen,
        message=d.message or d.status.phase,
        reason=d.reason or d.status.phase,
        cluster_ready=d.cluster_readiness() if d.status.phase != "Suspended" else None,
        training=training,
        node_faults_message=f"node faults: {degraded}" if degraded else None,
        pod_problem=(
            ("QueuedByKueue", "Kueue holds the RayCluster (spec.suspend) until it admits it")
            if queued_by_kueue(d.obs.raycluster)
            else d.pod_problem
        ),
        stalled=("ApplyFailed", d.obs.apply_error) if d.obs.apply_error else None,
        spec_change_pending=d.spec_change_pending,
        inference=d.inference_ready,
    )
    d.status.conditions = compute_conditions(d.status.conditions, facts, ts(d.now))
    d.plan.status = d.status.wire()
    if d.due:
        d.plan.requeue_after = max(0.0, (min(d.due) - d.now).total_seconds())
    return d.plan
