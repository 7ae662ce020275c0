"""A worker group's hardware: which instance type it names, and how many GPUs its pods ask of one node.

`gpusPerNode` defaults to the GPUs of the instance type (the table in `gpus.py`), so a job never asks for 8 GPUs on
a 4-GPU node by default, and an explicit count above the node's is refused: such a pod is never scheduled. A count
below it is allowed: pods of a group then share a node, as GPU quotas of HyperPod task governance are counted in
GPUs (the benchmarks pack eight 1-GPU jobs on one p5).

The instance type is checked against the table where a typo is likely and a rule can be written in CEL, so the
apiserver and `mmrl validate` refuse the same names:
- on HyperPod (`cluster.hyperpod`, the default) every instance type starts with `ml.`: HyperPod labels its nodes
  `node.kubernetes.io/instance-type: ml.p5.48xlarge`, so `p5.48xlarge` would match no node and the pods would stay
  Pending. Refused, unless the job runs on plain EKS (`hyperpod: false`), whose nodes carry EC2's name;
- a name in a GPU family the table knows (`ml.g6e.*`) but not one of its sizes is most likely a typo of one
  (`ml.g6e.12xlarg`): refused;
- any other name (a family the table does not have yet: HyperPod adds instance types faster than mmrl releases, or
  a CPU instance) is allowed, but only with an explicit `gpusPerNode`, since nothing else says how many GPUs it has.
Closeness (difflib) cannot be written in CEL, so it never decides a verdict: it only adds "did you mean" to the
messages `mmrl validate` and the operator print, and to the note `mmrl validate` prints for an unknown name.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from mmrl_api.gpus import HYPERPOD_PREFIX, INSTANCE_TYPES, instance_gpu
from mmrl_api.rules import Rule, cel_str

SHORT_NAMES = sorted(name.removeprefix(HYPERPOD_PREFIX) for name in INSTANCE_TYPES)
"""The table's instance types as EC2 names them (`p5.48xlarge`)."""
FAMILIES = sorted({name.split(".")[0] for name in SHORT_NAMES})
"""The GPU instance families of the table (`p5`, `g6e`, ...)."""


def _alternatives(names: list[str]) -> str:
    return "|".join(n.replace(".", r"\.") for n in names)


KNOWN_FAMILY = rf"^(ml\.)?({_alternatives(FAMILIES)})\."
KNOWN_SIZE = Rule(
    rf"^(ml\.)?({_alternatives(SHORT_NAMES)})$",
    "is not a size mmrl knows of its GPU instance family, so no node would match (docs/memory-plan.md lists the "
    "known sizes; report one that is missing there)",
    only_if=KNOWN_FAMILY,
)
NAME_RULES = (KNOWN_SIZE,)
MAX_GPUS_PER_NODE = 16
NOT_HYPERPOD = (
    "is not a SageMaker HyperPod instance type: HyperPod's names start with 'ml.' (ml.p5.48xlarge, not "
    "p5.48xlarge) and its nodes carry that name in node.kubernetes.io/instance-type, so no node would match"
)
PLAIN_EKS = "on plain EKS, whose nodes carry EC2's name, set cluster.hyperpod: false"


def closest(name: str, *, prefixed: bool | None = None) -> str | None:
    """The known instance type `name` most likely means, or None when none is close: in HyperPod's form
    (`ml.`) when `prefixed`, in EC2's when not, and in the form `name` has when None."""
    lowered = name.strip().lower()
    short = lowered.removeprefix(HYPERPOD_PREFIX)
    matches = [short] if short in SHORT_NAMES else difflib.get_close_matches(short, SHORT_NAMES, n=1, cutoff=0.8)
    if not matches:
        return None
    with_prefix = lowered.startswith(HYPERPOD_PREFIX) if prefixed is None else prefixed
    return HYPERPOD_PREFIX + matches[0] if with_prefix else matches[0]


def did_you_mean(name: str, *, prefixed: bool | None = None) -> str:
    """ "; did you mean X?" for a refused instance type, or nothing when no known type is close."""
    found = closest(name, prefixed=prefixed)
    return f"; did you mean {found}?" if found else ""


def known(instance_type: str | None) -> bool:
    return instance_gpu(instance_type) is not None


def table_gpus(instance_type: str | None) -> int | None:
    """The GPUs per node of a known instance type; None for an unknown or unset one."""
    found = instance_gpu(instance_type)
    return found.gpus if found is not None else None


def too_many(gpus: int, instance_type: str, has: int) -> str:
    return (
        f"{gpus} is more than {instance_type} has ({has} GPUs per node): a worker pod asking for {gpus} is never "
        f"scheduled; leave gpusPerNode unset to use all {has}"
    )


def needs_count(instance_type: str | None) -> str:
    if instance_type is None:
        return "required when instanceType is not set: say how many GPUs each worker pod requests"
    hint = closest(instance_type)
    return (
        f"required: {instance_type} is not in mmrl's table of GPU instance types, so say how many GPUs each worker "
        "pod requests (0 for a CPU instance)" + (f"; or did you mean {hint}?" if hint else "")
    )


