"""Every pod the operator builds, admitted by the real apiserver's Pod Security admission at the level
docs/security.md promises: the Ray head and workers, KubeRay's submitter pod from our template
under `restricted`; a vLLM server (vLLM's image runs as root) under `baseline`, and refused by `restricted` for
exactly that. Dry-run creates: admission runs in full, nothing is stored or scheduled."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from mmrl_operator.core.builders import inference
from mmrl_operator.core.builders.model_server import build_server_deployment
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from tests.support.factories import job
from tests.support.polling import wait_until
from tests.unit.operator.test_model_server import server

pytestmark = pytest.mark.cluster


def enforce(core: client.CoreV1Api, namespace: str, level: str) -> None:
    labels = {"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
    core.patch_namespace(namespace, {"metadata": {"labels": labels}})


def admission(core: client.CoreV1Api, namespace: str, name: str, pod_spec: dict[str, Any]) -> str | None:
    """None when a pod with this spec is admitted; the apiserver's refusal otherwise."""
    # The job's ServiceAccount exists only once the operator made it; admission would refuse the pod for that alone.
    spec = {**json.loads(json.dumps(pod_spec)), "serviceAccountName": "default"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except client.exceptions.ApiException as err:
        return str(json.loads(err.body)["message"])
    return None


def test_ray_pods_pass_restricted_and_vllm_pods_pass_baseline_only(core, namespace: str) -> None:
    j = job()
    rc = build_raycluster(j)
    adapter = inference.Adapter("/fsx/mmrl/team/geo-0f1e2d3c/adapter", 32, "Qwen/Qwen3-VL-8B-Instruct", "ab" * 32)
    restricted = {
        "ray-head": rc["spec"]["headGroupSpec"]["template"]["spec"],
        "ray-worker": rc["spec"]["workerGroupSpecs"][0]["template"]["spec"],
        "submitter": build_rayjob(j, 1)["spec"]["submitterPodTemplate"]["spec"],
    }
    served = {
        "inference": inference.build_deployment(j, adapter)["spec"]["template"]["spec"],
        "model-server": build_server_deployment(server())["spec"]["template"]["spec"],
    }
    enforce(core, namespace, "restricted")
    # Pod Security admission reads the namespace's labels from its informer: a level is in force once it refuses
    # what only it refuses (a root image's pod under restricted, and under baseline no longer).
    wait_until(lambda: admission(core, namespace, "probe", served["inference"]), 30, what="restricted in force")
    for name, spec in restricted.items():
        assert admission(core, namespace, name, spec) is None, name
    for name, spec in served.items():
        refusal = admission(core, namespace, name, spec)
        assert refusal is not None and "runAsNonRoot" in refusal, (name, refusal)
        # Nothing else keeps it out of `restricted`: with a non-root image it would pass as built.
        assert "allowPrivilegeEscalation" not in refusal and "capabilities" not in refusal, refusal
        assert "seccompProfile" not in refusal, refusal
    enforce(core, namespace, "baseline")
    wait_until(lambda: admission(core, namespace, "probe", served["inference"]) is None, 30, what="baseline in force")
    for name, spec in served.items():
        assert admission(core, namespace, name, spec) is None, name
