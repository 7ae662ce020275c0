"""The local kubelet finishes a graceful delete as a kubelet does: SIGTERM, the grace period, SIGKILL, and the pod
object goes, also for a process that takes its time to stop (as a draining Ray node does) and for one that ignores
SIGTERM. And a pod runs from its image wherever that image lives on this machine."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_local.addons import mlflow_server
from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

# Each container leaves what it did in /markers, a hostPath volume the test reads: the pod object (and with it the
# containers' statuses) is gone by the time the test looks.
DRAINS = """
import signal, sys, time
def drain(*_):
    open("/markers/term", "w").close()
    time.sleep(2)  # finishing its work, as a Ray node drains
    open("/markers/drained", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("up", flush=True)
while True:
    time.sleep(1)
"""
# Holds a lock on /markers/alive for as long as it lives: the kernel drops the lock when the process dies, so the
# test sees the moment of the kill without any clock inside the pod.
IGNORES_TERM = """
import fcntl, signal, time
alive = open("/markers/alive", "w")
fcntl.flock(alive, fcntl.LOCK_EX)
signal.signal(signal.SIGTERM, lambda *_: open("/markers/term", "w").close())
print("up", flush=True)
while True:
    time.sleep(1)
"""


def start_pod(core: client.CoreV1Api, namespace: str, node: str, script: str, markers: Path, grace: int) -> None:
    markers.mkdir()
    spec = {"nodeName": node, "terminationGracePeriodSeconds": grace}
    spec["containers"] = [
        {
            "name": "main",
            "image": "mmrl/trainer:test",
            "command": ["python", "-c", script],
            "volumeMounts": [{"name": "markers", "mountPath": "/markers"}],
        }
    ]
    spec["volumes"] = [{"name": "markers", "hostPath": {"path": str(markers)}}]
    core.create_namespaced_pod(namespace, {"metadata": {"name": "slow"}, "spec": spec})
    wait_until(lambda: core.read_namespaced_pod("slow", namespace).status.phase == "Running", 60, what="running")
    wait_until(lambda: "up" in core.read_namespaced_pod_log("slow", namespace), 30, what="started")


def pod_gone(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_pod("slow", namespace)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def lock_released(path: Path) -> bool:
    """Whether no process holds the lock on `path` any more (its holder died)."""
    with open(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def test_a_graceful_delete_sends_sigterm_lets_the_container_drain_and_removes_the_pod_object(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    markers = tmp_path / "markers"
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        start_pod(core, namespace, hyperpod_nodes.cpu(kubelet=True), DRAINS, markers, grace=30)
        core.delete_namespaced_pod("slow", namespace)
        wait_until(lambda: pod_gone(core, namespace), 90, what="the pod object removed by the kubelet")
    # SIGTERM came first (a SIGKILL runs no handler), and the drain ran to its end within the grace period.
    assert sorted(p.name for p in markers.iterdir()) == ["drained", "term"]
    assert not kubelet.errors


def test_a_container_that_ignores_sigterm_is_killed_once_its_grace_period_is_over(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    grace, markers = 3, tmp_path / "markers"
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        start_pod(core, namespace, hyperpod_nodes.cpu(kubelet=True), IGNORES_TERM, markers, grace=grace)
        assert not lock_released(markers / "alive")
        asked = time.monotonic()
        core.delete_namespaced_pod("slow", namespace)
        wait_until((markers / "term").exists, 30, what="the container to get SIGTERM")
        wait_until(lambda: lock_released(markers / "alive"), grace + 60, what="the container to be killed")
        lived = time.monotonic() - asked
        wait_until(lambda: pod_gone(core, namespace), 60, what="the pod object removed by the kubelet")
    # A lower bound that load cannot break: the kubelet starts the grace period only after the delete was asked for,
    # and the lock is seen free only after the kill. Killed sooner, the container did not get its grace period.
    assert lived >= grace, f"killed {lived:.1f}s after the delete, within its {grace}s grace period"
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


def test_an_emptydir_is_the_pods_shared_by_its_containers_and_read_only_where_a_mount_says_so(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    """A ModelServer replica's gateway writes the staged adapters into an emptyDir that its vLLM container mounts
    read-only: one directory for the pod, whichever container mounts it."""
    writes = "open('/shared/copy', 'w').write('staged'); print('written', flush=True)"
    reads = (
        "import os, time\n"
        "while not os.path.exists('/shared/copy'): time.sleep(0.1)\n"
        "try:\n    open('/shared/mine', 'w')\nexcept OSError as err:\n    print('refused', err.errno, flush=True)\n"
        "print('read', open('/shared/copy').read(), flush=True)"
    )
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        spec = {"nodeName": node, "restartPolicy": "Never", "volumes": [{"name": "shared", "emptyDir": {}}]}
        spec["containers"] = [
            {
                "name": name,
                "image": "mmrl/trainer:test",
                "command": ["python", "-c", script],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": read_only}],
            }
            for name, script, read_only in (("writer", writes, False), ("reader", reads, True))
        ]
        core.create_namespaced_pod(namespace, {"metadata": {"name": "sharing"}, "spec": spec})
        wait_until(
            lambda: core.read_namespaced_pod("sharing", namespace).status.phase == "Succeeded", 60, what="both done"
        )
        said = core.read_namespaced_pod_log("sharing", namespace, container="reader").split()
    assert said == ["refused", "30", "read", "staged"]  # EROFS for the read-only mount, the writer's file read
    assert not kubelet.errors
