"""`spec.cluster.kueue`, and what Kueue refuses of the RayCluster mmrl builds for it.

With `cluster.kueue` set, the RayCluster carries Kueue's queue-name label, and Kueue's RayCluster webhook checks it
each time the operator creates or updates it: long after `kubectl apply` returned, as an error on an object the
tenant may not be allowed to read. So every rule of that webhook (Kueue v0.17: `validateCreate` and `ValidateUpdate`
in pkg/controller/jobs/raycluster/raycluster_webhook.go, `ValidateJobOnCreate` and `ValidateJobOnUpdate` in
pkg/controller/jobframework/validation.go) that an mmrl spec can break is a rule of the job instead, naming the job's
field: the worker-group count, the reserved pod-set name `head` and the queue name's syntax, at admission (CEL) and in
`mmrl validate`; and, at admission only (a rule between the stored and the new object), when the queue and priority
labels may change. The rules on what mmrl never writes (autoscaling, elastic-job, prebuilt-workload and
maximum-execution-time labels) have no counterpart here.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from mmrl_api.base import ApiModel, cel
from mmrl_api.kube_syntax import DNS_SUBDOMAIN, LABEL_VALUE_MAX
from mmrl_api.rules import Rule, text

# Kueue admits a RayCluster as one Workload, a pod set per Ray group; a Workload holds at most 8 pod sets and the
# head takes one, under this name.
KUEUE_MAX_POD_SETS = 8
KUEUE_MAX_WORKER_GROUPS = KUEUE_MAX_POD_SETS - 1
HEAD_POD_SET = "head"

TOO_MANY_WORKER_GROUPS = (
    f"at most {KUEUE_MAX_WORKER_GROUPS} worker groups with cluster.kueue: Kueue admits the RayCluster as one "
    f"Workload of at most {KUEUE_MAX_POD_SETS} pod sets, and the Ray head takes one"
)
HEAD_NAME_RESERVED = (
    f"a worker group may not be named {HEAD_POD_SET!r} with cluster.kueue: Kueue names the Ray head's pod set so "
    "and refuses the RayCluster; rename the group"
)
QUEUE_NAME = Rule(
    DNS_SUBDOMAIN.regex,
    "must be a DNS subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit): "
    "it names a Kueue LocalQueue, and Kueue refuses a RayCluster whose queue-name label is not one",
)
# Not a webhook rule: Kueue's controller looks the class up by name and creates no Workload while it finds none.
PRIORITY_CLASS = Rule(
    DNS_SUBDOMAIN.regex,
    "must be a DNS subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit): "
    "it names a Kueue WorkloadPriorityClass, and Kueue admits no RayCluster whose priority class it cannot find",
)
# Removing the queue label is refused only under Kueue's manageJobsWithoutQueueName; otherwise it takes a running
# cluster out of its queue's quota accounting, which no tenant should be able to do by editing a job.
QUEUE_FIXED_WHILE_RUNNING = (
    "cluster.kueue.queueName may only be set, changed or removed while spec.suspend is true: Kueue refuses to "
    "set or change the queue of a RayCluster it is running, removing it would take a running cluster out of the "
    "queue's quota, and a suspended job has no RayCluster"
)
PRIORITY_FIXED_WHILE_RUNNING = (
    "cluster.kueue.priorityClass may only be added or removed while spec.suspend is true: Kueue refuses to add a "
    "priority class to a RayCluster it is running or to remove one from it (changing it to another is allowed)"
)


class KueueSpec(ApiModel):
    """Kueue admission (HyperPod task governance); labels go on the RayCluster and every pod template."""

    queue_name: text(LABEL_VALUE_MAX, QUEUE_NAME, min_length=1)  # type: ignore[valid-type]
    """Local queue, e.g. hyperpod-ns-<team>-localqueue: a DNS subdomain of at most 63 characters (it becomes the
    kueue.x-k8s.io/queue-name label, and Kueue reads it as a LocalQueue's name). Changes only while suspended."""
    priority_class: text(LABEL_VALUE_MAX, PRIORITY_CLASS, min_length=1) | None = None  # type: ignore[valid-type]
    """Kueue WorkloadPriorityClass, e.g. training-priority: a DNS subdomain of at most 63 characters (the
    kueue.x-k8s.io/priority-class label, naming the object). Added or removed only while suspended."""


def cluster_rules() -> list[dict[str, str]]:
    """The CEL side of `worker_group_problem`, on spec.cluster (self)."""
    return [
        cel(
            f"!has(self.kueue) || size(self.workerGroups) <= {KUEUE_MAX_WORKER_GROUPS}",
            TOO_MANY_WORKER_GROUPS,
            ".workerGroups",
        ),
        cel(
            f"!has(self.kueue) || self.workerGroups.all(g, g.name != '{HEAD_POD_SET}')",
            HEAD_NAME_RESERVED,
            ".workerGroups",
        ),
    ]


def worker_group_problem(group_names: list[str], kueue: KueueSpec | None) -> str | None:
    """Why Kueue would refuse these worker groups of a job with cluster.kueue, or None."""
    if kueue is None:
        return None
    if len(group_names) > KUEUE_MAX_WORKER_GROUPS:
        return f"{len(group_names)} groups: {TOO_MANY_WORKER_GROUPS}"
    if HEAD_POD_SET in group_names:
        return f"workerGroups[{group_names.index(HEAD_POD_SET)}].name: {HEAD_NAME_RESERVED}"
    return None


def field_error(loc: tuple[str, ...], message: str, value: Any) -> ValidationError:
    """A validation error at `loc` in the model being validated, for a rule a model validator checks across
    fields: the apiserver's CEL rule names the same field through its fieldPath."""
    return field_errors([(loc, message, value)])


def field_errors(found: list[tuple[tuple[str, ...], str, Any]]) -> ValidationError:
    """Several of `field_error` at once, as the apiserver reports every rule that fails."""
    details = [
        InitErrorDetails(type=PydanticCustomError("value_error", "{message}", {"message": m}), loc=loc, input=v)
        for loc, m, v in found
    ]
    return ValidationError.from_exception_data("rules", details)


def _kueue(side: str) -> str:
    return f"has({side}.cluster.kueue)"


def _priority(side: str) -> str:
    return f"({_kueue(side)} && has({side}.cluster.kueue.priorityClass))"


def job_transition_rules() -> list[dict[str, str]]:
    """Transition rules on spec (self: the new spec, oldSelf: the stored one). A suspended job has no RayCluster
    (the operator deletes it), so anything may change then; the next attempt's RayCluster is created anew."""
    same_queue = (
        f"{_kueue('self')} == {_kueue('oldSelf')} && "
        f"(!{_kueue('self')} || self.cluster.kueue.queueName == oldSelf.cluster.kueue.queueName)"
    )
    return [
        cel(f"self.suspend || ({same_queue})", QUEUE_FIXED_WHILE_RUNNING, ".cluster.kueue.queueName"),
        cel(
            f"self.suspend || {_priority('self')} == {_priority('oldSelf')}",
            PRIORITY_FIXED_WHILE_RUNNING,
            ".cluster.kueue.priorityClass",
        ),
    ]
