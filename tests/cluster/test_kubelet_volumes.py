"""The local kubelet mounts a volume's sub-path as a kubelet does: one not there yet is made in the volume (a shared
vLLM server mounts <claim>/<namespace> before any job of that namespace has written to it)."""

from __future__ import annotations

import pytest

from mmrl_local.node.kubelet import Kubelet
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def ended(core, namespace: str, name: str, spec: dict) -> str:  # type: ignore[no-untyped-def]
    """Run a pod to its end; its phase."""
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
    return wait_until(  # type: ignore[no-any-return]
        lambda: (p := core.read_namespaced_pod(name, namespace).status.phase) in ("Succeeded", "Failed") and p,
        60,
        what=f"pod {name} to end",
    )


def one_shot(node: str, code: str, mount: dict, volume: dict) -> dict:
    """A pod that runs ``code`` once on ``node`` with one volume mounted."""
    container = {"name": "main", "image": "mmrl/trainer:test", "command": ["python", "-c", code]}
    container["volumeMounts"] = [mount]
    return {"nodeName": node, "restartPolicy": "Never", "containers": [container], "volumes": [volume]}


def test_a_sub_path_not_there_yet_is_made_in_the_volume(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    volume = tmp_path / "claim"
    volume.mkdir()
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        write = "open('/data/written', 'w').write('from the pod')"
        mount = {"name": "claim", "mountPath": "/data", "subPath": "mmrl/team-a"}
        spec = one_shot(node, write, mount, {"name": "claim", "hostPath": {"path": str(volume)}})
        assert ended(core, namespace, "writer", spec) == "Succeeded"
        assert (volume / "mmrl" / "team-a" / "written").read_text() == "from the pod"
        assert not kubelet.errors


def test_a_sub_path_that_names_a_file_of_a_config_map_mounts_that_file(
    api_client, core, namespace, pod_network, hyperpod_nodes, tmp_path
):
    """Kueue's manager mounts its config.yaml this way (a ConfigMap key by subPath)."""
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"config.yaml": "a: 1\n"}})
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        read = "print(open('/etc/app/config.yaml').read(), flush=True)"
        mount = {"name": "cfg", "mountPath": "/etc/app/config.yaml", "subPath": "config.yaml"}
        spec = one_shot(node, read, mount, {"name": "cfg", "configMap": {"name": "cfg"}})
        assert ended(core, namespace, "reader", spec) == "Succeeded", core.read_namespaced_pod(
            "reader", namespace
        ).status
        assert core.read_namespaced_pod_log("reader", namespace).strip() == "a: 1"
        assert not kubelet.errors
