"""Where the operator's pods may land on HyperPod: never on a node carrying HyperPod's node-health-status taint
(no pod template it builds tolerates it, and no job may ask it to), and preferably on nodes whose deep health
check Passed."""

from __future__ import annotations

from typing import Any

import pytest

from mmrl_api import constants as c
from mmrl_api.cluster import tolerates_health_taint
from mmrl_api.job import validate_manifest
from mmrl_operator.core.builders.inference import build_deployment, default_adapter
from mmrl_operator.core.builders.raycluster import build_raycluster
from tests.support.corpus import example, merge_patch
from tests.support.factories import job

# A job that asks for everything that puts tolerations or affinity on a pod: its own tolerations, GPU workers,
# served on GPUs, and a specPatch that sets tolerations of its own.
BUSY = {
    "spec": {
        "cluster": {
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "team",
                    "operator": "Equal",
                    "value": "research",
                    "effect": "NoExecute",
                    "tolerationSeconds": 60,
                },
            ],
            "podTemplate": {"specPatch": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}},
        },
        "inference": {"enabled": True},
    }
}


def every_pod_template(patch: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what, pod spec) of every pod template the operator builds for a job: Ray head and workers, inference."""
    j = job(patch)
    rc = build_raycluster(j)
    out = [("ray-head", rc["spec"]["headGroupSpec"]["template"]["spec"])]
    out += [(f"ray-worker {g['groupName']}", g["template"]["spec"]) for g in rc["spec"]["workerGroupSpecs"]]
    out.append(("inference", build_deployment(j, default_adapter(j))["spec"]["template"]["spec"]))
    return out


@pytest.mark.parametrize(
    "patch", [{}, BUSY, {"spec": {"cluster": {"hyperpod": False}}}], ids=["example", "busy", "no-hp"]
)
def test_no_pod_template_tolerates_the_hyperpod_health_taint(patch: dict[str, Any]) -> None:
    templates = every_pod_template(patch)
    assert len(templates) == 3
    for what, pod in templates:
        tolerating = [t for t in pod.get("tolerations") or [] if tolerates_health_taint(t)]
        assert tolerating == [], f"{what} tolerates {c.HYPERPOD_TAINT_KEY}: {tolerating}"


def test_every_pod_prefers_nodes_whose_deep_health_check_passed() -> None:
    for what, pod in every_pod_template(BUSY):
        preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        (expr,) = [e for p in preferred for e in p["preference"]["matchExpressions"]]
        assert (expr["key"], expr["operator"], expr["values"]) == (c.HYPERPOD_DEEP_HEALTH_LABEL, "In", ["Passed"]), what


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"key": c.HYPERPOD_TAINT_KEY, "operator": "Exists"}, "key"),
        ({"key": c.HYPERPOD_TAINT_KEY, "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"}, "key"),
        ({"operator": "Exists"}, "operator"),
        ({"operator": "Exists", "effect": "NoSchedule"}, "operator"),
    ],
)
def test_a_job_tolerating_the_health_taint_is_refused_naming_the_field(toleration: dict, field: str) -> None:
    doc = merge_patch(example(), {"spec": {"cluster": {"tolerations": [toleration]}}})
    parsed, errors = validate_manifest(doc)
    assert parsed is None
    assert [e.path for e in errors] == [f"spec.cluster.tolerations[0].{field}"]
    assert c.HYPERPOD_TAINT_KEY in errors[0].message


def test_a_spec_patch_tolerating_the_health_taint_is_refused_naming_the_field() -> None:
    patch = {"tolerations": [{"key": "dedicated", "operator": "Exists"}, {"operator": "Exists"}]}
    doc = merge_patch(example(), {"spec": {"cluster": {"podTemplate": {"specPatch": patch}}}})
    parsed, errors = validate_manifest(doc)
    assert parsed is None and [e.path for e in errors] == ["spec.cluster.podTemplate.specPatch"]
    assert errors[0].message.startswith("tolerations[1] must not be " + c.HYPERPOD_TAINT_KEY)
