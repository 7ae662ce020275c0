"""`kubectl logs` (pods/log) for the pods the local kubelet runs: the apiserver calls the node's kubelet endpoint
(InternalIP 127.0.0.1, daemonEndpoints port), which serves the container's output, whole, tailed or followed."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from urllib3.response import HTTPResponse

from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

# Three lines at once; a fourth only when the test tells it to (a file in a hostPath volume), so the test knows the
# fourth was written after its follow request was already open.
SCRIPT = """
import os, time
for i in range(3):
    print(f"line {i}", flush=True)
while not os.path.exists("/signal/go"):
    time.sleep(0.1)
print("late", flush=True)
time.sleep(600)
"""
# Generous: the kubelet sends what the container appends within half a second. A stream that stops fails the test
# with a read timeout instead of hanging it.
READ_TIMEOUT = 60


def read_until(stream: HTTPResponse, wanted: bytes, seen: bytes = b"") -> bytes:
    """Read the open stream until `wanted` has arrived; returns everything read so far."""
    while wanted not in seen:
        chunk = stream.read1()  # what has arrived (at least one byte), or b"" at the end of the stream
        assert chunk, f"the stream ended before {wanted!r} arrived; it had sent {seen!r}"
        seen += chunk
    return seen


def test_pod_logs_are_served_by_the_local_kubelet(api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path):
    signal = tmp_path / "signal"
    signal.mkdir()
    container = {"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", SCRIPT]}
    container["volumeMounts"] = [{"name": "signal", "mountPath": "/signal"}]
    pod = {
        "metadata": {"name": "talker"},
        "spec": {
            "nodeName": None,
            "containers": [container],
            "volumes": [{"name": "signal", "hostPath": {"path": str(signal)}}],
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
        assert core.read_namespaced_pod_log("talker", namespace, container="main", tail_lines=1) == "line 2\n"
        assert_follow_delivers_what_is_written_later(core, namespace, signal / "go")
        with pytest.raises(client.ApiException) as missing:
            core.read_namespaced_pod_log("talker", namespace, container="nope")
        assert missing.value.status in (400, 404)
        core.delete_namespaced_pod("talker", namespace, grace_period_seconds=0)
    assert not kubelet.errors


def assert_follow_delivers_what_is_written_later(core: client.CoreV1Api, namespace: str, go: Path) -> None:
    stream = core.read_namespaced_pod_log(
        "talker",
        namespace,
        container="main",
        follow=True,
        _preload_content=False,
        _request_timeout=(10, READ_TIMEOUT),
    )
    try:
        seen = read_until(stream, b"line 2\n")
        assert seen == b"line 0\nline 1\nline 2\n"  # the whole log so far, and nothing the container was not told
        go.touch()  # only now does the container write its fourth line
        seen = read_until(stream, b"late\n", seen)
        assert seen == b"line 0\nline 1\nline 2\nlate\n"
    finally:
        stream.close()  # a followed stream never ends by itself: drop the connection instead of reusing it
        stream.release_conn()
