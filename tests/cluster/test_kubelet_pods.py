"""The local kubelet finishes a graceful delete as a kubelet does: SIGTERM, the grace period, SIGKILL, and the pod
object goes, also for a process that takes its time to stop (as a draining Ray node does). And a pod runs from its
image wherever that image lives on this machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_local.addons import mlflow_server
from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

SLOW_TO_STOP = """
import signal, sys, time
def drain(*_):
    print("draining", flush=True)
    time.sleep(3)
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("up", flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("grace", [30, 1])
def test_a_graceful_delete_ends_with_the_pod_object_gone(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path, grace
):
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        spec = {"nodeName": node, "terminationGracePeriodSeconds": grace}
        spec["containers"] = [{"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", SLOW_TO_STOP]}]
        core.create_namespaced_pod(namespace, {"metadata": {"name": "slow"}, "spec": spec})
        wait_until(lambda: core.read_namespaced_pod("slow", namespace).status.phase == "Running", 60, what="running")
        wait_until(lambda: "up" in core.read_namespaced_pod_log("slow", namespace), 30, what="started")
        core.delete_namespaced_pod("slow", namespace)

        def gone() -> bool:
            try:
                core.read_namespaced_pod("slow", namespace)
            except client.ApiException as err:
                return err.status == 404
            return False

        wait_until(gone, grace + 30, what="the pod object removed by the kubelet")
    assert not kubelet.errors


def test_an_image_that_is_a_venv_under_tmp_stays_visible_through_the_pods_private_tmp(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path, monkeypatch
):
    """MLflow's image is a venv of its own under $MMRL_CACHE; a cache under /tmp (CI's cold-cache runs) was hidden by
    the pod's private /tmp, so `mlflow` resolved to another venv's and the server never came up."""
    venv = Path(tempfile.mkdtemp(prefix="mmrl-image-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        monkeypatch.setenv("MMRL_MLFLOW_PYTHON", str(venv / "bin" / "python"))
        with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
            node = hyperpod_nodes.cpu(kubelet=True)
            command = ["python", "-c", "import sys; print('prefix', sys.prefix, flush=True)"]
            spec = {"nodeName": node, "restartPolicy": "Never"}
            spec["containers"] = [{"name": "main", "image": mlflow_server.IMAGE, "command": command}]
            core.create_namespaced_pod(namespace, {"metadata": {"name": "from-venv"}, "spec": spec})
            said = wait_until(
                lambda: "prefix" in (text := core.read_namespaced_pod_log("from-venv", namespace)) and text,
                60,
                what="the container's python to say where it runs from",
            )
        assert said.split()[-1] == str(venv)
        assert not kubelet.errors
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_a_failed_container_that_asks_for_its_log_as_termination_message_gets_its_last_lines(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    """terminationMessagePolicy FallbackToLogsOnError, as a kubelet applies it: the adapter checks (an init container
    and a check pod) report their broken rules this way, and the operator quotes them."""
    script = "import sys\nfor i in range(100): print(f'line {i}', file=sys.stderr)\nsys.exit(3)"
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        spec = {"nodeName": node, "restartPolicy": "Never"}
        spec["containers"] = [
            {"name": name, "image": "mmrl/trainer:test", "command": ["python", "-c", script], **policy}
            for name, policy in (("asks", {"terminationMessagePolicy": "FallbackToLogsOnError"}), ("plain", {}))
        ]
        core.create_namespaced_pod(namespace, {"metadata": {"name": "refuses"}, "spec": spec})
        pod = wait_until(
            lambda: (p := core.read_namespaced_pod("refuses", namespace)).status.phase == "Failed" and p,
            60,
            what="the pod failed",
        )
    ended = {s.name: s.state.terminated for s in pod.status.container_statuses}
    assert ended["asks"].exit_code == 3 and ended["asks"].message.splitlines() == [f"line {i}" for i in range(20, 100)]
    assert ended["plain"].exit_code == 3 and not ended["plain"].message
    assert not kubelet.errors
