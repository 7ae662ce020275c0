"""A failed test's report shows every container a local kubelet ran for it (tests/support/failure_logs.py): the real
kubelet lists each container's log, a deleted pod's too, and says which still run."""

from __future__ import annotations

import pytest

from mmrl_local.node.kubelet import RUNNING, Kubelet
from tests.support.failure_logs import container_logs, tail
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def pod(node: str, name: str, script: str) -> dict:
    container = {"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", script]}
    spec = {"nodeName": node, "restartPolicy": "Never", "containers": [container]}
    return {"metadata": {"name": name}, "spec": spec}


def test_the_report_lists_every_container_a_kubelet_ran_with_its_tail_and_whether_it_runs(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        assert kubelet in RUNNING
        node = hyperpod_nodes.cpu(kubelet=True)
        core.create_namespaced_pod(namespace, pod(node, "done", "print('\\n'.join(f'line {i}' for i in range(100)))"))
        waiting = "import time; print('waiting for weights', flush=True); time.sleep(600)"
        core.create_namespaced_pod(namespace, pod(node, "loading", waiting))
        wait_until(lambda: core.read_namespaced_pod("done", namespace).status.phase == "Succeeded", 60, what="done")
        wait_until(lambda: "weights" in core.read_namespaced_pod_log("loading", namespace), 60, what="loading")
        core.delete_namespaced_pod("done", namespace, grace_period_seconds=0)
        wait_until(lambda: not any(w.name == "done" for w in kubelet.workers.values()), 60, what="done forgotten")

        logs = {name: (path, running) for name, path, running in container_logs()}
        assert logs[f"{namespace}/done/main"][1] is False
        assert tail(logs[f"{namespace}/done/main"][0], 2) == "line 98\nline 99"
        assert logs[f"{namespace}/loading/main"][1] is True
        assert "waiting for weights" in tail(logs[f"{namespace}/loading/main"][0])
    assert kubelet not in RUNNING
