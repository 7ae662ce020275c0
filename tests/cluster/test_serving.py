"""Serving on the real control plane: the operator's Deployment and Service as the apiserver stores them, pods
scheduled and made Ready by kwok, the operator's /v1/models probe through the Service (nothing listens here, so the
adapter is never listed and InferenceReady stays False; tests/e2e runs real vLLM), scaling, roll-outs, turning
serving off, invalid adapters and cascade deletion."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.common import procs
from mmrl_local.node import podrun
from mmrl_local.node.kubelet import running_pod
from tests.support import misbehaving_server
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

SERVING = {
    "spec": {
        "inference": {
            "enabled": True,
            "servedModelName": "geo-lora",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        }
    }
}


def serving_job(extra: dict | None = None) -> dict:
    job = cluster_job("geo", SERVING)
    if extra:
        job["spec"] = {**job["spec"], **extra}
    return job


def deployment(api_client, ns: str) -> client.V1Deployment | None:
    try:
        return client.AppsV1Api(api_client).read_namespaced_deployment("geo-inference", ns)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def passes(operator, ns: str) -> list[str]:
    """The operator's log lines of its passes on geo while it serves."""
    text = operator.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if f"reconciled job={ns}/geo phase=Serving " in line]


def steady_passes_write_nothing(operator, ns: str) -> None:
    """Two more passes on the serving job (its 10 s wait for the adapter to be listed) that make no request: the job
    comes from the operator's job store, the Deployment and Service from its watch caches, and neither is applied
    again (5 requests per pass before: a GET, two LISTs and two applies)."""
    before = len(passes(operator, ns))
    later = wait_until(lambda: (seen := passes(operator, ns))[before + 1 :] and seen[before:], 40, what="2 passes")
    for line in later:
        assert "applied=0 deleted=0 calls=0" in line, line


def inference_condition(jobs) -> dict:
    return next(x for x in jobs.status("geo").get("conditions") or [] if x["type"] == "InferenceReady")


def test_a_trained_job_serves_through_its_deployment_and_service(jobs, operator, kuberay, hyperpod_nodes, core):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    kuberay.script("geo-a1", "succeed-after=1")
    jobs.create(serving_job({"ttlSecondsAfterFinished": 3}))
    wait_until(lambda: jobs.status("geo").get("phase") == "Serving", 90, what="phase Serving")
    api = core.api_client
    dep = wait_until(lambda: deployment(api, jobs.ns), 30, what="the inference Deployment")
    status = jobs.status("geo")

    # As stored by the apiserver: owned by the job, the adapter where the trainer exports it, GPU + HyperPod placement.
    assert dep.metadata.owner_references[0].name == "geo" and dep.metadata.owner_references[0].controller
    server = dep.spec.template.spec.containers[0]
    args = server.args
    lora = json.loads(args[args.index("--lora-modules") + 1])
    # The cluster tests checkpoint to S3: the init container copies the adapter into the pod, vLLM reads it there.
    assert (lora["name"], lora["path"]) == ("geo-lora", "/mnt/adapter")
    check = dep.spec.template.spec.init_containers[0].command
    assert check[check.index("--copy-from") + 1] == f"{status['jobDir']}/adapter"
    assert args[args.index("--max-lora-rank") + 1] == "32" and "--enable-lora" in args
    assert server.resources.limits[c.GPU_RESOURCE] == "1"
    assert dep.spec.template.spec.init_containers[0].name == "check-adapter"
    assert dep.spec.template.spec.affinity.node_affinity is not None

    # kwok schedules the pod on a GPU node and makes it Ready: the Deployment becomes Available.
    wait_until(lambda: (deployment(api, jobs.ns).status.available_replicas or 0) == 1, 60, what="Available")
    pod = core.list_namespaced_pod(jobs.ns, label_selector=f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}=inference").items[0]
    assert pod.spec.node_name.startswith("hyperpod-") and pod.status.pod_ip
    svc = core.read_namespaced_service("geo-inference", jobs.ns)
    assert [(p.name, p.port) for p in svc.spec.ports] == [("http", 8000)]
    # The operator asked /v1/models through the Service; nothing listens on the kwok pod's IP, so it is not ready.
    cond = wait_until(
        lambda: (x := inference_condition(jobs))["reason"] == "AdapterNotListed" and x, 60, what="AdapterNotListed"
    )
    assert cond["status"] == "False" and "does not list adapter geo-lora" in cond["message"]
    inference = jobs.status("geo")["inference"]
    assert inference == {
        "service": "geo-inference",
        "url": f"http://geo-inference.{jobs.ns}.svc:8000/v1",
        "ready": False,
        "model": "geo-lora",
        "baseModel": inference["baseModel"],
    }
    assert jobs.condition("geo", "Ready") == "False"
    # ttl removes the Ray cluster, never the inference.
    wait_until(lambda: not jobs.ray_names("rayclusters"), 30, what="RayCluster deleted after ttl")
    assert deployment(api, jobs.ns) is not None and jobs.status("geo")["phase"] == "Serving"
    assert "InferenceCreated" in jobs.events("geo")
    ray_pods = f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}!=inference"
    wait_until(lambda: not core.list_namespaced_pod(jobs.ns, label_selector=ray_pods).items, 60, what="Ray pods gone")
    # The pass that deleted the cluster logs its line after its event and status write, later than the apiserver
    # shows the cluster gone: count the steady passes from after that line.
    wait_until(lambda: any(" deleted=1 " in x for x in passes(operator, jobs.ns)), 30, what="the ttl pass's line")
    steady_passes_write_nothing(operator, jobs.ns)
    # Scaled by hand: the Deployment's watch event wakes the job, and the pass sets the replicas back.
    client.AppsV1Api(api).patch_namespaced_deployment_scale("geo-inference", jobs.ns, {"spec": {"replicas": 3}})
    wait_until(lambda: deployment(api, jobs.ns).spec.replicas == 1, 30, what="the replicas set back to 1")
    # Any other field the operator set, changed by hand: its generation moves, and the pass writes it back.
    image = dep.spec.template.spec.containers[0].image
    hand_edit = {"spec": {"template": {"spec": {"containers": [{"name": server.name, "image": "elsewhere:1"}]}}}}
    client.AppsV1Api(api).patch_namespaced_deployment("geo-inference", jobs.ns, hand_edit)
    wait_until(
        lambda: deployment(api, jobs.ns).spec.template.spec.containers[0].image == image, 30, what="the image set back"
    )

    jobs.delete("geo")  # the garbage collector follows the ownerReferences
    wait_until(lambda: deployment(api, jobs.ns) is None, 60, what="Deployment garbage-collected")
    wait_until(lambda: not core.list_namespaced_service(jobs.ns).items, 60, what="Service garbage-collected")


