"""`spec.cluster`: the Ray cluster shape on HyperPod — head, GPU worker groups, scheduling and Kueue.

Deliberately not a PodSpec: the fields are the handful a training job needs, plus `podTemplate`, one small
escape hatch (labels, annotations, pull secrets, scheduler, and a JSON merge patch onto the pod spec). That
keeps the CRD well under the size where client-side apply and Argo CD break.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mmrl_api import constants as c
from mmrl_api import hardware
from mmrl_api.base import PRESERVE_UNKNOWN_KEY, ApiModel, cel, cel_rules
from mmrl_api.constants import TRAINER_RAY_VERSION
from mmrl_api.kube_syntax import (
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    LabelValue,
    ObjectName,
    QualifiedName,
    annotation_map,
    label_map,
    resource_map,
)
from mmrl_api.kueue import KueueSpec, cluster_rules, field_error, worker_group_problem
from mmrl_api.kueue_topology import annotation_problem, annotation_rules, group_problem, group_rule
from mmrl_api.rules import Rule, text


class Resources(ApiModel):
    """CPU/memory (and other) requests and limits, as in a container's resources."""

    requests: resource_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]
    limits: resource_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]


class HeadSpec(ApiModel):
    """The Ray head pod: runs the GCS, the dashboard and the job driver; no GPUs needed."""

    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "4", "memory": "16Gi"}, limits={"memory": "16Gi"})
    )
    node_selector: label_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]
    """Extra node selector for the head, e.g. a CPU instance group."""


MAX_REPLICAS = 512
MAX_WORKER_GROUPS = 8
MAX_JOB_PODS = 1 + MAX_REPLICAS * MAX_WORKER_GROUPS
"""The most Ray pods one job can have (a head and every worker)."""


MAX_GROUP_NAME = 20
InstanceTypeName: Any = text(
    LABEL_VALUE_MAX, LABEL_VALUE, *hardware.NAME_RULES, min_length=1, hint=hardware.did_you_mean
)
"""A node.kubernetes.io/instance-type value that `hardware.NAME_RULES` allows."""


GROUP_NAME_RULE = Rule(
    "^[a-z0-9]+$",
    "must be lowercase letters and digits only, without dashes (e.g. gpu, p5, g6e): the name is part of the Ray "
    "worker pods' names, from which admission tells this job's pods from another job's",
)
GroupName: Any = text(MAX_GROUP_NAME, GROUP_NAME_RULE, min_length=1)
"""A worker group's name."""


class WorkerGroup(ApiModel):
    """A group of identical GPU nodes, one Ray worker pod per node (pods that ask for fewer GPUs than a node has may
    share one)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            *(cel(r, m, path, message_expression=e) for r, m, path, e in hardware.group_rules())
        )
    }

    name: GroupName = "gpu"  # type: ignore[valid-type]
    """Group name: lowercase letters and digits (no dashes), unique in the job. It is part of the Ray worker pods'
    names, from which admission tells one job's trainer from another's."""
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Worker pods (one per node). Mutable: changed replicas are applied to the RayCluster."""
    instance_type: InstanceTypeName | None = "ml.p5.48xlarge"  # type: ignore[valid-type]
    """Instance type the pods are pinned to (node.kubernetes.io/instance-type), e.g. ml.g6e.12xlarge: on HyperPod
    it starts with 'ml.' (plain EKS, hyperpod: false, names it as EC2 does, g6e.12xlarge), and in a GPU family mmrl
    knows (p4d, p4de, p5, p5e, p5en, p6-b200, g5, g6, g6e, g7e) it must be one of the sizes mmrl knows. A type mmrl
    does not know needs gpusPerNode."""
    gpus_per_node: int | None = Field(default=None, ge=0, le=hardware.MAX_GPUS_PER_NODE)
    """nvidia.com/gpu requested per worker pod. Unset: every GPU of instanceType (mmrl's table, e.g. 4 on
    ml.g6e.12xlarge); required for an instance type not in that table. At most the type's GPUs; fewer lets pods
    share a node. 0 runs the workers without GPUs (the local backend on CPU)."""
    efa_per_node: int = Field(default=0, ge=0, le=32)
    """vpc.amazonaws.com/efa interfaces requested per worker pod (32 on p5.48xlarge)."""
    resources: Resources = Field(default_factory=Resources)
    """CPU/memory requests and limits of the worker container (GPU and EFA come from the fields above)."""
    node_selector: label_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]
    """Extra node selector, e.g. sagemaker.amazonaws.com/instance-group-name."""

    @property
    def gpus(self) -> int:
        """The GPUs each worker pod requests: gpusPerNode, else all of the instance type's."""
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        return hardware.table_gpus(self.instance_type) or 0

    @model_validator(mode="after")
    def _fits_the_instance_type(self) -> WorkerGroup:
        """The Python side of `hardware.group_rules`."""
        problem = hardware.gpu_count_problem(self.instance_type, self.gpus_per_node)
        if problem is not None:
            raise field_error(("gpus_per_node",), problem, self.gpus_per_node)
        return self


