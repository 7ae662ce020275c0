"""The demo's MLflow server and its node fault (issue #29, item 7: the demo hung after its fault when the scheduler
had put the Ray head on the node the MLflow server was pinned to).

On the real scheduler and the local kubelet, with MLflow's own server run for real in its pod: no pod the operator
builds for the demo's job can be scheduled to the node kept for the server, the server's runs outlive its pod, and
when a test forces the server next to the Ray head anyway, the demo's fault takes both and the demo still ends with
its summary, which says why it did not read the run. No Ray and no operator run here: the pod in the head's place
carries the head's labels, which is all the demo's fault looks at."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_local.addons import mlflow_server
from mmrl_local.cluster import storage
from mmrl_local.demo import Demo
from mmrl_local.node.kubelet import Kubelet
from mmrl_operator.cli.plot import from_mlflow
from mmrl_operator.cli.render import as_submitted, render_objects
from tests.support.demo import make_demo as demo_on
from tests.support.operator import Jobs, wait_until

pytestmark = pytest.mark.cluster

READ_TIMEOUT = 10.0  # the summary's budget per MLflow read in these tests (tries of 1 s)


@pytest.fixture
def kubelet(api_client, core, namespace: str, pod_network, hyperpod_nodes, tmp_path: Path) -> Iterator[Kubelet]:
    """The local kubelet for this test's nodes; the MLflow store's volume goes with the test."""
    with Kubelet(api_client, pod_network, tmp_path / "pods") as running:
        yield running
    storage.delete_hostpath_claim(core, namespace, mlflow_server.STORE_CLAIM)
    assert not running.errors, f"the kubelet's loop failed: {running.errors[-3:]}"


def make_demo(control_plane, api_client, namespace: str, tmp_path: Path, said: list[str], **kwargs: Any) -> Demo:
    started = time.monotonic()

    def say(line: str) -> None:
        said.append(line)
        print(f"[{time.monotonic() - started:5.1f}s] {line}", flush=True)

    return demo_on(
        control_plane, api_client, namespace, tmp_path, say=say, mlflow=True, read_timeout=READ_TIMEOUT, **kwargs
    )


def server_url(pod: dict[str, Any]) -> str:
    return f"http://{pod['status']['podIP']}:{mlflow_server.PORT}"


def log_run(url: str, steps: int) -> tuple[str, str]:
    """A run with a reward per step, logged with MLflow's own client as the trainer logs it; (run id, experiment)."""
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(url)
    experiment = mlflow.create_experiment("mmrl-demo")
    run = mlflow.create_run(experiment, run_name="tiny-colors")
    for step in range(1, steps + 1):
        mlflow.log_metric(run.info.run_id, "reward", step / 10, step=step)
    return run.info.run_id, experiment


def job_pod_specs(doc: dict[str, Any], namespace: str) -> dict[str, dict[str, Any]]:
    """Every pod spec the operator builds for the demo's job (`mmrl render`): Ray head, workers, inference. The
    promotion gate decides whether the job serves, not where, and render has no evaluation to pass it with."""
    ungated = copy.deepcopy(doc)
    ungated["spec"]["inference"].pop("promoteWhen", None)
    job = as_submitted(MultimodalRLJob.model_validate(ungated), namespace)
    specs = {}
    for obj in render_objects(job):
        if obj["kind"] == "RayCluster":
            specs["ray-head"] = obj["spec"]["headGroupSpec"]["template"]["spec"]
            for group in obj["spec"]["workerGroupSpecs"]:
                specs[f"ray-worker-{group['groupName']}"] = group["template"]["spec"]
        elif obj["kind"] == "Deployment":
            specs["inference"] = obj["spec"]["template"]["spec"]
    return specs


