"""`kubectl logs` (pods/log) for the pods the local kubelet runs: the apiserver calls the node's kubelet endpoint
(InternalIP 127.0.0.1, daemonEndpoints port), which serves the container's output, whole, tailed or followed."""

from __future__ import annotations

import pytest
from kubernetes import client

from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

SCRIPT = """
import time
for i in range(3):
    print(f"line {i}", flush=True)
time.sleep(2)
print("late", flush=True)
time.sleep(600)
"""


def test_pod_logs_are_served_by_the_local_kubelet(api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path):
    pod = {
        "metadata": {"name": "talker"},
        "spec": {
            "nodeName": None,
            "containers": [{"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", SCRIPT]}],
        },
    }
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        pod["spec"]["nodeName"] = hyperpod_nodes.cpu(kubelet=True)  # Ready once this kubelet reports it
        core.create_namespaced_pod(namespace, pod)
        wait_until(
            lambda: "line 2" in core.read_namespaced_pod_log("talker", namespace, container="main"),
            60,
            what="the container's output through pods/log",
        )
        assert core.read_namespaced_pod_log("talker", namespace, container="main", tail_lines=1).strip() in (
            "line 2",
            "late",
        )
        stream = core.read_namespaced_pod_log(
            "talker", namespace, container="main", follow=True, _preload_content=False
        )
        seen = b""
        for chunk in stream.stream(amt=64):
            seen += chunk
            if b"late" in seen:
                break
        stream.release_conn()
        assert seen.startswith(b"line 0\nline 1\nline 2\n") and b"late" in seen
        with pytest.raises(client.ApiException) as missing:
            core.read_namespaced_pod_log("talker", namespace, container="nope")
        assert missing.value.status in (400, 404)
        core.delete_namespaced_pod("talker", namespace, grace_period_seconds=0)
    assert not kubelet.errors
