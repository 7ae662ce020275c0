"""The state one decision pass works on, and the plan it produces. Pure: no I/O anywhere in the decision.

`Decision` holds the job, what was observed, the status being built and the plan; the decision itself is split by
concern into `attempts` (attempts and restart budgets), `faults` (nodes, lost pods, what blocks the next attempt),
`status` (status and conditions) and `serving`, and driven from `core.decide.decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_api.status import Attempt, JobStatus
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings
from mmrl_operator.core.names import raycluster_name, rayjob_name
from mmrl_operator.core.observed import Observed, raycluster_ready, rayjob_outcome


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


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(value: str | None) -> datetime | None:
    """An RFC 3339 time, or None when absent or not a time (status fields may be written by other processes)."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


class Decision:
    def __init__(
        self,
        job: MultimodalRLJob,
        generation: int,
        observed: Observed,
        now: datetime,
        network: NetworkPolicySettings | None = None,
    ) -> None:
        self.job, self.spec, self.gen, self.now = job, job.spec, generation, now
        self.network = network or NetworkPolicySettings()  # the platform's choice (the chart's networkPolicy)
        self.status: JobStatus = (job.status or JobStatus()).model_copy(deep=True)
        # One attempt at a time: a RayJob of the job's beyond the next attempt number was not made by this operator
        # (a forged owner reference, or a name picked to cost a loop per number): it is ignored like a stranger's.
        nxt = self.status.attempt + 1
        beyond = [rayjob_name(job.name, n) for n in sorted(observed.rayjobs) if n > nxt]
        if beyond:
            observed = replace(observed, rayjobs={n: o for n, o in observed.rayjobs.items() if n <= nxt})
        self.obs = observed
        self.foreign: list[str] = sorted({*observed.foreign, *(f"RayJob {name}" for name in beyond)})
        self.plan = Plan()
        self.message = self.status.message or ""
        self.reason = ""
        self.due: list[datetime] = []
        # Nodes hosting the job whose state means the running attempt must stop now.
        self.stopping = [v for v in observed.nodes.values() if v.stop]
        self.desired_hash: str | None = None
        self.spec_change_pending: str | None = None
        self.cluster_wait: str | None = None  # why the missing RayCluster is not created this pass
        # The first Ray pod that cannot start (unschedulable, image pull or crash loop), to tell the user why.
        self.pod_problem = next((pod.problem for pod in observed.pods if pod.problem), None)
        self.inference_ready: tuple[bool | None, str, str] | None = None
        self.promoted: tuple[bool | None, str, str] | None = None  # Promoted (status, reason, message) if gated

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

    def failed_reason(self) -> str:
        for cond in self.status.conditions:
            if cond.type == "Stalled" and cond.status == "True":
                return cond.reason
        return "Failed"
