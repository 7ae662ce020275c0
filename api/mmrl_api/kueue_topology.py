"""Kueue's topology-aware-scheduling annotations in `spec.cluster.podTemplate.annotations`, checked as Kueue does.

mmrl copies the pod template's annotations onto the head's template and every worker group's, and Kueue reads
`kueue.x-k8s.io/podset-*` annotations on a RayCluster's templates as each pod set's topology request. Kueue's
RayCluster webhook (v0.17, `validateTopologyRequest` in pkg/controller/jobs/raycluster/raycluster_webhook.go, with
`ValidateTASPodSetRequest`, `ValidateSliceSizeAnnotationUpperBound` and `ValidatePodSetGroupingTopology` in
pkg/controller/jobframework/tas_validation.go; TopologyAwareScheduling is on by default) refuses a RayCluster whose
annotations break these rules, whether or not it carries a queue label. Two rules follow from the copying: the head
is a pod set of one pod, so no slice may be larger than 1; and a pod-set group holds exactly 2 pod sets, so a
group name on every template allows one worker group only. Each rule is written once, for CEL and for Python.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mmrl_api.base import cel
from mmrl_api.kube_syntax import QUALIFIED_NAME
from mmrl_api.rules import Rule, broken, cel_str

KUEUE = "kueue.x-k8s.io/"
REQUIRED = KUEUE + "podset-required-topology"
PREFERRED = KUEUE + "podset-preferred-topology"
UNCONSTRAINED = KUEUE + "podset-unconstrained-topology"
SLICE_REQUIRED = KUEUE + "podset-slice-required-topology"
SLICE_SIZE = KUEUE + "podset-slice-size"
SLICE_CONSTRAINTS = KUEUE + "podset-slice-required-topology-constraints"
GROUP_NAME = KUEUE + "podset-group-name"
# What Go's strconv.ParseBool accepts.
GO_BOOLS = ("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False")
# strconv.ParseInt(v, 10, 32) of exactly 1: an optional '+', leading zeros.
SLICE_OF_ONE = Rule(r"^[+]?0*1$", "")
# A group name Kueue reads as a number (strconv.ParseUint); all-digit names beyond 2^64 count here too.
NOT_A_NUMBER = Rule(r"^[0-9]+$", "", must_match=False)
A = "self.annotations"


@dataclass(frozen=True)
class AnnotationRule:
    """One rule on the annotation map: as CEL over `self.annotations`, and as a Python predicate."""

    cel: str
    holds: Callable[[Mapping[str, str]], bool]
    message: str


def _has(key: str) -> str:
    return f"{cel_str(key)} in {A}"


def _value(key: str) -> str:
    return f"{A}[{cel_str(key)}]"


def _label_name_rule(key: str) -> AnnotationRule:
    test = " && ".join(rule.cel(_value(key)) for rule in QUALIFIED_NAME)
    return AnnotationRule(
        f"!({_has(key)}) || ({test})",
        lambda a: key not in a or broken(a[key], QUALIFIED_NAME) is None,
        f"{key} must name a node label (a qualified name such as topology.k8s.aws/network-node-layer-1)",
    )


TOPOLOGY_KEYS = (REQUIRED, PREFERRED, UNCONSTRAINED)
RULES = (
    AnnotationRule(
        f"size([{', '.join(cel_str(k) for k in TOPOLOGY_KEYS)}].filter(k, k in {A})) <= 1",
        lambda a: sum(k in a for k in TOPOLOGY_KEYS) <= 1,
        f"at most one of {', '.join(TOPOLOGY_KEYS)}",
    ),
    _label_name_rule(REQUIRED),
    _label_name_rule(PREFERRED),
    _label_name_rule(SLICE_REQUIRED),
    AnnotationRule(
        f"!({_has(UNCONSTRAINED)}) || {_value(UNCONSTRAINED)} in [{', '.join(cel_str(b) for b in GO_BOOLS)}]",
        lambda a: UNCONSTRAINED not in a or a[UNCONSTRAINED] in GO_BOOLS,
        f"{UNCONSTRAINED} must be true or false",
    ),
    AnnotationRule(
        f"({_has(SLICE_REQUIRED)}) == ({_has(SLICE_SIZE)})",
        lambda a: (SLICE_REQUIRED in a) == (SLICE_SIZE in a),
        f"{SLICE_REQUIRED} and {SLICE_SIZE} go together: set both or neither",
    ),
    AnnotationRule(
        f"!({_has(SLICE_SIZE)}) || {SLICE_OF_ONE.cel(_value(SLICE_SIZE))}",
        lambda a: SLICE_SIZE not in a or SLICE_OF_ONE.holds(a[SLICE_SIZE]),
        f"{SLICE_SIZE} must be 1: the annotation goes on the Ray head's template too, a pod set of one pod, and "
        "Kueue refuses a slice larger than its pod set",
    ),
    AnnotationRule(
        f"!({_has(SLICE_CONSTRAINTS)})",
        lambda a: SLICE_CONSTRAINTS not in a,
        f"{SLICE_CONSTRAINTS} needs Kueue's alpha TASMultiLayerTopology feature gate, off by default; use "
        f"{SLICE_REQUIRED} and {SLICE_SIZE}",
    ),
    AnnotationRule(
        f"!({_has(GROUP_NAME)}) || {NOT_A_NUMBER.cel(_value(GROUP_NAME))}",
        lambda a: GROUP_NAME not in a or NOT_A_NUMBER.holds(a[GROUP_NAME]),
        f"{GROUP_NAME} must not be a number",
    ),
    AnnotationRule(
        f"!({_has(GROUP_NAME)}) || ((({_has(REQUIRED)}) || ({_has(PREFERRED)})) && !({_has(SLICE_SIZE)})"
        f" && !({_has(SLICE_REQUIRED)}))",
        lambda a: (
            GROUP_NAME not in a or ((REQUIRED in a or PREFERRED in a) and not {SLICE_SIZE, SLICE_REQUIRED} & a.keys())
        ),
        f"{GROUP_NAME} needs {REQUIRED} or {PREFERRED}, and no slice annotations",
    ),
)
GROUP_NEEDS_ONE_WORKER_GROUP = (
    f"{GROUP_NAME} allows one worker group only: the annotation goes on the Ray head's template and every worker "
    "group's, and Kueue groups exactly 2 pod sets"
)


def annotation_rules() -> list[dict[str, str]]:
    """The CEL side of `annotation_problem`, on spec.cluster.podTemplate (self)."""
    return [cel(f"!has({A}) || ({rule.cel})", rule.message, ".annotations") for rule in RULES]


def annotation_problem(annotations: Mapping[str, str]) -> str | None:
    """The first of Kueue's topology rules these pod-template annotations break, or None."""
    return next((rule.message for rule in RULES if not rule.holds(annotations)), None)


def group_rule() -> dict[str, str]:
    """The CEL side of `group_problem`, on spec.cluster (self)."""
    annotations = "self.podTemplate.annotations"
    return cel(
        f"!has(self.podTemplate) || !has({annotations}) || !({cel_str(GROUP_NAME)} in {annotations})"
        " || size(self.workerGroups) == 1",
        GROUP_NEEDS_ONE_WORKER_GROUP,
        ".podTemplate.annotations",
    )


def group_problem(annotations: Mapping[str, str], worker_groups: int) -> str | None:
    return GROUP_NEEDS_ONE_WORKER_GROUP if GROUP_NAME in annotations and worker_groups != 1 else None
