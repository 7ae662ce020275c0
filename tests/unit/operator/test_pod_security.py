"""The securityContext of every pod the operator builds: restricted where the trainer image runs, everything but a
non-root user where vLLM's root image runs, read-only roots only for the containers that write nothing, and a
job's specPatch still able to change what the admission policy allows."""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c
from mmrl_operator.core.builders import inference, model_server
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from tests.support.factories import job
from tests.unit.operator.test_model_server import server

LOCKED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def ray_templates(rc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rc["spec"]["headGroupSpec"]["template"], *(g["template"] for g in rc["spec"]["workerGroupSpecs"])]


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in [*pod.get("initContainers", []), *pod["containers"]]}


def adapter() -> inference.Adapter:
    return inference.Adapter("/fsx/mmrl/team/geo-0f1e2d3c/adapter", 32, "Qwen/Qwen3-VL-8B-Instruct", "ab" * 32)


def test_ray_pods_run_as_non_root_without_capabilities_and_only_the_log_printer_has_a_read_only_root() -> None:
    for template in ray_templates(build_raycluster(job())):
        pod = template["spec"]
        assert pod["securityContext"] == RESTRICTED_POD
        assert "runAsUser" not in pod["securityContext"]  # the image's numeric USER is kept, whatever it is
        for name, container in containers(pod).items():
            security = container["securityContext"]
            assert {k: security[k] for k in LOCKED} == LOCKED, name
            # Ray, torch and vLLM write under /tmp and $HOME; the trainer-log printer only reads the claim.
            assert security.get("readOnlyRootFilesystem", False) is (name == "trainer-log"), name


def test_the_submitter_pod_is_kuberays_container_with_the_job_label_restricted_and_without_a_token() -> None:
    j = job({"spec": {"cluster": {"podTemplate": {"imagePullSecrets": ["ecr"]}}}})
    template = build_rayjob(j, 1)["spec"]["submitterPodTemplate"]
    assert template["metadata"]["labels"] == {c.LABEL_RAY_SUBMITTER: "geo"}
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "ray-job-submitter" and "command" not in container  # KubeRay writes the command
    assert container["image"] == j.spec.trainer.image  # the head's image, as KubeRay's own default
    assert container["securityContext"] == LOCKED
    assert pod["securityContext"] == RESTRICTED_POD and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and pod["imagePullSecrets"] == [{"name": "ecr"}]


def test_serving_pods_lock_every_container_and_only_the_trainer_image_claims_a_non_root_user() -> None:
    dedicated = inference.build_deployment(job(), adapter())["spec"]["template"]["spec"]
    shared = model_server.build_server_deployment(server())["spec"]["template"]["spec"]
    for pod in (dedicated, shared):
        assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}  # vLLM's image runs as root
        vllm = containers(pod)["vllm"]["securityContext"]
        assert vllm == LOCKED  # its caches live under /root: no read-only root
    check = containers(dedicated)["check-adapter"]["securityContext"]
    assert check == {**LOCKED, "runAsNonRoot": True, "readOnlyRootFilesystem": True}


def test_the_shared_servers_gateway_runs_the_operator_image_as_its_non_root_user_on_a_read_only_root() -> None:
    pod = model_server.build_server_deployment(server())["spec"]["template"]["spec"]
    gateway = containers(pod)["gateway"]["securityContext"]
    assert gateway["runAsNonRoot"] is True and gateway["readOnlyRootFilesystem"] is True
    assert gateway["allowPrivilegeEscalation"] is False and gateway["capabilities"] == {"drop": ["ALL"]}


def test_a_spec_patch_may_set_the_pod_security_context_an_image_needs() -> None:
    patch = {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}  # an image that needs root, say
    rc = build_raycluster(job({"spec": {"cluster": {"podTemplate": {"specPatch": patch}}}}))
    for template in ray_templates(rc):
        want = {"runAsUser": 0, "runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}}
        assert template["spec"]["securityContext"] == want


def test_no_two_containers_share_a_security_context_object() -> None:
    """One dict in two places prints as a YAML anchor in `mmrl render` and changes together."""
    rc = build_raycluster(job())
    found = [t["spec"]["securityContext"] for t in ray_templates(rc)]
    found += [k["securityContext"] for t in ray_templates(rc) for k in containers(t["spec"]).values()]
    assert len({id(x) for x in found}) == len(found)
