"""The job's NetworkPolicy: its Ray pods admit the cluster's own pods on every port and, on the dashboard port only,
the job's submitter and KubeRay; the platform's settings come from the chart's value; the decision applies the
policy before the RayCluster and again whenever the RayCluster is written."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from mmrl_api import JobStatus
from mmrl_api import constants as c
from mmrl_operator.codegen.chart import CHART_DIR
from mmrl_operator.core.builders.network_policy import (
    SETTINGS_ENV,
    KubeRayPeer,
    NetworkPolicySettings,
    build_network_policy,
)
from mmrl_operator.core.builders.raycluster import SPEC_HASH_ANNOTATION, build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed
from tests.support.factories import T0, job, raycluster, rayjob

PROMETHEUS = {"from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}], "ports": [{"port": 8080}]}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A matchLabels selector's verdict on a pod's labels (the only form the policy uses)."""
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def policy(settings: NetworkPolicySettings | None = None) -> dict[str, Any]:
    built = build_network_policy(job(), settings or NetworkPolicySettings())
    assert built is not None
    return built


def kuberay_pod_labels(cluster: str, node_type: str) -> dict[str, str]:
    """What KubeRay v1.5 puts on a Ray pod besides the template's labels (ray-operator utils/constant.go)."""
    return {c.RAY_CLUSTER_LABEL: cluster, "ray.io/node-type": node_type, "ray.io/is-ray-node": "yes"}


def test_every_ray_pod_of_the_job_is_selected_and_admits_its_own_cluster_on_every_port() -> None:
    p = policy()
    assert p["metadata"]["name"] == "geo-ray" and p["metadata"]["labels"][c.LABEL_JOB] == "geo"
    assert p["metadata"]["ownerReferences"][0]["kind"] == c.KIND
    assert p["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: models, data, checkpoints, metrics
    rc = build_raycluster(job())
    templates = [rc["spec"]["headGroupSpec"]["template"], *(g["template"] for g in rc["spec"]["workerGroupSpecs"])]
    for template, node_type in zip(templates, ["head", "worker"], strict=True):
        labels = {**template["metadata"]["labels"], **kuberay_pod_labels("geo", node_type)}
        assert selects(p["spec"]["podSelector"], labels)
    assert not selects(p["spec"]["podSelector"], kuberay_pod_labels("other-job", "head"))
    own, dashboard = p["spec"]["ingress"]
    assert "ports" not in own and own["from"] == [{"podSelector": p["spec"]["podSelector"]}]
    assert own["from"][0]["podSelector"] is not p["spec"]["podSelector"]  # no YAML anchor in `mmrl render`
    assert dashboard["ports"] == [{"protocol": "TCP", "port": 8265}]


def test_the_dashboard_admits_the_jobs_submitter_pod_and_the_kuberay_operator_only() -> None:
    submitter, kuberay = policy()["spec"]["ingress"][1]["from"]
    template = build_rayjob(job(), 1)["spec"]["submitterPodTemplate"]
    assert selects(submitter["podSelector"], template["metadata"]["labels"])
    other_jobs = build_rayjob(job(name="other"), 1)["spec"]["submitterPodTemplate"]["metadata"]["labels"]
    assert not selects(submitter["podSelector"], other_jobs)
    assert "namespaceSelector" not in submitter  # the job's own namespace
    assert kuberay == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
    }


def test_kuberay_elsewhere_and_the_platforms_extra_rules_come_from_the_settings() -> None:
    settings = NetworkPolicySettings(
        kuberay=KubeRayPeer(namespace="ray-system", podLabels={}), extraIngress=[PROMETHEUS]
    )
    ingress = policy(settings)["spec"]["ingress"]
    assert ingress[1]["from"][1] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}}
    }
    assert ingress[2] == PROMETHEUS
    assert ingress[2] is not policy(settings)["spec"]["ingress"][2]  # each job's policy has its own copy
    assert build_network_policy(job(), NetworkPolicySettings(enabled=False)) is None


def test_the_charts_default_value_is_the_operators_default() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["networkPolicy"]
    assert NetworkPolicySettings.from_json(json.dumps(values)) == NetworkPolicySettings()
    assert NetworkPolicySettings.from_json(None) == NetworkPolicySettings.from_json("") == NetworkPolicySettings()


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"kuberay": {"namepsace": "ray-system"}}, "namepsace"),
        ({"extraIngress": [{"form": []}]}, "form"),
        ({"enabled": "sometimes"}, "enabled"),
    ],
)
def test_a_bad_setting_stops_the_operator_naming_the_field(value: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=SETTINGS_ENV) as err:
        NetworkPolicySettings.from_json(json.dumps(value))
    assert field in str(err.value)


def applied(plan) -> list[str]:
    return [o["kind"] for o in plan.apply]


def test_the_first_pass_applies_the_policy_before_the_raycluster_and_a_steady_pass_nothing() -> None:
    j = job()
    first = decide(j, 1, Observed(), T0)
    kinds = applied(first)
    assert kinds.index("NetworkPolicy") < kinds.index("RayCluster")
    assert "NetworkPolicy" not in applied(decide(j, 1, Observed(), T0, NetworkPolicySettings(enabled=False)))
    j = j.model_copy(update={"status": JobStatus.model_validate(first.status)})
    current = raycluster(spec_hash=build_raycluster(j)["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    started = decide(j, 1, Observed(raycluster=current), T0)
    assert applied(started) == ["RayJob"]


def test_a_job_older_than_the_policy_gets_it_when_its_raycluster_is_written_again() -> None:
    """An operator upgrade changes the pod templates: the RayCluster is applied again between attempts, and the
    policy goes with it."""
    status = {"phase": "Recovering", "observedGeneration": 1, "attempt": 1, "rayCluster": "geo"}
    status["attempts"] = [{"index": 1, "rayJob": "geo-a1", "result": "Failed", "cause": "initial"}]
    j = job(status=status)
    plan = decide(
        j,
        1,
        Observed(raycluster=raycluster(spec_hash="from-an-older-operator"), rayjobs={1: rayjob("Failed", "FAILED")}),
        T0,
    )
    kinds = applied(plan)
    assert "RayCluster" in kinds and kinds.index("NetworkPolicy") == kinds.index("RayCluster") - 1
