"""The NetworkPolicy `<name>-ray` that keeps a job's Ray cluster to itself.

Ray authenticates nothing: whoever reaches the head's dashboard (8265) submits jobs that run as the trainer, with its
ServiceAccount, its cloud identity and the checkpoint claim, and whoever reaches GCS (6379), the client port (10001)
or a raylet joins the cluster. KubeRay's head listens on 0.0.0.0 (`dashboard-host`). So every pod of the cluster
(KubeRay's `ray.io/cluster` label) admits, on any port, only the cluster's own pods (GCS, raylets, object managers
and workers use ports Ray picks), and on the dashboard port only KubeRay's submitter pod for this job (labelled by
`rayjob.submitter_template`) and the KubeRay operator (its namespace, and its pods' labels), which asks the
dashboard about each RayJob. The platform's own extra rules (Prometheus on the metrics port, the apiserver's address
when KubeRay runs with `--use-kubernetes-proxy`) are added as given. Egress is left open: the trainer reads models and
data and writes checkpoints and metrics wherever the job says.

The mmrl operator itself never talks to a Ray pod (it reads KubeRay's objects), so nothing is opened for it. A
NetworkPolicy only counts where the cluster's network plugin enforces it (EKS: the VPC CNI's network policy agent);
platforms without one turn it off with the chart's `networkPolicy.enabled`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_operator.core.builders.common import child_metadata
from mmrl_operator.core.names import network_policy_name, raycluster_name

API_VERSION = "networking.k8s.io/v1"
COMPONENT = "network-policy"
DASHBOARD_PORT = 8265  # KubeRay's default dashboard port (ray-operator utils DefaultDashboardPort): the Jobs API
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the apiserver
SETTINGS_ENV = "MMRL_NETWORK_POLICY"  # the chart's `networkPolicy` value, as JSON (templates/deployment.yaml)


class KubeRayPeer(BaseModel):
    """Where the KubeRay operator runs. The defaults are what `helm install kuberay-operator kuberay/kuberay-operator`
    makes in the `default` namespace, as AWS's HyperPod guide installs it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    namespace: str = Field(default="default", min_length=1, max_length=63)
    pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "kuberay-operator"}, alias="podLabels"
    )


class IngressRule(BaseModel):
    """A NetworkPolicyIngressRule, added to every job's policy as given (the apiserver checks the peers and ports)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    from_: list[dict[str, Any]] | None = Field(default=None, alias="from")
    ports: list[dict[str, Any]] | None = None

    def wire(self) -> dict[str, Any]:
        # A JSON round trip copies: no dict is shared between two jobs' policies.
        return json.loads(json.dumps(self.model_dump(by_alias=True, exclude_none=True)))


class NetworkPolicySettings(BaseModel):
    """The platform's choice, from the chart's `networkPolicy` value."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    enabled: bool = True
    kuberay: KubeRayPeer = Field(default_factory=KubeRayPeer)
    extra_ingress: list[IngressRule] = Field(default_factory=list, alias="extraIngress")

    @classmethod
    def from_json(cls, text: str | None) -> NetworkPolicySettings:
        """Parse the operator's SETTINGS_ENV; unset or empty is the defaults. Raises ValueError naming the field."""
        if not text:
            return cls()
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError) as err:
            raise ValueError(f"{SETTINGS_ENV} (the chart's networkPolicy value): {err}") from err


def _kuberay(peer: KubeRayPeer) -> dict[str, Any]:
    out: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: peer.namespace}}}
    if peer.pod_labels:
        out["podSelector"] = {"matchLabels": dict(peer.pod_labels)}
    return out


def build_network_policy(job: MultimodalRLJob, settings: NetworkPolicySettings) -> dict[str, Any] | None:
    """The job's NetworkPolicy, or None when the platform turned them off."""
    if not settings.enabled:
        return None
    cluster = {c.RAY_CLUSTER_LABEL: raycluster_name(job.name)}
    submitter = {"podSelector": {"matchLabels": {c.LABEL_RAY_SUBMITTER: job.name}}}
    ingress = [
        {"from": [{"podSelector": {"matchLabels": dict(cluster)}}]},
        {"from": [submitter, _kuberay(settings.kuberay)], "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]},
        *(rule.wire() for rule in settings.extra_ingress),
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": child_metadata(job, network_policy_name(job.name), COMPONENT),
        "spec": {"podSelector": {"matchLabels": cluster}, "policyTypes": ["Ingress"], "ingress": ingress},
    }