KEY_NEEDS_EQUAL = "operator must be Exists when key is empty (a toleration of every taint)"
EXISTS_HAS_NO_VALUE = "must be empty when operator is Exists"
SECONDS_NEED_NO_EXECUTE = "may only be set when effect is NoExecute"
# HyperPod taints a node it is checking, rebooting or replacing; a pod that tolerates the taint can land there.
NO_HEALTH_TAINT = (
    f"must not be {c.HYPERPOD_TAINT_KEY}: HyperPod puts that taint on nodes it is checking, rebooting or replacing, "
    "and training pods must stay off them"
)
NO_MATCH_ALL = (
    "must not be Exists with an empty key: that tolerates every taint, HyperPod's "
    f"{c.HYPERPOD_TAINT_KEY} taint on nodes it is checking, rebooting or replacing included; name the taint's key"
)


def tolerates_health_taint(toleration: dict[str, Any]) -> bool:
    """Whether a pod toleration (wire form) would let the pod onto a node carrying HyperPod's health taint: one
    naming the taint's key, or one with no key and operator Exists, which tolerates every taint."""
    key = toleration.get("key") or ""
    return key == c.HYPERPOD_TAINT_KEY or (not key and toleration.get("operator") == "Exists")


class Toleration(ApiModel):
    """A pod toleration, checked as the apiserver checks a PodSpec's."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel("self.operator == 'Exists' || (has(self.key) && self.key != '')", KEY_NEEDS_EQUAL, ".operator"),
            cel(
                "self.operator != 'Exists' || (has(self.key) && self.key != '')",
                f"operator {NO_MATCH_ALL}",
                ".operator",
            ),
            cel(f"!has(self.key) || self.key != '{c.HYPERPOD_TAINT_KEY}'", f"key {NO_HEALTH_TAINT}", ".key"),
            cel(
                "self.operator != 'Exists' || !has(self.value) || self.value == ''",
                f"value {EXISTS_HAS_NO_VALUE}",
                ".value",
            ),
            cel(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                f"tolerationSeconds {SECONDS_NEED_NO_EXECUTE}",
                ".tolerationSeconds",
            ),
        )
    }

    key: QualifiedName | None = None  # type: ignore[valid-type]
    """The taint key (a qualified name). Required, and never HyperPod's node-health-status taint: a toleration of
    every taint, or of that one, would let pods onto nodes HyperPod is checking, rebooting or replacing."""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None  # type: ignore[valid-type]
    """The taint value for operator Equal (a label value)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    """The taint effect to match; empty matches every effect."""
    toleration_seconds: int | None = Field(default=None, ge=0, le=31_536_000)
    """With effect NoExecute: how long the pod stays bound after the taint appears."""

    @field_validator("key")
    @classmethod
    def _not_the_health_taint(cls, key: str | None) -> str | None:
        if key == c.HYPERPOD_TAINT_KEY:
            raise ValueError(f"{key!r} {NO_HEALTH_TAINT}")
        return key

    @field_validator("operator")
    @classmethod
    def _key_or_exists(cls, operator: str, info: ValidationInfo) -> str:
        if operator != "Exists" and not info.data.get("key") and "key" in info.data:
            raise ValueError(KEY_NEEDS_EQUAL)
        if operator == "Exists" and not info.data.get("key") and "key" in info.data:
            raise ValueError(NO_MATCH_ALL)
        return operator

    @field_validator("value")
    @classmethod
    def _no_value_with_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value and info.data.get("operator") == "Exists":
            raise ValueError(f"{value!r} {EXISTS_HAS_NO_VALUE}")
        return value

    @field_validator("toleration_seconds")
    @classmethod
    def _seconds_with_no_execute(cls, seconds: int | None, info: ValidationInfo) -> int | None:
        if seconds is not None and "effect" in info.data and info.data["effect"] != "NoExecute":
            raise ValueError(f"{seconds} {SECONDS_NEED_NO_EXECUTE}")
        return seconds


