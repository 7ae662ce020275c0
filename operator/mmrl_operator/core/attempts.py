"""Attempts and restart budgets: start the next attempt when the cluster is ready, follow the running one, and
classify its end (application, infra, hang, preemption), charging the budget in the same status write."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api.contract import fatal_reason, last_error_line
from mmrl_api.status import Attempt
from mmrl_operator.core import avoidance
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.decision import Decision, Delete, parse_ts, ts
from mmrl_operator.core.faults import (
    infra_signal,
    previous_attempt_lingers,
    ray_pods_not_in_place,
    workers_of_a_previous_head,
)
from mmrl_operator.core.names import rayjob_name
from mmrl_operator.core.observed import pod_set_digest, queued_by_kueue, rayjob_outcome
from mmrl_operator.core.preflight import passed_before_attempt_one, preflight_due, step_preflight
from mmrl_operator.core.shape import dig


def budget_of(failure: str) -> str | None:
    """The restart budget a failure class spends: infra, application (application and hang), or none (preemption)."""
    if failure == "preemption":
        return None
    return "infra" if failure == "infra" else "application"


def adopt_orphan_attempt(d: Decision) -> None:
    """The job's RayJob for attempt `status.attempt + 1` means we crashed after creating it and before recording
    it: record it, don't recreate. Only that one number can be adopted (see `Decision`)."""
    n = d.status.attempt + 1
    if n not in d.obs.rayjobs:
        return
    prev = d.current()
    cause = "initial" if n == 1 else ((prev.failure if prev else None) or "resume")
    if n == 1:
        passed_before_attempt_one(d)
    d.status.attempt = n
    d.status.attempts.append(
        Attempt(index=n, ray_job=rayjob_name(d.job.name, n), cause=cause, start_time=ts(d.now))  # type: ignore[arg-type]
    )


def budget_raised(d: Decision) -> bool:
    """A job that ran out of restarts may go on once the user raised the budget it exhausted."""
    last = d.current()
    if last is None or last.failure is None:
        return False
    budget = budget_of(last.failure)
    if budget is None:
        return False
    res = d.spec.resilience
    limit = res.max_infra_restarts if budget == "infra" else res.max_restarts
    return d.status.restarts.get(budget, 0) <= limit


def step_attempts(d: Decision) -> None:
    cur = d.current()
    if cur is None and preflight_due(d) and not step_preflight(d, ready_to_start):
        return  # attempt 1 waits for the preflight; it starts in the pass that sees the preflight pass
    if cur is None:
        start_when_ready(d, "initial")
        return
    if cur.result == "Running":
        track_running(d, cur)
    elif cur.result == "Succeeded":
        succeed(d, cur)
    else:  # Failed or Stopped: wait for backoff and a ready cluster, then the next attempt
        d.stop_if_active(cur.index)
        if d.status.phase != "Failed":
            start_when_ready(d, cur.failure or "resume")


def record_trainer_report(d: Decision, cur: Attempt) -> None:
    """The step this attempt's trainer says it resumed from: read by the trainer from the checkpoint directory
    when it started, so it is what really happened, not what the operator expected."""
    prog = d.status.progress
    if prog.attempt != cur.index:
        return
    if prog.resumed_from_step is not None:
        cur.resumed_from_step = prog.resumed_from_step
    if prog.passed_over and not cur.passed_over:
        cur.passed_over = list(prog.passed_over)
        start = f"step {prog.resumed_from_step}" if prog.resumed_from_step is not None else "the base model"
        damaged = "; ".join(prog.passed_over)
        d.event("Warning", "CheckpointPassedOver", f"attempt {cur.index} resumed from {start}, not newer: {damaged}")


