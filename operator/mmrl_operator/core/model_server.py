"""A ModelServer's pass, decided: which of its children to write and what its status says. Pure, like
`core.decide.decide` for jobs.

The server is Ready when its Deployment is Available at its current generation with every replica updated;
Reconciling while it rolls out; Stalled when it cannot get there by itself: a replica that cannot start (image pull,
crash loop, unschedulable), a roll-out past its progress deadline, or an object under a child's name that the server
does not control (never overwritten).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmrl_api.gateway_contract import DEFAULT_OPERATOR_IMAGE
from mmrl_api.model_server import ModelServer
from mmrl_api.status import Condition
from mmrl_operator.core.builders import model_server as build
from mmrl_operator.core.builders.inference import served_base_name
from mmrl_operator.core.conditions import Wanted, conditions_from
from mmrl_operator.core.serving import deployment_state, out_of_date
from mmrl_operator.core.shape import dig, integer

RESYNC_SECONDS = 30.0  # the operator's resync (MMRL_RESYNC_SECONDS, the chart's resyncSeconds) by default


def wait_interval(resync: float) -> float:
    """How soon a server's pass comes back while a roll-out is pending: 10 s at the default resync."""
    return resync / 3


def steady_interval(resync: float) -> float:
    """How soon once Ready: 60 s at the default resync (every change of a child wakes the server anyway)."""
    return resync * 2


@dataclass(frozen=True)
class ServerObserved:
    """The server's children as the pass sees them (slim copies from the caches)."""

    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    deployment_edited: bool = False  # its spec was changed by someone else since the operator wrote it
    pod_problem: tuple[str, str] | None = None  # (reason, message) of a replica that cannot start
    foreign: tuple[str, ...] = ()  # "Kind name" of objects under a child's name that the server does not control


@dataclass
class ServerPlan:
    apply: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)  # the whole status the operator owns, wire form
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue_after: float | None = None


def generation(server: ModelServer) -> int:
    return integer((server.metadata.model_extra or {}).get("generation"))


def decide_server(
    server: ModelServer,
    observed: ServerObserved,
    now: str,
    gateway_image: str = DEFAULT_OPERATOR_IMAGE,
    resync: float = RESYNC_SECONDS,
) -> ServerPlan:
    """`gateway_image`: the operator's own image, which each replica's gateway runs. `resync`: the operator's, which
    the server's periodic passes follow (a safety net: its children's events and its jobs' reports wake it)."""
    spec = server.spec
    plan = ServerPlan()
    if observed.foreign:
        phase, reason = "Degraded", "NameConflict"
        message = (
            f"{', '.join(observed.foreign)} already exists and is not this server's: delete or rename it; "
            "the operator never overwrites it"
        )
    else:
        deployment, service = build.build_server_deployment(server, gateway_image), build.build_server_service(server)
        if observed.deployment_edited or out_of_date(observed.deployment, deployment):
            plan.apply.append(deployment)
        if out_of_date(observed.service, service):
            plan.apply.append(service)
        if observed.deployment is None:
            plan.events.append(
                ("Normal", "ServerCreated", f"serving {spec.model.name} as {build.server_child_name(server.name)}")
            )
        phase, reason, message = _phase(server, observed)
    previous = server.status.conditions if server.status else []
    wanted: list[Wanted] = [
        ("Ready", phase == "Ready", reason, message),
        ("Reconciling", phase in ("Pending", "Deploying"), reason, message),
        ("Stalled", phase == "Degraded", reason, message),
    ]
    conditions = conditions_from(list(previous), wanted, generation(server), now)
    plan.status = {
        "observedGeneration": generation(server),
        "phase": phase,
        "message": message,
        "conditions": [cd.wire() for cd in conditions],
        "replicas": spec.replicas,
        "readyReplicas": integer(dig(observed.deployment or {}, "status", "readyReplicas")),
        "service": build.server_child_name(server.name),
        "url": build.server_url(server),
        "model": served_base_name(spec.model.name),
    }
    was = server.status.phase if server.status else None
    if was == "Ready" and phase != "Ready":
        plan.events.append(("Warning", "ServerNotReady", message))
    elif phase == "Ready" and was != "Ready":
        plan.events.append(("Normal", "ServerReady", message))
    steady = phase in ("Ready", "ScaledToZero")
    plan.requeue_after = steady_interval(resync) if steady else wait_interval(resync)
    return plan


def _phase(server: ModelServer, observed: ServerObserved) -> tuple[str, str, str]:
    """(phase, reason, message) once the children are the server's."""
    replicas = server.spec.replicas
    if replicas == 0:
        return "ScaledToZero", "ScaledToZero", "spec.replicas is 0"
    available, why = deployment_state(observed.deployment, replicas)
    if available:
        return "Ready", "Available", f"{replicas} of {replicas} replicas serve {server.spec.model.name}"
    if observed.pod_problem is not None:
        return "Degraded", *observed.pod_problem
    if why.startswith("roll-out stalled"):
        return "Degraded", "ProgressDeadlineExceeded", why
    if observed.deployment is None:
        return "Pending", "Creating", why
    return "Deploying", "Deploying", why


def status_changed(stored: dict[str, Any], planned: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that turns the stored status into the planned one, or None when nothing the operator owns
    changed (a steady pass writes nothing)."""
    changed = {k: v for k, v in planned.items() if stored.get(k) != v}
    return changed or None


def condition(status: dict[str, Any], ctype: str) -> Condition | None:
    for cd in status.get("conditions") or []:
        if cd.get("type") == ctype:
            return Condition.model_validate(cd)
    return None
