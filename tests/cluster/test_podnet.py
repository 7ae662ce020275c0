"""Pods that run for real get their own network namespace on the real control plane (``mmrl_local.network.podnet``): the
pod IP lives only inside it, the host's loopback keeps only loopback addresses, nothing in the cluster's ranges is
routed out of a real interface, a pod reaches the apiserver with its own ServiceAccount token, the apiserver's
proxy reaches the pod, and every namespace, veth and bridge goes with its pod, its node, its run — or, after the run
was killed, with the next ``mmrl_local down``."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_local.cluster import nodes
from mmrl_local.cluster.crd_install import install_mmrl_crd
from mmrl_local.common import procs
from mmrl_local.network import podnet
from mmrl_local.node import podrun
from mmrl_operator.core.builders.identity import build_trainer_identity
from mmrl_operator.core.names import TRAINER_IDENTITY, ray_head_pod_prefix
from tests.support.jobspecs import cluster_job
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def plain_pod(name: str, node: str, service_account: str | None = None) -> dict:
    spec: dict = {"nodeName": node, "containers": [{"name": "main", "image": "busybox", "command": ["sleep"]}]}
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(core: client.CoreV1Api, namespace: str, body: dict) -> dict:
    """Create the pod and return it (as the API stores it) once kwok gave it an IP."""
    core.create_namespaced_pod(namespace, body)
    name = body["metadata"]["name"]

    def ip_assigned():
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.pod_ip else None

    pod = wait_until(ip_assigned, 30, what=f"pod {name} to get an IP")
    return core.api_client.sanitize_for_serialization(pod)


def spawn(pod: dict, sandbox: podnet.Sandbox, argv: list[str], tmp_path: Path, tag: str, env: dict | None = None):
    view = podrun.PodView(pod=pod["metadata"]["name"], env=env or dict(os.environ), mounts=[], cwd="/", command=[])
    return podrun.spawn_in_pod(view, argv, tmp_path / f"{tag}.log", tmp_path / f"root-{tag}", sandbox)


def netns_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def names_on_host() -> str:
    """`ip netns list` and `ip link` as text: what a person would look at."""
    return podnet.ip("netns", "list").stdout + podnet.ip("link").stdout


# -- routes and addresses ---------------------------------------------------------------------------------------


def test_no_address_of_the_cluster_leaves_through_a_real_interface(control_plane) -> None:
    if control_plane.network_note:
        pytest.skip(control_plane.network_note)
    probes = ["10.244.0.1", "10.244.0.5", "10.244.127.254", "10.244.200.9", "10.0.0.1", "10.0.0.250"]
    probes += [podnet.NODE_IP, "10.1.0.77"]
    for address in probes:
        route = podnet.route_get(address)
        # Either nothing sends it anywhere (blackhole) or it goes to a run's bridge, into a pod namespace.
        assert route is None or route["dev"].startswith("mmrlbr"), (address, route)
    blackholes = {r["dst"] for r in podnet.ip_json("route", "show", "type", "blackhole")}
    assert set(podnet.BLACKHOLES) <= blackholes


def test_the_hosts_loopback_carries_only_loopback_addresses(control_plane) -> None:
    for entry in podnet.ip_json("addr", "show", "dev", "lo"):
        for info in entry.get("addr_info") or []:
            assert ipaddress.ip_address(info["local"]).is_loopback, info


def test_the_bridge_address_is_outside_what_kwok_hands_out() -> None:
    gateway = ipaddress.ip_address(podnet.GATEWAY)
    assert gateway in ipaddress.ip_network(podnet.POD_CIDR)
    assert gateway not in ipaddress.ip_network(podnet.KWOK_POD_CIDR)
    assert ipaddress.ip_network(podnet.KWOK_POD_CIDR).subnet_of(ipaddress.ip_network(podnet.POD_CIDR))


def test_interface_names_fit_the_kernels_limit() -> None:
    run = "abcdef"
    assert len(podnet.bridge_name(run)) <= podnet.IFNAMSIZ
    assert len(podnet.veth_name(run, 999_999)) <= podnet.IFNAMSIZ
    with pytest.raises(podnet.PodNetError):
        podnet.veth_name(run, 10_000_000)
    assert {podnet.run_of(n) for n in (podnet.bridge_name(run), podnet.veth_name(run, 7))} == {run}
    assert podnet.run_of(podnet.netns_name(run, 3, "ns/pod")) == run
    assert podnet.run_of("eth0") is None and podnet.run_of("mmrl-zz-1") is None


# -- a pod's own namespace ----------------------------------------------------------------------------------------


def test_a_pod_runs_in_its_own_namespace_that_holds_its_ip_and_is_reached_through_the_apiserver(
    pod_network, core, namespace, hyperpod_nodes, tmp_path
) -> None:
    node = hyperpod_nodes.cpu()
    pod = running(core, namespace, plain_pod("web", node))
    pod_ip = pod["status"]["podIP"]
    box = pod_network.sandbox(pod)
    assert pod_network.sandbox(pod) is box  # one namespace per pod, however often asked

    addrs = {
        (e["ifname"], i["local"], i["prefixlen"])
        for e in podnet.ip_json("-n", box.netns, "addr", "show")
        for i in e.get("addr_info") or []
        if i["family"] == "inet"
    }
    assert addrs == {("lo", "127.0.0.1", 8), ("eth0", pod_ip, 16)}
    assert not podnet.ip_json("-n", box.netns, "route", "show", "default")  # no way out of the machine
    host_addrs = [i["local"] for e in podnet.ip_json("addr", "show") for i in e.get("addr_info") or []]
    assert pod_ip not in host_addrs
    assert podnet.route_get(pod_ip)["dev"] == pod_network.bridge

    # A server in the pod, bound to every interface the pod has, as vLLM binds by default.
    server = spawn(pod, box, [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], tmp_path, "http")
    try:
        # The apiserver's proxy dials the pod IP, as the operator's /v1/models probe and `mmrl chat` do.
        proxied = wait_until(
            lambda: core.connect_get_namespaced_pod_proxy("web:8080", namespace),
            30,
            what="the pod's server through the apiserver's proxy",
            retry_on=(client.ApiException,),
        )
        assert "Directory listing" in proxied
        assert netns_of(server.pid) == f"net:[{os.stat(box.netns_path).st_ino}]" != netns_of(os.getpid())
    finally:
        procs.stop(server)
    assert pod_network.release(pod["metadata"]["uid"]) is True
    assert box.netns not in names_on_host() and box.host_veth not in names_on_host()
    assert podnet.route_get(pod_ip) is None  # back to the blackhole


def test_a_pod_patches_its_job_status_from_its_namespace_with_its_own_token(
    pod_network, api_client, core, custom, namespace, hyperpod_nodes, tmp_path
) -> None:
    install_mmrl_crd(api_client)
    body = cluster_job("reach")
    body["metadata"]["namespace"] = namespace
    job = MultimodalRLJob.model_validate(
        custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, body)
    )
    dyn = DynamicClient(api_client)
    for obj in build_trainer_identity(namespace, {}):  # what the operator grants trainers: patch job status, no more
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        res.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=namespace, field_manager="test")
    node = hyperpod_nodes.cpu()
    # Named as KubeRay names the job's head: the status policy accepts only the job's own Ray pods' tokens.
    pod = running(core, namespace, plain_pod(f"{ray_head_pod_prefix(job.name)}b2c4d", node, TRAINER_IDENTITY))
    box = pod_network.sandbox(pod)
    view = podrun.PodMaterialiser(api_client, tmp_path / "pod").view(pod)  # the projected token, CA, namespace
    assert view.env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"  # this machine's view, replaced for the namespace
    script = (
        "import os; from mmrl_trainer.progress import kube_patcher; "
        "print(os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']); "
        f"kube_patcher({namespace!r}, {job.name!r})({{'status': {{'progress': {{'step': 7, 'attempt': 1}}}}}})"
    )
    proc = podrun.spawn_in_pod(view, [sys.executable, "-c", script], tmp_path / "patch.log", tmp_path / "root", box)
    assert proc.wait(timeout=60) == 0, (tmp_path / "patch.log").read_text()
    assert (tmp_path / "patch.log").read_text().split()[:2] == [podnet.GATEWAY, str(pod_network.service_port)]
    got = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, job.name)
    assert got["status"]["progress"]["step"] == 7


# -- teardown -----------------------------------------------------------------------------------------------------


def test_a_namespace_goes_with_its_pod_with_its_node_and_before_its_ip_is_reused(
    pod_network, core, namespace, hyperpod_nodes, tmp_path
) -> None:
    first, second = hyperpod_nodes.cpu(), hyperpod_nodes.cpu()
    deleted = running(core, namespace, plain_pod("deleted", first))
    orphaned = running(core, namespace, plain_pod("orphaned", second))
    boxes = [pod_network.sandbox(deleted), pod_network.sandbox(orphaned)]
    sleepers = [
        spawn(p, b, ["sleep", "600"], tmp_path, p["metadata"]["name"])
        for p, b in zip((deleted, orphaned), boxes, strict=True)
    ]

    core.delete_namespaced_pod("deleted", namespace, grace_period_seconds=0)
    wait_until(lambda: sleepers[0].poll() is not None, 20, what="the deleted pod's process to be stopped")
    wait_until(lambda: boxes[0].netns not in names_on_host(), 20, what="the deleted pod's namespace to go")
    assert boxes[0].host_veth not in names_on_host()

    nodes.delete_node(core, second, delete_pods=False)  # the pod stays: the pod GC would take 40 s more
    wait_until(lambda: sleepers[1].poll() is not None, 20, what="the process on the deleted node to be stopped")
    wait_until(lambda: boxes[1].netns not in names_on_host(), 20, what="that pod's namespace to go")
    core.delete_namespaced_pod("orphaned", namespace, grace_period_seconds=0)

    # kwok reuses a freed IP: the namespace that had it is gone before a new pod's namespace gets it.
    third = running(core, namespace, plain_pod("reused", first))
    old = pod_network.sandbox(third)
    impostor = {**third, "metadata": {**third["metadata"], "uid": "00000000-0000-0000-0000-000000000001"}}
    new = pod_network.sandbox(impostor)
    assert new.ip == old.ip and new.netns != old.netns
    assert old.netns not in names_on_host()
    pod_network.release(new.uid)


def _start_run(control_plane, pod: dict, tmp_path: Path, mode: str) -> tuple[subprocess.Popen, dict]:
    args = ["127.0.0.1", str(control_plane.api_port), str(tmp_path / mode), json.dumps(pod), mode]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.podnet_run", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    facts = json.loads(proc.stdout.readline())
    return proc, facts


def test_a_run_leaves_nothing_behind_when_it_stops_or_after_it_was_killed(
    control_plane, pod_network, core, namespace, hyperpod_nodes, tmp_path
) -> None:
    node = hyperpod_nodes.cpu()
    pod = running(core, namespace, plain_pod("kept", node))

    normal, facts = _start_run(control_plane, pod, tmp_path, "close")
    assert normal.wait(timeout=60) == 0
    assert facts["run"] not in names_on_host()
    assert procs.wait_gone([facts["pid"]]) == []

    killed, facts = _start_run(control_plane, pod, tmp_path, "hold")
    left = names_on_host()
    assert facts["netns"] in left and facts["veth"] in left and facts["bridge"] in left
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=10)
    assert procs.wait_gone([facts["pid"]]) == []  # the pod's process died with its run
    assert facts["netns"] in names_on_host()  # ... but its namespace, veth and bridge are still there

    env = {**os.environ, "MMRL_CACHE": str(tmp_path / "cache")}  # no state file: only the leftovers to remove
    down = subprocess.run([sys.executable, "-m", "mmrl_local", "down"], capture_output=True, text=True, env=env)
    assert down.returncode == 0, down.stderr
    assert facts["netns"] in down.stdout
    assert facts["run"] not in names_on_host()
    assert not (podnet.REGISTRY / f"{facts['run']}.json").exists()
    # The session's own run is live, so nothing of it was touched.
    assert pod_network.bridge in names_on_host()


def test_without_root_the_run_says_why_in_one_line_and_makes_no_pod_network(monkeypatch, tmp_path) -> None:
    from mmrl_local.cluster.controlplane import ControlPlane

    monkeypatch.setattr(podnet.os, "geteuid", lambda: 1000)
    podnet.unavailable_reason.cache_clear()
    try:
        reason = podnet.unavailable_reason()
        assert reason is not None and reason.startswith("not root") and "\n" not in reason
        assert podnet.install_routes() is not None
        assert podnet.remove_leftovers() == []  # never touches anything it could not have made
        with pytest.raises(podnet.PodNetError, match="not root"):
            podnet.PodNetwork(("127.0.0.1", 1), tmp_path).start()
        cp = ControlPlane(workdir=tmp_path / "cp")
        cp._prepare_network()
        assert cp.network_note == f"pods do not get their own network namespaces here: {reason}"
    finally:
        podnet.unavailable_reason.cache_clear()


def test_a_probe_namespace_of_a_killed_process_is_removed_too(control_plane) -> None:
    if control_plane.network_note:
        pytest.skip(control_plane.network_note)
    """Asserted on the host, not on what this call returns: another test worker's control plane may start and
    remove the dead probe's namespace first, with the same code. A live probe's namespace is never touched."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"mmrl-probe-{gone.pid}-dead"
    live = f"mmrl-probe-{os.getpid()}-live"
    podnet.ip("netns", "add", name)
    podnet.ip("netns", "add", live)
    try:
        removed = podnet.remove_leftovers()
        assert live not in removed
        assert live in names_on_host()
        assert name not in names_on_host()
    finally:
        podnet.ip("netns", "del", live, check=False)


