"""The operator wakes on its children's and its nodes' events, not on its resync.

Every other cluster test runs the operator at its production resync (30 s), so a broken watch would slow them but
might not fail them. Here the operator resyncs once an hour: each step below can only happen because a watch event
woke the job, and each reaction must come within ``WAKE_SECONDS`` of the event that caused it. The bound is far
below any resync and far above a pass on a loaded 2-core machine (tens of milliseconds; the KubeRay stand-in moves
its statuses every 0.3 s).

Events covered: the RayCluster becoming ready and the RayJob ending (children), a HyperPod health label on the node
of a running Ray pod (node: the attempt is stopped on its verdict), the head pod deleted (pod), the inference
Deployment becoming available (child); and for a ModelServer, a job's report and its deletion (the jobs that name
it) and an edit of its Deployment (child).
"""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api import parse_job
from mmrl_api.constants import DEFAULT_VLLM_IMAGE
from mmrl_local.addons.operator_process import OperatorProcess
from mmrl_local.cluster import hyperpod as hp
from mmrl_local.cluster import storage
from mmrl_local.common import procs
from mmrl_local.node import podrun
from mmrl_local.node.kubelet import running_pod
from mmrl_operator.core.names import job_dir
from tests.cluster.test_model_server import ADMIN, CHILD, NAME, Servers, _or_none, server_doc, wait_phase
from tests.support import fake_gateway
from tests.support.factories import adapter_report
from tests.support.jobspecs import cluster_job
from tests.support.operator import Jobs, wait_until

pytestmark = pytest.mark.cluster

WAKE_SECONDS = 10.0
NO_RESYNC = {"MMRL_RESYNC_SECONDS": "3600"}


@pytest.fixture
def operator(control_plane, namespace: str, tmp_path: Path, mmrl_crd: None) -> Iterator[OperatorProcess]:
    with OperatorProcess(
        control_plane.kubeconfig, tmp_path / "operator.log", namespaces=[namespace], env=NO_RESYNC
    ) as op:
        yield op


def reacts(reaction: Callable[[], Any], what: str) -> Any:
    """Require ``reaction`` within ``WAKE_SECONDS`` of now, the moment its event happened or was seen."""
    seen = time.monotonic()
    result = wait_until(reaction, WAKE_SECONDS, interval=0.1, what=f"{what}: the operator's reaction")
    print(f"{what}: reacted {time.monotonic() - seen:.2f}s after the event")
    return result


def woke(event: Callable[[], Any], reaction: Callable[[], Any], what: str, event_timeout: float = 120) -> Any:
    """Wait for ``event`` (however long the cluster takes), then require ``reaction`` within ``WAKE_SECONDS``."""
    wait_until(event, event_timeout, interval=0.1, what=f"{what}: the event")
    return reacts(reaction, what)


def rayjob_status(jobs: Jobs, name: str) -> dict:
    return next((r.get("status") or {} for r in jobs.ray("rayjobs") if r["metadata"]["name"] == name), {})


def raycluster_state(jobs: Jobs) -> str | None:
    return next(((r.get("status") or {}).get("state") for r in jobs.ray("rayclusters")), None)


def attempt(jobs: Jobs, index: int) -> dict:
    attempts = jobs.status("geo").get("attempts") or []
    return attempts[index] if len(attempts) > index else {}


def live_pod(core, ns: str, component: str):
    pods = core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}=geo,{c.LABEL_COMPONENT}={component}").items
    live = [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp and p.status.phase == "Running"]
    return live[0] if live else None


def test_a_ready_raycluster_and_an_ended_rayjob_wake_the_job(jobs, operator, kuberay, hyperpod_nodes) -> None:
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    kuberay.script("geo-a*", "succeed-after=1")
    kuberay.script("geo-a1", "fail-after=2")  # the later script wins for the names both match
    jobs.create(cluster_job("geo"))
    woke(lambda: raycluster_state(jobs) == "ready", lambda: jobs.ray_names("rayjobs"), "RayCluster ready -> RayJob")
    woke(
        lambda: rayjob_status(jobs, "geo-a1").get("jobDeploymentStatus") == "Failed",
        lambda: attempt(jobs, 0).get("result") == "Failed",
        "RayJob failed -> attempt recorded",
    )


def training(jobs: Jobs, kuberay, hyperpod_nodes, core, gpus: int, component: str):
    """Attempt 1 of geo training (it runs until stopped) on `gpus` GPU nodes; returns its running `component` pod."""
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(gpus)
    kuberay.script("geo-a*", "succeed-after=1")
    kuberay.script("geo-a1", "hang")
    jobs.create(cluster_job("geo"))
    pod = wait_until(lambda: live_pod(core, jobs.ns, component), 90, what=f"a running {component}")
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")
    return pod


