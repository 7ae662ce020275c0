"""Status and conditions: the last step of every pass turns the decision into the status write and the requeue."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api.footprint import footprint_status
from mmrl_api.memory_plan import spec_plan
from mmrl_api.status import MAX_ATTEMPT_HISTORY, CheckpointFootprint, MemoryPlanStatus
from mmrl_operator.core.conditions import Facts, compute_conditions
from mmrl_operator.core.decision import Decision, Plan, ts
from mmrl_operator.core.observed import queued_by_kueue, rayjob_outcome
from mmrl_operator.core.shared_serving import server_refusal

APPLY_RETRY_SECONDS = 30  # a refused apply (webhook, quota, policy) is retried on this period and on every change


MAX_FOREIGN_OBJECTS = 16
# Above this fraction of rollouts cut off at maxResponseLength, many rewards are zero for length alone.
TRUNCATION_WARNING_FRACTION = 0.25


def blocked_write(d: Decision) -> tuple[str, str] | None:
    """(reason, message) when this pass could not write a child: its name is taken by an object the job does not
    control (NameConflict: the user must rename or remove it), or the apiserver refused it (ApplyFailed)."""
    if d.obs.name_conflict:
        return "NameConflict", f"{d.obs.name_conflict}; rename or delete it, or rename this job"
    if d.obs.apply_error:
        return "ApplyFailed", d.obs.apply_error
    return None


def warn_foreign(d: Decision) -> None:
    """One Warning per object that looks like a child (label and name) but is not the job's; status keeps the list."""
    seen = set(d.status.foreign_objects)
    for name in d.foreign:
        if name not in seen:
            d.event("Warning", "NotAdopted", f"{name} is not controlled by this job: it is ignored and never adopted")
    d.status.foreign_objects = list(d.foreign[:MAX_FOREIGN_OBJECTS])


def warn_truncation(d: Decision) -> None:
    """One Warning per attempt whose trainer reports more than TRUNCATION_WARNING_FRACTION of a step's rollouts
    stopped for length (status.progress.truncatedFraction); status.truncationWarnedAttempt remembers it."""
    progress = d.status.progress
    fraction, attempt = progress.truncated_fraction, progress.attempt
    if fraction is None or attempt is None or fraction <= TRUNCATION_WARNING_FRACTION:
        return
    if d.status.truncation_warned_attempt == attempt:
        return
    d.status.truncation_warned_attempt = attempt
    d.event(
        "Warning",
        "RolloutsTruncated",
        f"{fraction:.0%} of the rollouts of step {progress.step} (attempt {attempt}) stopped at "
        f"spec.algorithm.maxResponseLength ({d.spec.algorithm.max_response_length} tokens) and mostly earn no reward: "
        "raise it, or lower image resolution so prompt and response fit",
    )


def malformed_status(d: Decision) -> str | None:
    """The status fields this pass left out because they did not validate, once as a Warning per distinct set."""
    if not d.obs.status_problems:
        return None
    message = "status fields left out as malformed: " + "; ".join(d.obs.status_problems)
    before = next((x for x in d.status.conditions if x.type == "StatusValid"), None)
    if not (before and before.status == "False" and before.message == message[:2048]):
        d.event("Warning", "MalformedStatus", message)
    return message


def preflight_condition(d: Decision) -> tuple[bool | None, str, str] | None:
    """PreflightPassed: True once the self-test passed, False when it failed, Unknown while it is due or runs."""
    pf = d.status.preflight
    if pf is None:
        return None
    return {"Succeeded": True, "Failed": False}.get(pf.phase), f"Preflight{pf.phase}", pf.message or pf.phase


def finish(d: Decision) -> Plan:
    stalled = blocked_write(d)
    if stalled is None:
        # A ModelServer that refuses the job's adapter: it cannot serve until someone changes the job or the server.
        stalled = server_refusal(d.spec.inference.server, d.inference_ready)
    else:
        reason, message = stalled
        d.message = message if reason == "NameConflict" else f"the apiserver refused a child object: {message}"
        before = next((x for x in d.status.conditions if x.type == "Stalled"), None)
        if not (before and before.status == "True" and before.reason == reason and before.message == message):
            d.event("Warning", reason, message)  # once per distinct refusal or conflict
        d.due.append(d.now + timedelta(seconds=APPLY_RETRY_SECONDS))
    warn_foreign(d)
    warn_truncation(d)
    malformed = malformed_status(d)
    d.status.attempts = d.status.attempts[-MAX_ATTEMPT_HISTORY:]
    d.status.observed_generation = d.gen
    footprint = footprint_status(d.spec)
    d.status.checkpoint_footprint = CheckpointFootprint.model_validate(footprint) if footprint else None
    memory = spec_plan(d.spec)
    d.status.memory_plan = MemoryPlanStatus.model_validate(memory.status()) if memory else None
    if d.status.phase not in ("Failed",):
        d.status.message = d.message or None
    cur = d.current()
    rayjob = d.obs.rayjobs.get(cur.index) if cur else None
    training = bool(cur and cur.result == "Running" and rayjob is not None and rayjob_outcome(rayjob)[0] == "Running")
    verdicts = d.obs.nodes
    degraded = ", ".join(
        f"{n} ({verdicts[n].reason if n in verdicts else 'not observed'})" for n in d.status.degraded_nodes
    )
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
        stalled=stalled,
        status_problems=malformed,
        spec_change_pending=d.spec_change_pending,
        inference=d.inference_ready,
        promoted=d.promoted,
        preflight=preflight_condition(d),
    )
    d.status.conditions = compute_conditions(d.status.conditions, facts, ts(d.now))
    d.plan.status = d.status.wire()
    if d.due:
        d.plan.requeue_after = max(0.0, (min(d.due) - d.now).total_seconds())
    return d.plan
