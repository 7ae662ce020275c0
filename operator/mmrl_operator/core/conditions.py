"""kstatus-style conditions as a pure function of the phase and a few observed facts.

`lastTransitionTime` only moves when a condition's status flips, so `kubectl wait` and Argo CD see stable
objects; reasons are CamelCase, messages one human sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrl_api.status import Condition

IN_PROGRESS = ("Pending", "Provisioning", "Queued", "Running", "Recovering", "Exporting")


@dataclass(frozen=True)
class Facts:
    phase: str
    generation: int
    message: str
    reason: str
    cluster_ready: bool | None  # None: no cluster exists
    training: bool
    node_faults_message: str | None
    pod_problem: tuple[str, str] | None = None  # (reason, message) of a Ray pod that cannot start
    stalled: tuple[str, str] | None = None  # (reason, message) when the operator cannot make progress
    spec_change_pending: str | None = None  # why a spec change waits for the running attempt to end
    inference: tuple[bool | None, str, str] | None = None  # InferenceReady (status, reason, message) once trained
    status_problems: str | None = None  # status fields read back that did not validate and were left out
    preflight: tuple[bool | None, str, str] | None = None  # PreflightPassed (status, reason, message) if one ran
    promoted: tuple[bool | None, str, str] | None = None  # Promoted (status, reason, message) once a gate was applied


def _want(facts: Facts) -> list[tuple[str, bool | None, str, str]]:
    p = facts.phase
    return [
        ("Ready", _ready(facts), facts.stalled[0] if facts.stalled else p, facts.message),
        ("Reconciling", p in IN_PROGRESS, p, facts.message),
        _stalled(facts),
        _cluster_ready(facts),
        ("Training", facts.training, "AttemptRunning" if facts.training else p, facts.message),
        # Not "Degraded": Argo CD and kstatus read that as "the job is unhealthy", but training carries on.
        (
            "NodeFaults",
            facts.node_faults_message is not None,
            "NodeFault" if facts.node_faults_message else "NoFaults",
            facts.node_faults_message or "no node faults on this job's nodes",
        ),
        ("Complete", p == "Succeeded", p, facts.message),
        ("Failed", p == "Failed", facts.reason if p == "Failed" else p, facts.message),
        ("Suspended", p == "Suspended", p, facts.message),
        _inference_ready(facts),
        (
            "StatusValid",
            facts.status_problems is None,
            "MalformedStatus" if facts.status_problems else "Valid",
            facts.status_problems or "every status field read back is well-formed",
        ),
        (
            "SpecChangePending",
            facts.spec_change_pending is not None,
            "WaitingForAttemptToEnd" if facts.spec_change_pending else "NoChangePending",
            facts.spec_change_pending or "the Ray cluster matches the spec",
        ),
        *([("PreflightPassed", *facts.preflight)] if facts.preflight is not None else []),
        *([("Promoted", *facts.promoted)] if facts.promoted is not None else []),
    ]


def _ready(facts: Facts) -> bool:
    """Succeeded without serving, or Serving with the adapter answering."""
    if facts.phase == "Serving":
        return bool(facts.inference and facts.inference[0] is True)
    return facts.phase == "Succeeded"


def _inference_ready(facts: Facts) -> tuple[str, bool | None, str, str]:
    if facts.inference is not None:
        return ("InferenceReady", *facts.inference)
    if facts.phase == "Failed" and facts.reason == "InvalidAdapter":  # trained, but its adapter cannot be served
        return ("InferenceReady", False, facts.reason, facts.message)
    if facts.phase == "Failed":
        return ("InferenceReady", False, "TrainingFailed", "training did not produce an adapter to serve")
    return ("InferenceReady", False, "TrainingNotFinished", "the adapter is served once training succeeds")


def _stalled(facts: Facts) -> tuple[str, bool | None, str, str]:
    if facts.phase == "Failed":
        return ("Stalled", True, facts.reason, facts.message)
    if facts.stalled is not None:
        return ("Stalled", True, facts.stalled[0], facts.stalled[1])
    return ("Stalled", False, facts.phase, facts.message)


def _cluster_ready(facts: Facts) -> tuple[str, bool | None, str, str]:
    if facts.cluster_ready:
        return ("ClusterReady", True, "RayClusterReady", "the Ray cluster is ready")
    if facts.pod_problem is not None:
        reason, message = facts.pod_problem
        return ("ClusterReady", facts.cluster_ready, reason, message)
    return ("ClusterReady", facts.cluster_ready, "RayClusterNotReady", "waiting for the Ray cluster")


def compute_conditions(previous: list[Condition], facts: Facts, now: str) -> list[Condition]:
    return conditions_from(previous, _want(facts), facts.generation, now)


Wanted = tuple[str, "bool | None", str, str]  # (type, status: None is Unknown, reason, message)


def conditions_from(previous: list[Condition], wanted: list[Wanted], generation: int, now: str) -> list[Condition]:
    """The conditions `wanted` says, each keeping its lastTransitionTime from `previous` while its status holds."""
    old = {c.type: c for c in previous}
    out: list[Condition] = []
    for ctype, value, reason, message in wanted:
        status = "Unknown" if value is None else ("True" if value else "False")
        before = old.get(ctype)
        since = before.last_transition_time if before and before.status == status else now
        out.append(
            Condition(
                type=ctype,
                status=status,
                reason=reason,
                message=message[:2048],
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return out