def track_running(d: Decision, cur: Attempt) -> None:
    # A node going away while the attempt runs makes its end an infrastructure failure. A degraded-only verdict
    # (a cordon, a deep health check in progress, a fault label) does not: the attempt keeps training, and if
    # the trainer later fails on its own that is still the application's failure.
    for v in d.stopping:
        if cur.node is None:
            cur.node = v.node
    record_trainer_report(d, cur)
    if (lost := cluster_lost(d)) is not None:
        stop_for_lost_cluster(d, cur, lost)
        return
    rayjob = d.obs.rayjobs.get(cur.index)
    if rayjob is None:
        end_attempt(d, cur, "infra", None, f"RayJob {cur.ray_job} disappeared")
        return
    outcome, message = rayjob_outcome(rayjob)
    node, why = infra_signal(d, cur)
    fatal = fatal_reason(message) if outcome == "Failed" and not (node or why) else None
    if queued_by_kueue(d.obs.raycluster) and outcome != "Succeeded":
        # Kueue took the cluster back (preemption): the pods are going, so is the attempt. Not a failure.
        d.delete_rayjob(cur.index)
        end_attempt(d, cur, "preemption", None, "the RayCluster was preempted by Kueue", result="Stopped")
    elif why and outcome in ("Pending", "Running") and (d.stopping or cur.pod_set):
        # An attempt runs on the Ray pods it started with. A node going away, or a Ray pod lost or recreated under
        # it, ends it here: KubeRay does not fail a RayJob whose head was replaced (its submitter resubmits the
        # job to the new head, which reruns the trainer inside the same attempt), and Ray retries a task whose
        # node died. The next attempt resumes from the latest complete checkpoint, with the fault on record. (An
        # attempt started before any Ray pod was observed has no pod set to compare with.)
        d.delete_rayjob(cur.index)
        end_attempt(d, cur, "infra", node, f"stopped: {why}", result="Stopped")
    elif fatal is not None:
        fail_without_retry(d, cur, fatal, message)
    elif outcome == "Succeeded":
        cur.result, cur.end_time = "Succeeded", ts(d.now)
        d.event("Normal", "AttemptSucceeded", f"attempt {cur.index} succeeded")
        succeed(d, cur)
    elif outcome == "Failed":
        kind = "infra" if (node or why) else "application"
        end_attempt(d, cur, kind, node, f"{message}; {why}" if why else message)
    elif (silence := silent_too_long(d, cur)) is not None:
        d.delete_rayjob(cur.index)
        end_attempt(d, cur, "hang", None, silence)
    elif outcome == "Running":
        d.set_phase("Running", f"attempt {cur.index} is training")
    elif d.pod_problem is not None:
        d.set_phase("Running", f"attempt {cur.index} is waiting: {d.pod_problem[1]}", d.pod_problem[0])
    else:
        d.set_phase("Running", f"attempt {cur.index} is being submitted")


def cluster_lost(d: Decision) -> str | None:
    """Why the attempt's RayCluster is gone, or None. HyperPod's own recovery never deletes a RayCluster (it
    reboots or replaces nodes and KubeRay recreates pods); Kueue does when task governance preempts or evicts the
    workload, and so may a person. `ensure_children` recreates it in this same pass."""
    if d.obs.raycluster is None:
        return "the RayCluster was deleted"
    if dig(d.obs.raycluster, "metadata", "deletionTimestamp"):
        return "the RayCluster is being deleted"
    return None


def stop_for_lost_cluster(d: Decision, cur: Attempt, why: str) -> None:
    """The attempt's Ray job died with its cluster: stop its RayJob and resume on the recreated cluster from the
    latest complete checkpoint. Never the application's budget. Under Kueue it is a preemption (no budget, as
    when Kueue suspends the cluster): task governance deletes clusters to preempt or to requeue one whose node
    outlasted its recovery timeout, and Kueue's own requeue backoff paces it. Without Kueue nothing in the
    platform deletes a cluster to schedule work, so it is charged to the infrastructure budget, which bounds a
    controller that keeps deleting it."""
    d.delete_rayjob(cur.index)
    kind = "preemption" if d.spec.cluster.kueue is not None else "infra"
    end_attempt(d, cur, kind, None, f"{why} under the running attempt; it is recreated", result="Stopped")