class PodTemplateOverrides(ApiModel):
    """Small escape hatch applied to every Ray pod template (head and workers)."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_rules(*annotation_rules())}

    labels: label_map(32) = Field(default_factory=dict)  # type: ignore[valid-type]
    """Labels for every Ray pod (qualified-name keys, label values)."""
    annotations: annotation_map() = Field(default_factory=dict)  # type: ignore[valid-type]
    """Annotations for every Ray pod (qualified-name keys; at most 32, 4096 characters each). Kueue's
    topology annotations (kueue.x-k8s.io/podset-*) are checked as Kueue checks them on each Ray group."""
    image_pull_secrets: list[ObjectName] = Field(default_factory=list, max_length=8)  # type: ignore[valid-type]
    scheduler_name: str | None = Field(default=None, max_length=63)
    spec_patch: dict[str, Any] | None = Field(default=None, json_schema_extra={PRESERVE_UNKNOWN_KEY: True})
    """JSON merge patch (RFC 7386) applied last to each pod spec, for what the fields above do not cover.
    Not validated by the operator, except that its tolerations may not tolerate HyperPod's node-health-status
    taint (the job is then InvalidSpec): you own what you put here. The pods' ServiceAccount (the namespace's
    mmrl-trainer) and its token are set after the patch. Clusters may refuse a ServiceAccount, host namespaces,
    hostPath volumes, privileged containers and added capabilities here (the mmrl-restrict-spec-patch admission
    policy)."""

    @field_validator("annotations")
    @classmethod
    def _kueue_reads_the_topology(cls, annotations: dict[str, str]) -> dict[str, str]:
        """The Python side of `kueue_topology.annotation_rules`."""
        problem = annotation_problem(annotations)
        if problem is not None:
            raise ValueError(problem)
        return annotations

    @field_validator("spec_patch")
    @classmethod
    def _no_health_taint_toleration(cls, patch: dict[str, Any] | None) -> dict[str, Any] | None:
        tolerations = (patch or {}).get("tolerations")
        for i, toleration in enumerate(tolerations if isinstance(tolerations, list) else []):
            if isinstance(toleration, dict) and tolerates_health_taint(toleration):
                raise ValueError(f"tolerations[{i}] {NO_HEALTH_TAINT} (a toleration of every taint counts too)")
        return patch


class ClusterSpec(ApiModel):
    """Where and how the Ray cluster runs."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "self.workerGroups.all(g, self.workerGroups.exists_one(h, h.name == g.name))",
                "worker group names must be unique",
                ".workerGroups",
            ),
            *cluster_rules(),
            group_rule(),
            cel(*hardware.cluster_rule()),
        )
    }

    head: HeadSpec = Field(default_factory=HeadSpec)
    worker_groups: list[WorkerGroup] = Field(
        default_factory=lambda: [WorkerGroup()], min_length=1, max_length=MAX_WORKER_GROUPS
    )
    """GPU worker groups."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=16)
    """Tolerations for every Ray pod (e.g. for tainted GPU nodes)."""
    priority_class_name: ObjectName | None = None  # type: ignore[valid-type]
    """Kubernetes PriorityClass of the Ray pods."""
    kueue: KueueSpec | None = None
    """Submit through Kueue (HyperPod task governance)."""
    hyperpod: bool = True
    """HyperPod mode: keep pods off nodes whose node-health-status is not Schedulable and react to HyperPod's
    health labels. Off for plain EKS (NotReady and node deletion are still handled)."""
    ray_version: str = Field(default=TRAINER_RAY_VERSION, max_length=32, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    """Ray version in the trainer image (KubeRay uses it for compatibility decisions). The default is the Ray of
    mmrl's trainer image (SkyRL 0.3.0's); set it when your image runs another Ray."""
    pod_template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)

    @field_validator("worker_groups")
    @classmethod
    def _unique_group_names(cls, groups: list[WorkerGroup]) -> list[WorkerGroup]:
        seen: set[str] = set()
        for g in groups:
            if g.name in seen:
                raise ValueError(f"worker group name {g.name!r} is used twice; names must be unique")
            seen.add(g.name)
        return groups

    @model_validator(mode="after")
    def _kueue_accepts_the_groups(self) -> ClusterSpec:
        """The Python side of `kueue.cluster_rules` and `kueue_topology.group_rule` (kueue and podTemplate are
        validated after worker_groups)."""
        problem = worker_group_problem([g.name for g in self.worker_groups], self.kueue)
        if problem is not None:
            raise field_error(("worker_groups",), problem, [g.wire() for g in self.worker_groups])
        annotations = self.pod_template.annotations
        problem = group_problem(annotations, len(self.worker_groups))
        if problem is not None:
            raise field_error(("pod_template", "annotations"), problem, annotations)
        return self

    @model_validator(mode="after")
    def _hyperpod_names_its_instance_types(self) -> ClusterSpec:
        """The Python side of `hardware.cluster_rule` (hyperpod is validated after worker_groups)."""
        problem = hardware.hyperpod_name_problem([g.instance_type for g in self.worker_groups], self.hyperpod)
        if problem is not None:
            raise field_error(("worker_groups",), problem, [g.wire() for g in self.worker_groups])
        return self