def test_an_ip_is_not_reused_while_the_namespace_that_had_it_is_still_being_removed(
    pod_network, core, namespace, hyperpod_nodes, tmp_path
) -> None:
    """A release stops the pod's processes over a grace period and deletes its host route last; a new pod with the
    same IP plumbed meanwhile would lose its route to that delete (a resumed trainer could not reach the
    apiserver). The new sandbox is refused until the release is done, and then keeps its route."""
    node = hyperpod_nodes.cpu()
    gone = running(core, namespace, plain_pod("gone", node))
    box = pod_network.sandbox(gone)
    stubborn = spawn(gone, box, ["sh", "-c", "trap '' TERM; echo trapped; sleep 600 & wait"], tmp_path, "stubborn")
    log = tmp_path / "stubborn.log"
    wait_until(lambda: log.exists() and "trapped" in log.read_text(), 10, what="the shell to ignore SIGTERM")
    releasing = threading.Thread(target=pod_network.release, args=(box.uid,))
    releasing.start()
    successor = {**gone, "metadata": {**gone["metadata"], "uid": "00000000-0000-0000-0000-000000000002"}}
    wait_until(lambda: box.ip in pod_network._retiring, 5, what="the release to start")
    with pytest.raises(podnet.PodNetError, match="still being released"):
        pod_network.sandbox(successor)
    releasing.join(timeout=30)
    assert stubborn.poll() is not None
    new = pod_network.sandbox(successor)
    assert podnet.route_get(new.ip)["dev"] == pod_network.bridge  # its route outlived the old one's removal
    pod_network.release(new.uid)
