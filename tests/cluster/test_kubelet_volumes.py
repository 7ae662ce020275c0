"""The local kubelet mounts a volume's sub-path as a kubelet does: one not there yet is made in the volume (a shared
vLLM server mounts <claim>/<namespace> before any job of that namespace has written to it)."""

from __future__ import annotations

import pytest

from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def test_a_sub_path_not_there_yet_is_made_in_the_volume(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    volume = tmp_path / "claim"
    volume.mkdir()
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        write = "open('/data/written', 'w').write('from the pod')"
        container = {"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", write]}
        container["volumeMounts"] = [{"name": "claim", "mountPath": "/data", "subPath": "mmrl/team-a"}]
        spec = {"nodeName": node, "restartPolicy": "Never", "containers": [container]}
        spec["volumes"] = [{"name": "claim", "hostPath": {"path": str(volume)}}]
        core.create_namespaced_pod(namespace, {"metadata": {"name": "writer"}, "spec": spec})
        phase = wait_until(
            lambda: (p := core.read_namespaced_pod("writer", namespace).status.phase) in ("Succeeded", "Failed") and p,
            60,
            what="the pod to end",
        )
        assert phase == "Succeeded"
        assert (volume / "mmrl" / "team-a" / "written").read_text() == "from the pod"
        assert not kubelet.errors
