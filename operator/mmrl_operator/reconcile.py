"""The decision: (job, observed children and nodes, now) → a Plan of API actions and the new status. Pure.

Level-triggered: the plan depends only on the job object (spec + status) and what exists now, never on which
event arrived. Every action is idempotent — objects are server-side applied under fixed names (attempt N is
always RayJob `<name>-a<N>`), deletions of missing objects are no-ops — so the controller may be killed between
any two actions and the next reconcile converges to the same state without duplicates. Budgets are charged in
the same status write that records an attempt's end, so a repeated reconcile cannot charge twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_api.contract import fatal_reason, last_error_line
from mmrl_api.status import MAX_ATTEMPT_HISTORY, Attempt, InferenceStatus, JobStatus
from mmrl_operator.builders.raycluster import SPEC_HASH_ANNOTATION, build_raycluster
from mmrl_operator.builders.rayjob import build_rayjob
from mmrl_operator.builders.rbac import build_rbac
from mmrl_operator.builders.trainer_config import build_config_map
from mmrl_operator.conditions import Facts, compute_conditions
from mmrl_operator.names import job_dir, raycluster_name, rayjob_name
from mmrl_operator.observed import (
    Observed,
    desired_workers,
    pod_set_digest,
    queued_by_kueue,
    raycluster_ready,
    rayjob_outcome,
)
from mmrl_operator.serving import decide_serving

APPLY_RETRY_SECONDS = 30  # a refused apply (webhook, quota, policy) is retried on this period and on every change


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Delete:
    api_version: str
    kind: str
    name: str
    grace_seconds: int | None = None


@dataclass
class Plan:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    requeue_after: float | None = None


def budget_of(failure: str) -> str | None:
    """The restart budget a failure class spends: infra, application (application and hang), or none (preemption)."""
    if failure == "preemption":
        return None
    return "infra" if failure == "infra" else "application"


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class _Decider:
    def __init__(self, job: MultimodalRLJob, generation: int, observed: Observed, now: datetime) -> None:
        self.job, self.spec, self.gen, self.obs, self.now = job, job.spec, generation, observed, now
        self.status: JobStatus = (job.status or JobStatus()).model_copy(deep=True)
        self.plan = Plan()
        self.message = self.status.message or ""
        self.reason = ""
        self.due: list[datetime] = []
        # Nodes hosting the job whose state means the running attempt must stop now.
        self.stopping = [v for v in observed.nodes.values() if v.stop]
        self.desired_hash: str | None = None
        self.spec_change_pending: str | None = None
        # The first Ray pod that cannot start (unschedulable, image pull or crash loop), to tell the user why.
        self.pod_problem = next((pod.problem for pod in observed.pods if pod.problem), None)
        self.inference_ready: tuple[bool | None, str, str] | None = None

    # --- helpers -----------------------------------------------------------------------------------------
    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def set_phase(self, phase: str, message: str, reason: str = "") -> None:
        self.status.phase = phase  # type: ignore[assignment]
        self.message, self.reason = message, reason or phase

    def current(self) -> Attempt | None:
        a = self.status.attempts
        return a[-1] if a and a[-1].index == self.status.attempt else None

    def cluster_ready(self) -> bool | None:
        return raycluster_ready(self.obs.raycluster)

    def cluster_readiness(self) -> bool | None:
        """For the ClusterReady condition: a cluster this pass creates exists, and is not ready yet (so the pass
        after the create, which sees it, writes the same condition)."""
        creating = self.obs.raycluster is None and any(o["kind"] == "RayCluster" for o in self.plan.apply)
        return False if creating else self.cluster_ready()

    def waiting_for_cluster(self) -> str:
        why = f": {self.pod_problem[1]}" if self.pod_problem else ""
        return f"waiting for the Ray cluster to be ready{why}"

    def delete_rayjob(self, attempt: int) -> None:
        if attempt in self.obs.rayjobs:
            self.plan.delete.append(Delete(c.RAY_API_VERSION, "RayJob", rayjob_name(self.job.name, attempt)))

    def stop_if_active(self, attempt: int) -> None:
        rayjob = self.obs.rayjobs.get(attempt)
        if rayjob is not None and rayjob_outcome(rayjob)[0] in ("Pending", "Running"):
            self.delete_rayjob(attempt)

    def delete_raycluster(self) -> None:
        if self.obs.raycluster is not None:
            self.plan.delete.append(Delete(c.RAY_API_VERSION, "RayCluster", raycluster_name(self.job.name)))

    # --- the decision ------------------------------------------------------------------------------------
    def run(self) -> Plan:
        self.status.job_dir = job_dir(self.job)
        self.adopt_orphan_attempt()
        if self._failed_reason() == "InvalidSpec" and self.status.observed_generation != self.gen:
            self.status.phase = "Pending"  # the spec was fixed: an invalid spec never started anything to keep
            self.status.finished_at = None
        elif self._failed_reason() == "RestartBudgetExhausted" and self.budget_raised():
            self.status.phase, self.status.finished_at = "Recovering", None
            self.event("Normal", "Resumed", "restart budget raised: resuming from the latest complete checkpoint")
        if self.status.phase in ("Succeeded", "Serving", "Failed"):
            self.finished()
        elif self.spec.suspend:
            self.suspend()
        else:
            self.ensure_children()
            self.watch_nodes()
            self.step_attempts()
        if self.status.phase in ("Succeeded", "Serving"):
            self.serve()
        return self.finish()

    def serve(self) -> None:
        """Training is done: serve the adapter (see `serving`), or stay Succeeded when serving is off."""
        d = decide_serving(self.job, self.status, self.obs.serving)
        self.plan.apply += d.apply
        self.plan.delete += [Delete(api, kind, name) for api, kind, name in d.delete]
        for type_, reason, message in d.events:
            self.event(type_, reason, message)
        if d.phase == "Failed":
            self.status.message = d.message  # a Failed job's message is kept as written here
        self.set_phase(d.phase, d.message or self.status.message or d.phase, d.reason)
        self.status.inference = InferenceStatus.model_validate(d.inference) if d.inference else None
        self.inference_ready = d.ready
        if d.requeue_after is not None:
            self.due.append(self.now + timedelta(seconds=d.requeue_after))

    def adopt_orphan_attempt(self) -> None:
        """A RayJob newer than status.attempt means we crashed after creating it: record it, don't recreate."""
        newest = max(self.obs.rayjobs, default=0)
        while self.status.attempt < newest:
            prev = self.current()
            cause = "initial" if self.status.attempt == 0 else ((prev.failure if prev else None) or "resume")
            self.status.attempt += 1
            self.status.attempts.append(
                Attempt(
                    index=self.status.attempt,
                    ray_job=rayjob_name(self.job.name, self.status.attempt),
                    cause=cause,  # type: ignore[arg-type]
                    start_time=ts(self.now),
                )
            )

    def finished(self) -> None:
        ttl = self.spec.ttl_seconds_after_finished
        done = parse_ts(self.status.finished_at)
        if ttl is not None and done is not None and self.obs.raycluster is not None:
            due = done + timedelta(seconds=ttl)
            if self.now >= due:
                self.delete_raycluster()
                self.event("Normal", "ClusterDeleted", f"RayCluster deleted {ttl}s after the job finished")
            else:
                self.due.append(due)
        for attempt in self.obs.rayjobs:
            self.stop_if_active(attempt)  # a finished job leaves nothing running
        self.message = self.status.message or self.status.phase
        self.reason = self.status.phase if self.status.phase != "Failed" else self._failed_reason()

    def budget_raised(self) -> bool:
        """A job that ran out of restarts may go on once the user raised the budget it exhausted."""
        last = self.current()
        if last is None or last.failure is None:
            return False
        budget = budget_of(last.failure)
        if budget is None:
            return False
        res = self.spec.resilience
        limit = res.max_infra_restarts if budget == "infra" else res.max_restarts
        return self.status.restarts.get(budget, 0) <= limit

    def _failed_reason(self) -> str:
        for cond in self.status.conditions:
            if cond.type == "Stalled" and cond.status == "True":
                return cond.reason
        return "Failed"

    def suspend(self) -> None:
        cur = self.current()
        if cur is not None and cur.result == "Running":
            cur.result, cur.end_time, cur.message = "Stopped", ts(self.now), "suspended"
        for attempt in list(self.obs.rayjobs):
            self.delete_rayjob(attempt)
        self.delete_raycluster()
        if self.status.phase != "Suspended":
            self.event("Normal", "Suspended", "job suspended: RayJob and RayCluster deleted, checkpoints kept")
        self.set_phase("Suspended", "suspended; set spec.suspend=false to resume from the latest checkpoint")

    def ensure_children(self) -> None:
        first_time = self.status.observed_generation != self.gen or self.obs.raycluster is None
        late: list[dict[str, Any]] = []
        if first_time:
            # KubeRay needs the ServiceAccount and the pods the ConfigMap before it can start the cluster; the Role
            # and binding only matter once the trainer runs, so the RayCluster goes before them.
            service_account, *late = build_rbac(self.job)
            self.plan.apply += [service_account, build_config_map(self.job)]
        desired = build_raycluster(self.job)
        current_hash = ((self.obs.raycluster or {}).get("metadata", {}).get("annotations") or {}).get(
            SPEC_HASH_ANNOTATION
        )
        self.desired_hash = desired["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        cur = self.current()
        if self.obs.raycluster is None:
            self.plan.apply.append(desired)
            self.event("Normal", "RayClusterCreated", f"creating RayCluster {desired['metadata']['name']}")
        elif current_hash != self.desired_hash:
            if cur is not None and cur.result == "Running":
                # A running attempt keeps the cluster it started on (its world size, its pods); the change is
                # applied once it ends, and the next attempt starts on pods built from the new spec.
                self.spec_change_pending = f"the Ray cluster spec changed; it is applied when attempt {cur.index} ends"
            else:
                self.plan.apply.append(desired)
                self.event("Normal", "RayClusterUpdated", "applied the changed Ray cluster spec")
        self.plan.apply += late
        self.status.ray_cluster = desired["metadata"]["name"]

    def watch_nodes(self) -> None:
        faulted = sorted(n for n, v in self.obs.nodes.items() if v.fault)
        for name in faulted:
            if name not in self.status.degraded_nodes:
                v = self.obs.nodes[name]
                self.event("Warning", "NodeFault", f"{v.message} (status {v.reason})")
        self.status.degraded_nodes = faulted
        # Pods on a node that is going away are deleted now so KubeRay recreates them on healthy nodes at once,
        # instead of after the 5-minute not-ready eviction; gone/NotReady kubelets cannot confirm, hence grace 0.
        for pod in self.obs.pods:
            verdict = self.obs.nodes.get(pod.node or "")
            if verdict is not None and verdict.stop:
                grace = 0 if verdict.reason in ("NodeDeleted", "NotReady") else None
                self.plan.delete.append(Delete("v1", "Pod", pod.name, grace))

    def infra_signal(self, attempt: Attempt) -> tuple[str | None, str | None]:
        """(node, message) when the infrastructure is to blame for this attempt's trouble, else (None, None)."""
        if self.stopping:
            return self.stopping[0].node, self.stopping[0].message
        if attempt.node:
            return attempt.node, f"node {attempt.node} reported a fault during the attempt"
        for pod in self.obs.pods:
            if pod.evicted_or_lost:
                return pod.node, f"pod {pod.name} was {pod.reason}"
        if attempt.pod_set and self.obs.pods and pod_set_digest(self.obs.pods) != attempt.pod_set:
            return None, "a Ray pod of the attempt was lost or recreated"
        # A pod deleted (evicted, lost with its node) that KubeRay has not replaced yet.
        if self.obs.raycluster is not None:
            heads = [p for p in self.obs.pods if p.component == "ray-head"]
            workers = [p for p in self.obs.pods if p.component == "ray-worker"]
            if not heads:
                return None, "the Ray head pod is gone"
            if len(workers) < desired_workers(self.obs.raycluster):
                return None, "a Ray worker pod is gone"
        return None, None

    def step_attempts(self) -> None:
        cur = self.current()
        if cur is None:
            self.start_when_ready("initial")
            return
        if cur.result == "Running":
            self.track_running(cur)
        elif cur.result == "Succeeded":
            self.succeed(cur)
        else:  # Failed or Stopped: wait for backoff and a ready cluster, then the next attempt
            self.stop_if_active(cur.index)
            if self.status.phase != "Failed":
                self.start_when_ready(cur.failure or "resume")

    def record_trainer_report(self, cur: Attempt) -> None:
        """The step this attempt's trainer says it resumed from: read by the trainer from the checkpoint directory
        when it started, so it is what really happened, not what the operator expected."""
        prog = self.status.progress
        if prog.attempt == cur.index and prog.resumed_from_step is not None:
            cur.resumed_from_step = prog.resumed_from_step

    def track_running(self, cur: Attempt) -> None:
        # A node going away while the attempt runs makes its end an infrastructure failure. A degraded-only verdict
        # (a cordon, a deep health check in progress, a fault label) does not: the attempt keeps training, and if
        # the trainer later fails on its own that is still the application's failure.
        for v in self.stopping:
            if cur.node is None:
                cur.node = v.node
        self.record_trainer_report(cur)
        rayjob = self.obs.rayjobs.get(cur.index)
        if rayjob is None:
            self.end_attempt(cur, "infra", None, f"RayJob {cur.ray_job} disappeared")
            return
        outcome, message = rayjob_outcome(rayjob)
        node, why = self.infra_signal(cur)
        fatal = fatal_reason(message) if outcome == "Failed" and not (node or why) else None
        if queued_by_kueue(self.obs.raycluster) and outcome != "Succeeded":
            # Kueue took the cluster back (preemption): the pods are going, so is the attempt. Not a failure.
            self.delete_rayjob(cur.index)
            self.end_attempt(cur, "preemption", None, "the RayCluster was preempted by Kueue", result="Stopped")
        elif self.stopping and outcome in ("Pending", "Running"):
            self.delete_rayjob(cur.index)
            self.end_attempt(cur, "infra", node, f"stopped: {why}", result="Stopped")
        elif fatal is not None:
            self.fail_without_retry(cur, fatal, message)
        elif outcome == "Succeeded":
            cur.result, cur.end_time = "Succeeded", ts(self.now)
            self.event("Normal", "AttemptSucceeded", f"attempt {cur.index} succeeded")
            self.succeed(cur)
        elif outcome == "Failed":
            kind = "infra" if (node or why) else "application"
            self.end_attempt(cur, kind, node, f"{message}; {why}" if why else message)
        elif (silence := self.silent_too_long(cur)) is not None:
            self.delete_rayjob(cur.index)
            self.end_attempt(cur, "hang", None, silence)
        elif outcome == "Running":
            self.set_phase("Running", f"attempt {cur.index} is training")
        elif self.pod_problem is not None:
            self.set_phase("Running", f"attempt {cur.index} is waiting: {self.pod_problem[1]}", self.pod_problem[0])
        else:
            self.set_phase("Running", f"attempt {cur.index} is being submitted")

    def silent_too_long(self, cur: Attempt) -> str | None:
        """Why the attempt counts as hung, or None. Until this attempt's trainer sends its first heartbeat the
        startup timeout applies (image pull, model download, engine start); after it, the hang timeout."""
        res, prog = self.spec.resilience, self.status.progress
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
        if self.now >= deadline:
            return why
        self.due.append(deadline)
        return None

    def fail_without_retry(self, cur: Attempt, reason: str, ray_message: str) -> None:
        """The trainer said retrying will not help (exit 2: config, 3: data/model/adapter): fail now, no budget."""
        detail = last_error_line(ray_message) or ray_message.splitlines()[0]
        cur.result, cur.failure, cur.end_time = "Failed", "application", ts(self.now)
        cur.message = detail[:1024]
        text = f"attempt {cur.index} failed and will not be retried ({reason}): {detail}"
        self.status.finished_at = ts(self.now)
        self.status.message = text[:2048]
        self.set_phase("Failed", self.status.message, reason)
        self.event("Warning", reason, self.status.message)

    def end_attempt(self, cur: Attempt, kind: str, node: str | None, message: str, result: str = "Failed") -> None:
        cur.result, cur.failure, cur.end_time = result, kind, ts(self.now)  # type: ignore[assignment]
        cur.node, cur.message = node or cur.node, message[:1024]
        ended = "was stopped" if result == "Stopped" else "failed"
        budget = budget_of(kind)
        if budget is None:  # preempted: no budget, no backoff; Kueue decides when it runs again
            self.event("Normal", "AttemptPreempted", f"attempt {cur.index} {ended}: {message}")
            self.set_phase("Queued", f"attempt {cur.index} {ended}: {message}; waiting for Kueue", "QueuedByKueue")
            return
        used = self.status.restarts.get(budget, 0) + 1
        self.status.restarts[budget] = used
        res = self.spec.resilience
        limit = res.max_infra_restarts if budget == "infra" else res.max_restarts
        if used > limit:
            field_name = "maxInfraRestarts" if budget == "infra" else "maxRestarts"
            text = (
                f"attempt {cur.index} {ended} ({kind}: {message}); {used - 1} {budget} restarts already used "
                f"of spec.resilience.{field_name}={limit}"
            )
            self.status.finished_at = ts(self.now)
            self.status.message = text
            self.set_phase("Failed", text, "RestartBudgetExhausted")
            self.event("Warning", "RestartBudgetExhausted", text)
            return
        streak = 0
        for a in reversed(self.status.attempts):
            if a.failure and budget_of(a.failure) == budget:
                streak += 1
            else:
                break
        delay = min(res.max_backoff_seconds, res.backoff_seconds * 2 ** (streak - 1))
        self.status.next_attempt_after = ts(self.now + timedelta(seconds=delay))
        reason = "AttemptStopped" if result == "Stopped" else "AttemptFailed"
        self.event("Warning", reason, f"attempt {cur.index} {ended} ({kind}): {message}; retry in {delay}s")
        self.set_phase("Recovering", f"attempt {cur.index} {ended} ({kind}): {message}")

    def start_when_ready(self, cause: str) -> None:
        if self.obs.apply_error:
            return  # this pass could not create the children; finish() reports why, the next pass retries
        after = parse_ts(self.status.next_attempt_after)
        if after is not None and self.now < after:
            self.due.append(after)
            self.set_phase("Recovering", self.message or "waiting before the next attempt")
            return
        if queued_by_kueue(self.obs.raycluster):
            queue = (self.spec.cluster.kueue.queue_name if self.spec.cluster.kueue else None) or "its queue"
            self.set_phase("Queued", f"the RayCluster waits for Kueue to admit it ({queue})", "QueuedByKueue")
            return
        if not self.cluster_ready():
            phase = "Provisioning" if self.status.attempt == 0 else "Recovering"
            self.set_phase(phase, self.waiting_for_cluster(), self.pod_problem[0] if self.pod_problem else phase)
            return
        stale = [p for p in self.obs.pods if p.spec_hash and p.spec_hash != self.desired_hash and not p.terminating]
        if stale and self.desired_hash is not None:
            for pod in stale:  # KubeRay recreates them from the updated template
                self.plan.delete.append(Delete("v1", "Pod", pod.name))
            self.set_phase("Recovering", f"replacing {len(stale)} Ray pods built from the previous spec")
            return
        lingering = self.previous_attempt_lingers() or (self.ray_pods_not_in_place() if self.status.attempt else None)
        if lingering is not None:
            self.set_phase("Recovering", f"waiting before attempt {self.status.attempt + 1}: {lingering}")
            return
        n = self.status.attempt + 1
        if n > 1 and self.status.observed_generation == self.gen and self.obs.raycluster is not None:
            # A retry heals static children deleted while the last attempt ran (the first attempt's were applied
            # by the pass that created the cluster for this generation: applying them again would be 4 no-ops).
            self.plan.apply += [*build_rbac(self.job), build_config_map(self.job)]
        self.plan.apply.append(build_rayjob(self.job, n))
        # The trainer resumes from the newest complete checkpoint it finds; it reports which (resumedFromStep).
        ckpt = self.status.progress.last_checkpoint
        known = ckpt.step if (ckpt and n > 1) else None
        self.status.attempts.append(
            Attempt(
                index=n,
                ray_job=rayjob_name(self.job.name, n),
                cause=cause if n > 1 else "initial",  # type: ignore[arg-type]
                start_time=ts(self.now),
                pod_set=pod_set_digest(self.obs.pods) if self.obs.pods else None,
            )
        )
        self.status.attempt, self.status.ray_job, self.status.next_attempt_after = (
            n,
            rayjob_name(self.job.name, n),
            None,
        )
        where = f", resuming from the latest complete checkpoint (step {known} or newer)" if known is not None else ""
        self.event("Normal", "AttemptStarted", f"attempt {n} started as RayJob {rayjob_name(self.job.name, n)}{where}")
        self.set_phase("Running", f"attempt {n} submitted{where}")

    def previous_attempt_lingers(self) -> str | None:
        """Why the next attempt must not start yet. One attempt at a time: an earlier RayJob still running or held
        by KubeRay's finalizer, a Ray pod still terminating (it may still hold GPUs, NCCL peers and checkpoint
        files), or a Ray pod on a node that is going away. KubeRay counts Terminating pods that still say Ready as
        ready replicas, so cluster readiness alone does not tell."""
        for attempt, rayjob in sorted(self.obs.rayjobs.items()):
            name = rayjob_name(self.job.name, attempt)
            if (rayjob.get("metadata") or {}).get("deletionTimestamp"):
                return f"RayJob {name} is still being deleted"
            if rayjob_outcome(rayjob)[0] in ("Pending", "Running"):
                return f"RayJob {name} is still active"
        for pod in self.obs.pods:
            if pod.terminating:
                return f"Ray pod {pod.name} is still terminating"
            verdict = self.obs.nodes.get(pod.node or "")
            if verdict is not None and verdict.stop:
                return f"Ray pod {pod.name} is still on node {pod.node} ({verdict.reason})"
        return None

    def ray_pods_not_in_place(self) -> str | None:
        """After an attempt ended, the next one waits for a full set of Running, scheduled Ray pods: KubeRay's
        ready counts lag behind pods the operator (or a node fault) just removed, and a replacement pod not yet
        scheduled could still land on a node whose fault the scheduler has not been told about."""
        live = [p for p in self.obs.pods if p.component in ("ray-head", "ray-worker") and not p.terminating]
        waiting = [p.name for p in live if p.phase != "Running" or not p.node]
        if waiting:
            return f"Ray pod {waiting[0]} is not running yet"
        want = 1 + desired_workers(self.obs.raycluster or {})
        if len(live) < want:
            return f"{len(live)} of {want} Ray pods exist"
        return None

    def succeed(self, cur: Attempt) -> None:
        self.status.finished_at = self.status.finished_at or ts(self.now)
        self.status.message = f"training finished in attempt {cur.index}"
        self.set_phase("Succeeded", self.status.message)
        self.event("Normal", "Succeeded", self.status.message)

    def finish(self) -> Plan:
        if self.obs.apply_error:
            self.message = f"the apiserver refused a child object: {self.obs.apply_error}"
            before = next((x for x in self.status.conditions if x.type == "Stalled"), None)
            if not (before and before.reason == "ApplyFailed" and before.message == self.obs.apply_error):
                self.event("Warning", "ApplyFailed", self.obs.apply_error)  # once per distinct refusal
            self.due.append(self.now + timedelta(seconds=APPLY_RETRY_SECONDS))
        self.status.attempts = self.status.attempts[-MAX_ATTEMPT_HISTORY:]
        self.status.observed_generation = self.gen
        if self.status.phase not in ("Failed",):
            self.status.message = self.message or None
        cur = self.current()
        rayjob = self.obs.rayjobs.get(cur.index) if cur else None
        training = bool(
            cur and cur.result == "Running" and rayjob is not None and rayjob_outcome(rayjob)[0] == "Running"
        )
        degraded = ", ".join(f"{n} ({self.obs.nodes[n].reason})" for n in self.status.degraded_nodes)
        facts = Facts(
            phase=self.status.phase,
            generation=self.gen,
            message=self.message or self.status.phase,
            reason=self.reason or self.status.phase,
            cluster_ready=self.cluster_readiness() if self.status.phase != "Suspended" else None,
            training=training,
            node_faults_message=f"node faults: {degraded}" if degraded else None,
            pod_problem=(
                ("QueuedByKueue", "Kueue holds the RayCluster (spec.suspend) until it admits it")
                if queued_by_kueue(self.obs.raycluster)
                else self.pod_problem
            ),
            stalled=("ApplyFailed", self.obs.apply_error) if self.obs.apply_error else None,
            spec_change_pending=self.spec_change_pending,
            inference=self.inference_ready,
        )
        self.status.conditions = compute_conditions(self.status.conditions, facts, ts(self.now))
        self.plan.status = self.status.wire()
        if self.due:
            self.plan.requeue_after = max(0.0, (min(self.due) - self.now).total_seconds())
        return self.plan


def decide(job: MultimodalRLJob, generation: int, observed: Observed, now: datetime) -> Plan:
    """Compute the actions and the new status for one job. See the module docstring for the guarantees."""
    return _Decider(job, generation, observed, now).run()
