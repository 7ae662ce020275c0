"""`spec.cluster`: the Ray cluster shape on HyperPod — head, GPU worker groups, scheduling and Kueue.

Deliberately not a PodSpec: the fields are the handful a training job needs, plus `podTemplate`, one small
escape hatch (labels, annotations, pull secrets, scheduler, and a JSON merge patch onto the pod spec). That
keeps the CRD well under the size where client-side apply and Argo CD break.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from mmrl_api.base import PRESERVE_UNKNOWN_KEY, ApiModel, Quantity, cel, cel_rules
from mmrl_api.spec import DNS_LABEL


class Resources(ApiModel):
    """CPU/memory (and other) requests and limits, as in a container's resources."""

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16)


class HeadSpec(ApiModel):
    """The Ray head pod: runs the GCS, the dashboard and the job driver; no GPUs needed."""

    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "4", "memory": "16Gi"}, limits={"memory": "16Gi"})
    )
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=16)
    """Extra node selector for the head, e.g. a CPU instance group."""


class WorkerGroup(ApiModel):
    """A group of identical GPU nodes, one Ray worker pod per node."""

    name: str = Field(default="gpu", min_length=1, max_length=20, pattern=DNS_LABEL)
    """Group name (DNS label, unique in the job)."""
    replicas: int = Field(default=1, ge=1, le=512)
    """Worker pods (one per node). Mutable: changed replicas are applied to the RayCluster."""
    instance_type: str | None = Field(default="ml.p5.48xlarge", max_length=64)
    """HyperPod instance type the pods are pinned to (node.kubernetes.io/instance-type); null to not pin."""
    gpus_per_node: int = Field(default=8, ge=0, le=16)
    """nvidia.com/gpu requested per worker pod."""
    efa_per_node: int = Field(default=0, ge=0, le=32)
    """vpc.amazonaws.com/efa interfaces requested per worker pod (32 on p5.48xlarge)."""
    resources: Resources = Field(default_factory=Resources)
    """CPU/memory requests and limits of the worker container (GPU and EFA come from the fields above)."""
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=16)
    """Extra node selector, e.g. sagemaker.amazonaws.com/instance-group-name."""


class Toleration(ApiModel):
    """A pod toleration, as in a PodSpec."""

    key: str | None = Field(default=None, max_length=253)
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = Field(default=None, max_length=253)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0)


class KueueSpec(ApiModel):
    """Kueue admission (HyperPod task governance); labels go on the RayCluster and every pod template."""

    queue_name: str = Field(min_length=1, max_length=63)
    """Local queue, e.g. hyperpod-ns-<team>-localqueue."""
    priority_class: str | None = Field(default=None, max_length=63)
    """Kueue WorkloadPriorityClass, e.g. training-priority."""


class PodTemplateOverrides(ApiModel):
    """Small escape hatch applied to every Ray pod template (head and workers)."""

    labels: dict[str, str] = Field(default_factory=dict, max_length=32)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=32)
    image_pull_secrets: list[str] = Field(default_factory=list, max_length=8)
    scheduler_name: str | None = Field(default=None, max_length=63)
    spec_patch: dict[str, Any] | None = Field(default=None, json_schema_extra={PRESERVE_UNKNOWN_KEY: True})
    """JSON merge patch (RFC 7386) applied last to each pod spec, for what the fields above do not cover.
    Not validated by the operator: you own what you put here. Clusters may refuse a ServiceAccount, host
    namespaces, hostPath volumes, privileged containers and added capabilities here (the
    mmrl-restrict-spec-patch admission policy)."""


class ClusterSpec(ApiModel):
    """Where and how the Ray cluster runs."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "self.workerGroups.all(g, self.workerGroups.exists_one(h, h.name == g.name))",
                "worker group names must be unique",
                ".workerGroups",
            )
        )
    }

    head: HeadSpec = Field(default_factory=HeadSpec)
    worker_groups: list[WorkerGroup] = Field(default_factory=lambda: [WorkerGroup()], min_length=1, max_length=8)
    """GPU worker groups."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=16)
    """Tolerations for every Ray pod (e.g. for tainted GPU nodes)."""
    priority_class_name: str | None = Field(default=None, max_length=253)
    """Kubernetes PriorityClass of the Ray pods."""
    kueue: KueueSpec | None = None
    """Submit through Kueue (HyperPod task governance)."""
    hyperpod: bool = True
    """HyperPod mode: keep pods off nodes whose node-health-status is not Schedulable and react to HyperPod's
    health labels. Off for plain EKS (NotReady and node deletion are still handled)."""
    ray_version: str = Field(default="2.57.0", pattern=r"^\d+\.\d+\.\d+$")
    """Ray version in the trainer image (KubeRay uses it for compatibility decisions)."""
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
