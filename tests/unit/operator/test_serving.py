"""Serving after training: the Deployment and Service the operator builds, and the pure serving decision."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from mmrl_api import JobStatus
from mmrl_api import constants as c
from mmrl_operator.core.builders.common import stamped
from mmrl_operator.core.builders.inference import Adapter, build_deployment, build_service, default_adapter
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed, ServingObserved
from mmrl_operator.core.serving import adapter_of, decide_serving, out_of_date
from tests.support.factories import T0, job

ADAPTER = {
    "path": "/fsx/mmrl/team/geo-0f1e2d3c/adapter",
    "rank": 32,
    "alpha": 64,
    "targetModules": ["q_proj", "v_proj"],
    "baseModel": "Qwen/Qwen3-VL-8B-Instruct",
    "sha256": "ab" * 32,
    "maxLoraRank": 32,
    "config": {"peft_type": "LORA", "r": 32, "lora_alpha": 64, "target_modules": ["q_proj", "v_proj"]},
}


def trained(patch: dict | None = None, adapter: dict | None = ADAPTER, phase: str = "Succeeded"):
    status = {"phase": phase, "message": "training finished in attempt 1", "finishedAt": "2026-12-01T12:00:00Z"}
    if adapter is not None:
        status["adapter"] = adapter
    return job(patch, status=status)


def deployment(j, available: bool = True, replicas: int = 1, generation: int = 1) -> dict:
    dep = build_deployment(j, default_adapter(j))
    dep["metadata"]["generation"] = generation
    dep["status"] = {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "availableReplicas": replicas if available else 0,
        "conditions": [{"type": "Available", "status": "True" if available else "False"}],
    }
    return dep


def listed(name: str = "qwen3vl-geo3k", parent: str = "Qwen/Qwen3-VL-8B-Instruct") -> list[dict]:
    return [{"id": parent, "parent": None}, {"id": name, "parent": parent}]


def test_the_built_deployments_vllm_command_carries_the_adapter_and_every_serving_setting() -> None:
    j = trained()
    dep = build_deployment(j, Adapter(ADAPTER["path"], 32, ADAPTER["baseModel"], ADAPTER["sha256"]))
    assert dep["metadata"]["name"] == "geo-inference" and dep["metadata"]["ownerReferences"][0]["name"] == "geo"
    pod = dep["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    assert server["image"] == "vllm/vllm-openai:v0.33.0"
    assert server["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    args = server["args"]
    flag = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}
    assert "--enable-lora" in args
    assert json.loads(flag["--lora-modules"]) == {
        "name": "qwen3vl-geo3k",
        "path": ADAPTER["path"],
        "base_model_name": "Qwen/Qwen3-VL-8B-Instruct",
    }
    assert (flag["--model"], flag["--served-model-name"]) == ("Qwen/Qwen3-VL-8B-Instruct",) * 2
    assert (flag["--max-lora-rank"], flag["--max-loras"], flag["--tensor-parallel-size"]) == ("32", "1", "1")
    assert json.loads(flag["--limit-mm-per-prompt"]) == {"image": 2} and flag["--max-model-len"] == "3072"
    assert server["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert server["startupProbe"]["httpGet"]["path"] == "/v1/models"
    assert server["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert server["livenessProbe"]["httpGet"]["path"] == "/health"
    assert server["resources"]["limits"][c.GPU_RESOURCE] == "1"
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/fsx"]["readOnly"] is True and "/dev/shm" in mounts
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["readOnly"] is True
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    (check,) = pod["initContainers"]
    assert check["command"][:3] == ["python", "-m", "mmrl_trainer.adapter"]
    assert check["command"][-2:] == ["--sha256", ADAPTER["sha256"]]
    assert pod["affinity"]["nodeAffinity"]  # HyperPod health affinity, like the training pods
    assert {"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    template = dep["spec"]["template"]["metadata"]
    assert template["annotations"]["prometheus.io/port"] == "8000"
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_the_service_exposes_port_8000_named_http() -> None:
    svc = build_service(trained())
    assert svc["metadata"]["name"] == "geo-inference"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == {c.LABEL_JOB: "geo", c.LABEL_COMPONENT: "inference"}


def test_an_s3_adapter_is_copied_by_the_init_container_into_an_emptydir() -> None:
    j = trained()
    dep = build_deployment(j, Adapter("s3://bucket/ckpt/team/geo/adapter", 32, ADAPTER["baseModel"]))
    pod = dep["spec"]["template"]["spec"]
    check = pod["initContainers"][0]["command"]
    assert check[check.index("--copy-from") + 1] == "s3://bucket/ckpt/team/geo/adapter"
    assert check[check.index("--adapter") + 1] == "/mnt/adapter"
    assert json.loads(pod["containers"][0]["args"][6])["path"] == "/mnt/adapter"
    assert {"name": "adapter", "emptyDir": {}} in pod["volumes"]


def test_cpu_serving_requests_no_gpu_and_no_gpu_memory_setting() -> None:
    dep = build_deployment(*(lambda j: (j, default_adapter(j)))(trained({"spec": {"inference": {"gpus": 0}}})))
    server = dep["spec"]["template"]["spec"]["containers"][0]
    assert c.GPU_RESOURCE not in server["resources"].get("limits", {})
    assert "--gpu-memory-utilization" not in server["args"]


def test_disabled_inference_ends_at_succeeded_and_removes_a_deployment() -> None:
    j = trained({"spec": {"inference": {"enabled": False}}})
    d = decide_serving(j, j.status, ServingObserved(deployment=deployment(j), service=build_service(j)))
    assert d.phase == "Succeeded" and d.apply == []
    assert d.delete == [("apps/v1", "Deployment", "geo-inference"), ("v1", "Service", "geo-inference")]


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"rank": 1024, "config": {**ADAPTER["config"], "r": 1024}}, "max-lora-rank"),
        ({"config": {**ADAPTER["config"], "use_dora": True}}, "dora"),
        ({"config": {**ADAPTER["config"], "modules_to_save": ["lm_head"]}}, "modules-to-save"),
        ({"config": {**ADAPTER["config"], "target_modules": ["lm_head"]}}, "forbidden-target"),
        ({"baseModel": "Qwen/Qwen2.5-VL-7B-Instruct"}, "base-model"),
        ({"rank": 8}, "rank"),
    ],
)
def test_an_adapter_our_vllm_rules_refuse_fails_the_job_with_the_rule_and_creates_nothing(change, rule) -> None:
    j = trained(adapter={**ADAPTER, **change})
    plan = decide(j, 1, Observed(), T0)
    assert plan.status["phase"] == "Failed" and plan.apply == []
    assert f"rule {rule}" in plan.status["message"]
    assert [(e.reason, e.type) for e in plan.events] == [("InvalidAdapter", "Warning")]
    stalled = next(x for x in plan.status["conditions"] if x["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidAdapter")
    # The passes after it (a Failed job is not served again) keep saying why it does not serve.
    failed = j.model_copy(update={"status": JobStatus.model_validate(plan.status)})
    later = decide(failed, 1, Observed(), T0)
    ready = next(x for x in later.status["conditions"] if x["type"] == "InferenceReady")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidAdapter") and f"rule {rule}" in ready["message"]


def test_the_init_containers_refusal_fails_the_job_with_its_error_lines() -> None:
    j = trained()
    obs = ServingObserved(deployment=deployment(j, available=False), check_failure="adapter_config.use_dora: ...")
    d = decide_serving(j, j.status, obs)
    assert d.phase == "Failed" and d.reason == "InvalidAdapter" and "use_dora" in d.message
    assert ("apps/v1", "Deployment", "geo-inference") in d.delete


def test_ready_only_when_available_and_the_adapter_is_listed() -> None:
    j = trained()
    first = decide(j, 1, Observed(), T0)
    assert first.status["phase"] == "Serving"
    assert [o["kind"] for o in first.apply] == ["Deployment", "Service"]
    assert ("InferenceCreated", "Normal") in [(e.reason, e.type) for e in first.events]

    def ready(obs: ServingObserved) -> tuple[str, str, bool]:
        plan = decide(j, 1, Observed(serving=obs), T0)
        inf = next(x for x in plan.status["conditions"] if x["type"] == "InferenceReady")
        top = next(x for x in plan.status["conditions"] if x["type"] == "Ready")
        assert plan.status["inference"]["ready"] is (inf["status"] == "True")
        return inf["status"], inf["reason"], top["status"] == "True"

    dep = deployment(j)
    assert ready(ServingObserved(deployment=deployment(j, available=False))) == ("False", "Deploying", False)
    assert ready(ServingObserved(deployment=dep, models=None, probe_error="503")) == (
        "False",
        "AdapterNotListed",
        False,
    )
    base_only = [{"id": "Qwen/Qwen3-VL-8B-Instruct", "parent": None}]
    assert ready(ServingObserved(deployment=dep, models=base_only)) == ("False", "AdapterNotListed", False)
    assert ready(ServingObserved(deployment=dep, models=listed())) == ("True", "AdapterServed", True)
    rolling = deployment(j, generation=2)
    rolling["status"]["observedGeneration"] = 1
    assert ready(ServingObserved(deployment=rolling, models=listed()))[:2] == ("False", "Deploying")


def test_serving_stays_after_ttl_removes_the_cluster() -> None:
    j = trained({"spec": {"ttlSecondsAfterFinished": 60}}, phase="Serving")
    obs = Observed(raycluster={"metadata": {"name": "geo"}}, serving=ServingObserved(deployment=deployment(j)))
    plan = decide(j, 1, obs, T0 + timedelta(seconds=120))
    assert [(d.kind, d.name) for d in plan.delete] == [("RayCluster", "geo")]
    assert plan.status["phase"] == "Serving" and {o["kind"] for o in plan.apply} == {"Deployment", "Service"}


def test_a_changed_inference_spec_is_applied_to_the_deployment() -> None:
    j = trained(phase="Serving")
    before = decide(j, 1, Observed(), T0).apply[0]
    bigger = trained({"spec": {"inference": {"replicas": 3, "maxModelLen": 4096}}}, phase="Serving")
    after = decide(bigger, 2, Observed(), T0).apply[0]
    assert after["spec"]["replicas"] == 3 and before["spec"]["replicas"] == 1
    assert after["spec"]["template"] != before["spec"]["template"]  # a new template rolls the pods


def test_a_steady_serving_pass_writes_nothing_and_a_changed_child_is_written_again() -> None:
    j = trained(phase="Serving")
    dep, svc = build_deployment(j, adapter_of(j, j.status)[0]), build_service(j)
    steady = decide(j, 1, Observed(serving=ServingObserved(deployment=dep, service=svc, models=listed())), T0)
    assert steady.status["phase"] == "Serving" and steady.apply == []
    # Scaled by hand: set back, as a full apply would.
    scaled = {**dep, "spec": {**dep["spec"], "replicas": 4}}
    again = decide(j, 1, Observed(serving=ServingObserved(deployment=scaled, service=svc, models=listed())), T0)
    assert [o["kind"] for o in again.apply] == ["Deployment"] and again.apply[0]["spec"]["replicas"] == 1
    # Edited by hand elsewhere in its spec (its generation moved since the operator wrote it): written again.
    edited = ServingObserved(deployment=dep, service=svc, models=listed(), deployment_edited=True)
    assert [o["kind"] for o in decide(j, 1, Observed(serving=edited), T0).apply] == ["Deployment"]
    # A new spec: a new digest on the Deployment (the Service is unchanged and not written).
    bigger = trained({"spec": {"inference": {"maxModelLen": 4096}}}, phase="Serving")
    changed = decide(bigger, 2, Observed(serving=ServingObserved(deployment=dep, service=svc, models=listed())), T0)
    assert [o["kind"] for o in changed.apply] == ["Deployment"]


def test_the_digest_covers_what_the_operator_sets_and_nothing_the_cluster_adds() -> None:
    j = trained(phase="Serving")
    dep = build_deployment(j, default_adapter(j))
    assert not out_of_date(dep, build_deployment(j, default_adapter(j)))  # built twice: the same digest
    stored = json.loads(json.dumps(dep))
    stored["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "generation": 3}
    stored["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
    stored["status"] = {"replicas": 1}
    assert not out_of_date(stored, dep)
    relabelled = build_deployment(j, default_adapter(j))
    relabelled["metadata"]["labels"]["extra"] = "x"
    assert out_of_date(dep, stamped(relabelled))
    assert out_of_date(None, dep)


def test_status_inference_round_trips_through_the_model() -> None:
    plan = decide(trained(), 1, Observed(), T0)
    assert JobStatus.model_validate(plan.status).inference.service == "geo-inference"