def unschedulable_because(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    assert not pod.spec.node_name, f"{name} was bound to {pod.spec.node_name}"
    scheduled = next((x for x in pod.status.conditions or [] if x.type == "PodScheduled"), None)
    return scheduled.message if scheduled and scheduled.reason == "Unschedulable" else None


def test_no_pod_of_the_demo_job_can_join_the_mlflow_server_and_its_runs_outlive_its_pod(
    control_plane, api_client, core, namespace, hyperpod_nodes, kubelet, tmp_path
) -> None:
    tracking = mlflow_server.create_node(core)
    hyperpod_nodes.names.append(tracking)
    said: list[str] = []
    d = make_demo(control_plane, api_client, namespace, tmp_path, said)
    d.start_mlflow()
    first = d.mlflow_pod()
    assert first is not None and first["spec"]["nodeName"] == tracking
    assert any(f"on {tracking}, the node kept for tracking" in line for line in said), said

    # Each pod the operator builds for the job, pinned to that node, is refused there by the scheduler for its
    # taint; the same pod tolerating the taint is bound there (so the taint is what keeps it off).
    specs = job_pod_specs(d.doc, namespace)
    d.say("pods of the job, pinned to the MLflow server's node")
    assert set(specs) == {"ray-head", "ray-worker-cpu", "inference"}
    for name, spec in specs.items():
        placement = {k: spec[k] for k in ("affinity", "tolerations") if k in spec}
        selector = {**spec.get("nodeSelector", {}), mlflow_server.HOSTNAME_LABEL: tracking}
        main = {"name": "main", "image": "mmrl/trainer:test", "command": ["sleep", "600"]}  # any image schedules alike
        pod = {**placement, "nodeSelector": selector, "containers": [main]}
        core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": pod})
        tolerating = {**pod, "tolerations": [*pod.get("tolerations", []), {**mlflow_server.TAINT, "operator": "Equal"}]}
        core.create_namespaced_pod(namespace, {"metadata": {"name": f"{name}-tolerating"}, "spec": tolerating})
    for name in specs:
        why = wait_until(lambda name=name: unschedulable_because(core, namespace, name), 60, what=f"{name} refused")
        assert "untolerated taint" in why, why
        bound = wait_until(lambda name=name: core.read_namespaced_pod(f"{name}-tolerating", namespace).spec.node_name)
        assert bound == tracking

    # The runs live on the server's claim: a new pod of the server serves the run the old one took.
    run_id, _ = log_run(server_url(first), steps=3)
    d.say(f"run {run_id} logged; deleting pod {first['metadata']['name']}")
    core.delete_namespaced_pod(first["metadata"]["name"], namespace)
    second = wait_until(
        lambda: (p := d.mlflow_pod()) is not None and p["metadata"]["uid"] != first["metadata"]["uid"] and p,
        180,
        what="a new MLflow server pod, Ready",
    )
    assert second["spec"]["nodeName"] == tracking
    d.say(f"pod {second['metadata']['name']} serves")
    curves = from_mlflow(server_url(second), run_id)  # the default budget: a server just started answers slowly
    assert curves.series("reward") == [(1, 0.1), (2, 0.2), (3, 0.3)]


def test_the_demo_ends_with_its_summary_when_its_fault_takes_the_mlflow_server_with_the_ray_head(
    control_plane, api_client, core, namespace, hyperpod_nodes, kubelet, mmrl_crd, tmp_path
) -> None:
    node = hyperpod_nodes.cpu(kubelet=True)
    said: list[str] = []
    d = make_demo(control_plane, api_client, namespace, tmp_path, said, mlflow_node=node)
    d.start_mlflow()
    d.apply_job()
    # In the Ray head's place, on the MLflow server's node: what the scheduler did on the machine in the issue.
    labels = {c.LABEL_JOB: d.name, c.LABEL_COMPONENT: "ray-head"}
    head = {"name": "ray-head", "image": d.doc["spec"]["trainer"]["image"], "command": ["sleep", "600"]}
    body = {"metadata": {"name": f"{d.name}-head", "labels": labels}, "spec": {"nodeName": node, "containers": [head]}}
    core.create_namespaced_pod(namespace, body)
    wait_until(lambda: core.read_namespaced_pod(body["metadata"]["name"], namespace).status.phase == "Running", 60)
    server = d.mlflow_pod()
    assert server is not None and server["spec"]["nodeName"] == d.trainer_node() == node
    run_id, experiment = log_run(server_url(server), steps=2)
    Jobs(api_client, namespace).patch_status(
        d.name, {"tracking": {"mlflow": {"runId": run_id, "experimentId": experiment}}}
    )

    new = d.replace_trainer_node()
    hyperpod_nodes.names.append(new)
    assert any(f"runs on {node} too and goes down with it" in line for line in said), said
    # The server's new pod names the deleted node and stays Pending, as in the issue.
    wait_until(
        lambda: any(
            x.type == "PodScheduled" and x.reason == "Unschedulable"
            for p in core.list_namespaced_pod(namespace, label_selector=mlflow_server.SELECTOR).items
            for x in p.status.conditions or []
        ),
        60,
        what="the MLflow server's new pod, unschedulable",
    )

    started = time.monotonic()
    summary = d.summary()
    text = summary.render()
    took = time.monotonic() - started
    print(text)
    # One bounded read (the curve, from the Service name this machine cannot resolve); the run's server is not there.
    assert took < 2 * READ_TIMEOUT, took
    assert summary.fault == f"{node} replaced by {new}"
    assert summary.mlflow["run_id"] == run_id
    assert "no MLflow server is serving" in summary.mlflow["error"] and "Unschedulable" in summary.mlflow["error"]
    assert f"MLflow run {run_id}: not read: no MLflow server is serving (pod " in text
    assert summary.plot is None
    assert f"MLflow run {run_id} at {mlflow_server.tracking_uri(namespace)}: gave up reading" in summary.plot_source
    assert any(line.startswith(f"mmrl plot {d.name}: MLflow run {run_id}") for line in said), said
    assert text.startswith(f"job {d.name}: ") and f"node fault: {node} replaced by {new}" in text