def silent_too_long(d: Decision, cur: Attempt) -> str | None:
    """Why the attempt counts as hung, or None. Until this attempt's trainer sends its first heartbeat the
    startup timeout applies (image pull, model download, engine start); after it, the hang timeout."""
    res, prog = d.spec.resilience, d.status.progress
    beat = parse_ts(prog.heartbeat) if prog.attempt == cur.index else None
    if beat is not None:
        timeout, since = res.hang_timeout_seconds, beat
        why = f"no progress heartbeat for {timeout}s (spec.resilience.hangTimeoutSeconds)"
    else:
        timeout, since = res.startup_timeout_seconds, parse_ts(cur.start_time)
        why = (
            f"the trainer sent no heartbeat within {timeout}s of the attempt's start "
            "(spec.resilience.startupTimeoutSeconds)"
        )
    if not timeout or since is None:
        return None
    deadline = since + timedelta(seconds=timeout)
    if d.now >= deadline:
        return why
    d.due.append(deadline)
    return None


def fail_without_retry(d: Decision, cur: Attempt, reason: str, ray_message: str) -> None:
    """The trainer said retrying will not help (exit 2: config, 3: data/model/adapter): fail now, no budget."""
    detail = last_error_line(ray_message) or ray_message.splitlines()[0]
    cur.result, cur.failure, cur.end_time = "Failed", "application", ts(d.now)
    cur.message = detail[:1024]
    text = f"attempt {cur.index} failed and will not be retried ({reason}): {detail}"
    d.status.finished_at = ts(d.now)
    d.status.message = text[:2048]
    d.set_phase("Failed", d.status.message, reason)
    d.event("Warning", reason, d.status.message)


def end_attempt(d: Decision, cur: Attempt, kind: str, node: str | None, message: str, result: str = "Failed") -> None:
    cur.result, cur.failure, cur.end_time = result, kind, ts(d.now)  # type: ignore[assignment]
    cur.node, cur.message = node or cur.node, message[:1024]
    if kind == "infra":
        avoidance.remember(d, cur, cur.node)
    ended = "was stopped" if result == "Stopped" else "failed"
    budget = budget_of(kind)
    if budget is None:  # preempted: no budget, no backoff; Kueue decides when it runs again
        d.event("Normal", "AttemptPreempted", f"attempt {cur.index} {ended}: {message}")
        d.set_phase("Queued", f"attempt {cur.index} {ended}: {message}; waiting for Kueue", "QueuedByKueue")
        return
    used = d.status.restarts.get(budget, 0) + 1
    d.status.restarts[budget] = used
    res = d.spec.resilience
    limit = res.max_infra_restarts if budget == "infra" else res.max_restarts
    if used > limit:
        field_name = "maxInfraRestarts" if budget == "infra" else "maxRestarts"
        text = (
            f"attempt {cur.index} {ended} ({kind}: {message}); {used - 1} {budget} restarts already used "
            f"of spec.resilience.{field_name}={limit}"
        )
        d.status.finished_at = ts(d.now)
        d.status.message = text
        d.set_phase("Failed", text, "RestartBudgetExhausted")
        d.event("Warning", "RestartBudgetExhausted", text)
        return
    streak = 0
    for a in reversed(d.status.attempts):
        if a.failure and budget_of(a.failure) == budget:
            streak += 1
        else:
            break
    delay = min(res.max_backoff_seconds, res.backoff_seconds * 2 ** (streak - 1))
    d.status.next_attempt_after = ts(d.now + timedelta(seconds=delay))
    reason = "AttemptStopped" if result == "Stopped" else "AttemptFailed"
    d.event("Warning", reason, f"attempt {cur.index} {ended} ({kind}): {message}; retry in {delay}s")
    d.set_phase("Recovering", f"attempt {cur.index} {ended} ({kind}): {message}")


