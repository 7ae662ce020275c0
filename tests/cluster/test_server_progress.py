"""What a wait on a server reads of it (tests/support/server_progress.py), on the real local kubelet: the CPU a
silent container's process tree uses, what it logs, and an exit that fails the wait at once with its last words."""

from __future__ import annotations

import pytest

from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until
from tests.support.server_progress import ServerExited, ServerProgress

pytestmark = pytest.mark.cluster

# A parent that stays idle while its child spins without logging: vLLM's API server and its engine core.
SILENT_WORK = """
import subprocess, sys
subprocess.run([sys.executable, "-c", "while True: pass"])
"""
FAILS = "import sys; print('loading the model'); print('RuntimeError: no CPU attention for head_dim 24'); sys.exit(3)"


def pod(node: str, name: str, script: str, restart: str = "Always") -> dict:
    container = {"name": "vllm", "image": "mmrl/trainer:test", "command": ["python", "-c", script]}
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    spec = {"nodeName": node, "restartPolicy": restart, "containers": [container]}
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def test_a_silent_servers_child_processes_count_as_progress(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        core.create_namespaced_pod(namespace, pod(node, "busy", SILENT_WORK))
        progress = ServerProgress(core, kubelet, namespace, "app=busy")
        first = wait_until(lambda: (p := progress()) and p[1] > 0 and p, 60, what="the container's CPU")
        wait_until(lambda: progress()[1] >= first[1] + 0.5, 60, what="half a CPU second more, with nothing logged")
        assert progress()[0] == 0


def test_a_server_that_exits_with_an_error_fails_the_wait_with_its_last_words(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        core.create_namespaced_pod(namespace, pod(node, "broken", FAILS))
        progress = ServerProgress(core, kubelet, namespace, "app=broken")

        def exited() -> str:
            try:
                progress()
            except ServerExited as err:
                return str(err)
            return ""

        said = wait_until(exited, 60, what="the exit to be seen")
        assert "broken/vllm exited 3" in said and "no CPU attention for head_dim 24" in said