def test_a_health_label_on_a_ray_node_wakes_the_job(jobs, operator, kuberay, hyperpod_nodes, core) -> None:
    worker = training(jobs, kuberay, hyperpod_nodes, core, 2, "ray-worker")
    node = worker.spec.node_name
    hyperpod_nodes.set_health(node, hp.NodeHealth.PENDING_REBOOT)
    # What stays: the attempt the operator stopped on that node's verdict (the NodeFaults condition clears again
    # once attempt 2, elsewhere, succeeds a second later, and a poll can miss it).
    reacts(
        lambda: attempt(jobs, 0).get("result") == "Stopped" and attempt(jobs, 0).get("node") == node,
        "health label -> attempt stopped on the node",
    )


def test_a_deleted_head_pod_wakes_the_job(jobs, operator, kuberay, hyperpod_nodes, core) -> None:
    head = training(jobs, kuberay, hyperpod_nodes, core, 1, "ray-head")
    core.delete_namespaced_pod(head.metadata.name, jobs.ns, grace_period_seconds=0)
    reacts(lambda: attempt(jobs, 0).get("result") == "Stopped", "head pod deleted -> attempt stopped")


def test_an_available_inference_deployment_wakes_the_job(jobs, operator, kuberay, hyperpod_nodes, api_client) -> None:
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    kuberay.script("geo-a1", "succeed-after=1")
    job = cluster_job("geo", {"spec": {"inference": {"enabled": True, "servedModelName": "geo-lora"}}})
    jobs.create(job)
    apps = client.AppsV1Api(api_client)

    def available() -> bool:
        deps = apps.list_namespaced_deployment(jobs.ns).items
        return bool(deps) and (deps[0].status.available_replicas or 0) >= 1

    def past_deploying() -> bool:
        cond = next((x for x in jobs.status("geo").get("conditions") or [] if x["type"] == "InferenceReady"), {})
        return cond.get("reason") not in (None, "Deploying")

    woke(available, past_deploying, "Deployment available -> InferenceReady past Deploying", event_timeout=150)


def test_a_model_servers_children_and_its_jobs_wake_it(
    jobs, operator, kuberay, hyperpod_nodes, core, api_client, pod_network, tmp_path
) -> None:
    """The server's replica runs on kwok with a gateway that answers the operator (tests/support/fake_gateway.py), so
    the server settles with no pass due for two hours: then a job's report, the job's deletion and a hand edit of
    the server's Deployment each need their watch."""
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(1)
    storage.create_hostpath_claim(core, jobs.ns, "fsx-claim", tmp_path / "fsx")
    servers = Servers(api_client, jobs.ns)
    servers.create(server_doc())
    pod = wait_until(lambda: running_pod(core, jobs.ns, f"{c.LABEL_SERVER}={NAME}"), 90, what="the server's replica")
    replica = pod["metadata"]["name"]
    secret = wait_until(lambda: _or_none(core.read_namespaced_secret, ADMIN, jobs.ns), 30, what="the admin key")
    (tmp_path / "key").write_text(base64.b64decode(secret.data["key"]).decode())
    view = podrun.PodView(pod=replica, env=dict(os.environ), mounts=[], cwd="/", command=[])
    argv = [sys.executable, fake_gateway.__file__, str(tmp_path / "key")]
    gateway = podrun.spawn_in_pod(view, argv, tmp_path / "gateway.log", tmp_path / "root", pod_network.sandbox(pod))
    try:
        wait_phase(servers, "Ready", 90)

        kuberay.script("geo-a1", "succeed-after=1")
        inference = {"enabled": True, "server": NAME, "servedModelName": "geo-lora"}
        pvc = {"claimName": "fsx-claim", "mountPath": "/fsx"}
        created = jobs.create(
            cluster_job("geo", {"spec": {"inference": inference, "checkpoint": {"pvc": pvc, "s3": None}}})
        )
        wait_until(lambda: jobs.status("geo").get("phase") in ("Succeeded", "Serving"), 120, what="geo trained")
        loaded = lambda: [a.get("loadedOn") for a in servers.status().get("adapters") or []] == [[replica]]  # noqa: E731
        jobs.patch_status("geo", {"adapter": adapter_report(f"{job_dir(parse_job(created))}/adapter")})
        reacts(loaded, "a job's report -> its adapter loaded into the server")

        jobs.delete("geo")
        reacts(lambda: not servers.status().get("adapters"), "the job deleted -> its adapter unloaded")

        hand_edit = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "elsewhere:1"}]}}}}
        servers.apps.patch_namespaced_deployment(CHILD, jobs.ns, hand_edit)
        image = lambda: servers.deployment().spec.template.spec.containers[0].image  # noqa: E731
        reacts(lambda: image() == DEFAULT_VLLM_IMAGE, "the server's Deployment edited -> set back")
    finally:
        procs.stop(gateway)
        pod_network.release(pod["metadata"]["uid"])