def test_scaling_and_spec_changes_roll_the_deployment_and_disabling_removes_it(
    jobs, operator, kuberay, nodes_ready, core
):
    kuberay.script("geo-a1", "succeed-after=1")
    jobs.create(serving_job())
    api = core.api_client
    first = wait_until(lambda: deployment(api, jobs.ns), 90, what="the inference Deployment")
    inference = SERVING["spec"]["inference"]
    jobs.patch("geo", {"spec": {"inference": {**inference, "replicas": 2}}})
    wait_until(lambda: deployment(api, jobs.ns).spec.replicas == 2, 30, what="scaled to 2")
    jobs.patch("geo", {"spec": {"inference": {**inference, "replicas": 2, "maxModelLen": 4096}}})
    rolled = wait_until(
        lambda: (d := deployment(api, jobs.ns)) and "4096" in d.spec.template.spec.containers[0].args and d, 30
    )
    assert rolled.metadata.generation > first.metadata.generation
    # A changed pod template is a roll-out: the Deployment controller makes a second ReplicaSet.
    wait_until(lambda: len(client.AppsV1Api(api).list_namespaced_replica_set(jobs.ns).items) >= 2, 30, what="new RS")
    jobs.patch("geo", {"spec": {"inference": {**inference, "replicas": 0}}})
    wait_until(lambda: inference_condition(jobs)["reason"] == "ScaledToZero", 30, what="ScaledToZero")
    jobs.patch("geo", {"spec": {"inference": {**inference, "enabled": False}}})
    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 30, what="Succeeded without serving")
    wait_until(lambda: deployment(api, jobs.ns) is None, 30, what="Deployment removed")
    assert jobs.condition("geo", "Ready") == "True" and inference_condition(jobs)["reason"] == "Disabled"