def gpu_count_problem(instance_type: str | None, gpus_per_node: int | None) -> str | None:
    """Why a worker group's gpusPerNode cannot be right for its instance type (the Python side of
    `group_rules`), or None. The name's own rules (`NAME_RULES`) are checked before."""
    has = table_gpus(instance_type)
    if gpus_per_node is None:
        return needs_count(instance_type) if has is None else None
    if has is not None and instance_type is not None and gpus_per_node > has:
        return too_many(gpus_per_node, instance_type, has)
    return None


def hyperpod_name_problem(instance_types: Sequence[str | None], hyperpod: bool) -> str | None:
    """Why a HyperPod job's worker groups name no HyperPod instance type (the Python side of `cluster_rule`), or
    None; the first group's problem, with its index, as the apiserver's rule on the list reports it."""
    for i, name in enumerate(instance_types):
        if hyperpod and name is not None and not name.startswith(HYPERPOD_PREFIX):
            hint = did_you_mean(name, prefixed=True)
            return f"workerGroups[{i}].instanceType: {name!r} {NOT_HYPERPOD} ({PLAIN_EKS}){hint}"
    return None


def cel_table() -> str:
    """The table's GPUs per node as a CEL map literal, keyed by EC2's names (see `_cel_key`)."""
    return "{" + ", ".join(f"'{name}': {table_gpus(name)}" for name in SHORT_NAMES) + "}"


def _cel_key(group: str) -> str:
    """CEL for a group's instance type as `cel_table` keys it: without HyperPod's `ml.`."""
    t = f"{group}.instanceType"
    return f"({t}.startsWith('{HYPERPOD_PREFIX}') ? {t}.substring({len(HYPERPOD_PREFIX)}) : {t})"


def cel_gpus_at_least_one(group: str) -> str:
    """CEL for a worker group's GPUs per node (`group` is its CEL expression), at least 1: the explicit count, else
    the table's. An unknown type without a count reads 1 here (`group_rules` refuses it)."""
    return (
        f"(has({group}.gpusPerNode) ? ({group}.gpusPerNode > 0 ? {group}.gpusPerNode : 1) : "
        f"(has({group}.instanceType) ? {cel_table()}[?{_cel_key(group)}].orValue(1) : 1))"
    )


def group_rules() -> list[tuple[str, str, str, str]]:
    """(rule, message, fieldPath, messageExpression) on a worker group (self): the CEL side of
    `gpu_count_problem`. A name that breaks `NAME_RULES` is reported there, not again here."""
    table, key = cel_table(), _cel_key("self")
    # CEL's cost estimate takes string(int) to be as long as a request can be, and a message quoting it is then
    # refused as too costly; indexing a list of the literal numbers has a bounded size.
    digits = "[" + ", ".join(f"'{n}'" for n in range(MAX_GPUS_PER_NODE + 1)) + "]"
    known_type = f"has(self.instanceType) && {key} in {table}"
    count = f"{table}[{key}]"
    return [
        (
            f"!has(self.gpusPerNode) || !({known_type}) || self.gpusPerNode <= {count}",
            "gpusPerNode is more than the instance type has: a worker pod asking for it is never scheduled; leave "
            "it unset to use all the node's GPUs",
            ".gpusPerNode",
            f"{digits}[self.gpusPerNode] + ' is more than ' + self.instanceType + ' has (' + {digits}[{count}] "
            f"+ ' GPUs per node): a worker pod asking for ' + {digits}[self.gpusPerNode] + ' is never scheduled; "
            f"leave gpusPerNode unset to use all ' + {digits}[{count}]",
        ),
        (
            f"has(self.gpusPerNode) || ({known_type}) || "
            f"(has(self.instanceType) && self.instanceType.matches({cel_str(KNOWN_FAMILY)}))",
            "gpusPerNode is required: instanceType is not in mmrl's table of GPU instance types, so say how many GPUs "
            "each worker pod requests (0 for a CPU instance)",
            ".gpusPerNode",
            "'required: ' + self.instanceType + ' is not in mmrl\\'s table of GPU instance types, so say how many "
            "GPUs each worker pod requests (0 for a CPU instance)'",
        ),
    ]


def cluster_rule() -> tuple[str, str, str]:
    """(rule, message, fieldPath) on spec.cluster (self): the CEL side of `hyperpod_name_problem`."""
    hyperpod = "(!has(self.hyperpod) || self.hyperpod)"
    names = f"self.workerGroups.all(g, !has(g.instanceType) || g.instanceType.startsWith('{HYPERPOD_PREFIX}'))"
    return f"!{hyperpod} || {names}", f"every instanceType {NOT_HYPERPOD} ({PLAIN_EKS})", ".workerGroups"