def ready_to_start(d: Decision) -> bool:
    """Whether a RayJob may be submitted now (the next attempt, or the preflight); if not, the phase says why."""
    if d.obs.apply_error or d.obs.name_conflict:
        return False  # this pass could not create the children; finish() reports why, the next pass retries
    if d.cluster_wait:
        d.set_phase("Queued", d.cluster_wait, "WaitingForKueue")
        return False
    after = parse_ts(d.status.next_attempt_after)
    if after is not None and d.now < after:
        d.due.append(after)
        d.set_phase("Recovering", d.message or "waiting before the next attempt")
        return False
    if queued_by_kueue(d.obs.raycluster):
        queue = (d.spec.cluster.kueue.queue_name if d.spec.cluster.kueue else None) or "its queue"
        d.set_phase("Queued", f"the RayCluster waits for Kueue to admit it ({queue})", "QueuedByKueue")
        return False
    if orphans := workers_of_a_previous_head(d):
        for pod in orphans:  # KubeRay recreates them; they join the live head
            d.plan.delete.append(Delete("v1", "Pod", pod.name))
        names = ", ".join(p.name for p in orphans)
        d.set_phase("Recovering", f"replacing Ray worker pods that joined the previous head: {names}")
        return False
    if not d.cluster_ready():
        phase = "Provisioning" if d.status.attempt == 0 else "Recovering"
        d.set_phase(phase, d.waiting_for_cluster(), d.pod_problem[0] if d.pod_problem else phase)
        return False
    stale = [p for p in d.obs.pods if p.spec_hash and p.spec_hash != d.desired_hash and not p.terminating]
    if stale and d.desired_hash is not None:
        for pod in stale:  # KubeRay recreates them from the updated template
            d.plan.delete.append(Delete("v1", "Pod", pod.name))
        d.set_phase("Recovering", f"replacing {len(stale)} Ray pods built from the previous spec")
        return False
    if misplaced := avoidance.pods_placed_without_knowing(d):
        for pod, _ in misplaced:  # KubeRay recreates them, now with the preference for other nodes
            d.plan.delete.append(Delete("v1", "Pod", pod.name))
        pod, a = misplaced[0]
        d.set_phase("Recovering", f"moving Ray pod {pod.name} off node {a.node}, whose fault ended attempt {a.attempt}")
        return False
    lingering = previous_attempt_lingers(d) or (ray_pods_not_in_place(d) if d.status.attempt else None)
    if lingering is not None:
        d.set_phase("Recovering", f"waiting before attempt {d.status.attempt + 1}: {lingering}")
        return False
    return True


def start_when_ready(d: Decision, cause: str) -> None:
    if not ready_to_start(d):
        return
    n = d.status.attempt + 1
    if n > 1 and d.status.observed_generation == d.gen and d.obs.raycluster is not None:
        # A retry heals the ConfigMap if it was deleted while the last attempt ran (the first attempt's was applied
        # by the pass that created the cluster for this generation: applying it again would be a no-op).
        d.plan.apply.append(build_config_map(d.job))
    d.plan.apply.append(build_rayjob(d.job, n))
    # The trainer resumes from the newest complete checkpoint it finds; it reports which (resumedFromStep).
    ckpt = d.status.progress.last_checkpoint
    known = ckpt.step if (ckpt and n > 1) else None
    d.status.attempts.append(
        Attempt(
            index=n,
            ray_job=rayjob_name(d.job.name, n),
            cause=cause if n > 1 else "initial",  # type: ignore[arg-type]
            start_time=ts(d.now),
            pod_set=pod_set_digest(d.obs.pods) if d.obs.pods else None,
        )
    )
    d.status.attempt, d.status.ray_job, d.status.next_attempt_after = (
        n,
        rayjob_name(d.job.name, n),
        None,
    )
    where = f", resuming from the latest complete checkpoint (step {known} or newer)" if known is not None else ""
    d.event("Normal", "AttemptStarted", f"attempt {n} started as RayJob {rayjob_name(d.job.name, n)}{where}")
    d.set_phase("Running", f"attempt {n} submitted{where}")


def succeed(d: Decision, cur: Attempt) -> None:
    d.status.finished_at = d.status.finished_at or ts(d.now)
    d.status.message = f"training finished in attempt {cur.index}"
    d.set_phase("Succeeded", d.status.message)
    d.event("Normal", "Succeeded", d.status.message)