@pytest.mark.parametrize(
    ("adapter", "rule"),
    [
        ({"rank": 1024, "config": {"r": 1024}}, "max-lora-rank"),
        ({"config": {"use_dora": True}}, "dora"),
        ({"baseModel": "someone/else"}, "base-model"),
    ],
    ids=["rank", "dora", "base-model"],
)
def test_an_adapter_our_vllm_rules_refuse_fails_the_job_and_creates_no_deployment(
    jobs, operator, kuberay, nodes_ready, core, adapter, rule
):
    kuberay.script("geo-a1", "succeed-after=6")
    jobs.create(serving_job())
    wait_until(lambda: jobs.status("geo").get("phase") == "Running", 60, what="Running")
    # What the trainer reports at export (it would have refused these itself; the operator checks again).
    reported = {
        "path": "s3://mmrl-test/ckpt/adapter",
        "rank": 32,
        "alpha": 32,
        "targetModules": ["q_proj"],
        "baseModel": "Qwen/Qwen3-VL-8B-Instruct",
        "sha256": "ab" * 32,
        "config": {"peft_type": "LORA", "r": 32, "lora_alpha": 32, "target_modules": ["q_proj"]},
    }
    reported = {**reported, **adapter, "config": {**reported["config"], **adapter.get("config", {})}}
    jobs.patch_status("geo", {"adapter": reported})
    wait_until(lambda: jobs.status("geo").get("phase") == "Failed", 60, what="Failed")
    status = jobs.status("geo")
    assert f"rule {rule}" in status["message"]
    stalled = next(x for x in status["conditions"] if x["type"] == "Stalled")
    assert stalled["reason"] == "InvalidAdapter"
    assert "InvalidAdapter" in jobs.events("geo")
    assert deployment(core.api_client, jobs.ns) is None
    assert status["attempts"][0]["result"] == "Succeeded" and not status.get("restarts")


MARKER = "marker-4f9c2e-not-for-logs"
ENV_WITH_SECRET = [
    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
    {"name": "NCCL_DEBUG", "value": MARKER},
]


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def test_an_inference_server_that_floods_or_trickles_is_cut_off_and_named_in_the_condition(
    jobs, operator, kuberay, nodes_ready, core, pod_network, tmp_path
):
    kuberay.script("geo-a1", "succeed-after=1")
    body = serving_job()
    body["spec"]["trainer"] = {**body["spec"].get("trainer", {}), "env": ENV_WITH_SECRET}
    jobs.create(body)
    api = core.api_client
    dep = wait_until(lambda: deployment(api, jobs.ns), 90, what="the inference Deployment")
    hf_token = next(e for e in dep.spec.template.spec.containers[0].env if e.name == "HF_TOKEN")
    assert hf_token.value is None and hf_token.value_from.secret_key_ref.name == "hf-token"
    wait_until(lambda: (deployment(api, jobs.ns).status.available_replicas or 0) == 1, 60, what="Available")
    pod = running_pod(core, jobs.ns, f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}=inference")
    box = pod_network.sandbox(pod)
    view = podrun.PodView(pod=pod["metadata"]["name"], env=dict(os.environ), mounts=[], cwd="/", command=[])

    def serve(mode: str):  # what answers on the pod's IP, where vLLM would (the apiserver's proxy dials it)
        argv = [sys.executable, misbehaving_server.__file__, "8000", mode]
        return podrun.spawn_in_pod(view, argv, tmp_path / f"{mode}.log", tmp_path / f"root-{mode}", box)

    def message_has(text: str):  # type: ignore[no-untyped-def]
        return lambda: text in (cond := inference_condition(jobs))["message"] and cond

    server = serve("huge")
    try:
        # 400 MiB offered through the apiserver: refused after at most 1 MiB, and said so.
        cond = wait_until(message_has("1 MiB accepted"), 90, what="the oversized answer in the condition")
        assert cond["status"] == "False" and cond["reason"] == "AdapterNotListed"
        assert peak_rss_mib(operator.proc.pid) < 300  # it never held the body (it did: 845 MiB)
        procs.stop(server)
        server = serve("trickle-body")  # a byte every 50 ms: the whole answer would take minutes
        wait_until(message_has("no complete answer within 5s"), 90, what="the deadline in the condition")
        procs.stop(server)
        server = serve("models")  # a server that behaves: the adapter is listed and the job is ready
        wait_until(lambda: inference_condition(jobs)["status"] == "True", 90, what="InferenceReady")
        assert jobs.condition("geo", "Ready") == "True"
        # The env's literal value went only where the trainer reads it: not into the log, events or status.
        events = core.list_namespaced_event(jobs.ns).items
        assert events and all(MARKER not in (e.message or "") for e in events)
        assert MARKER not in operator.log_path.read_text() and MARKER not in json.dumps(jobs.status("geo"))
    finally:
        procs.stop(server)
        pod_network.release(pod["metadata"]["uid"])
