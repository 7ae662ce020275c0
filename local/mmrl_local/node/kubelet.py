"""A kubelet for the local control plane's nodes whose pods run for real (the real KubeRay's Ray pods and its
submitter Job, the inference pod), next to kwok, which fakes every other node.

kwok manages only nodes annotated ``kwok.x-k8s.io/node=fake``. A node created with ``nodes.node_body(...,
kubelet=True)`` carries ``mmrl-local.dev/kubelet`` instead, and this kubelet is its kubelet:

- the node: it reports status (Ready, or NotReady with the reason a test put in ``mmrl-local.dev/not-ready``, as
  for kwok's nodes; addresses, node info) and renews the node's Lease in ``kube-node-lease``, so the node lifecycle
  controller treats it as any node.
- its pods: each gets an IP from ``POD_RANGE`` (the half of the pod network kwok does not use), written to
  ``status.podIP``, and a ``kubelet_pod.PodWorker`` that runs it in its own network namespace and reports its
  status. Every Service of a running pod's namespace resolves through the pod's /etc/hosts (``etchosts``).
- a node that is deleted (a HyperPod replacement) takes its pods' processes and namespaces with it at once.

The loop is level-triggered: every pass lists nodes, pods, Services and EndpointSlices again.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from mmrl_local.cluster import hyperpod as hp
from mmrl_local.common import loops
from mmrl_local.common.clock import micro_now, now_iso
from mmrl_local.network import podnet
from mmrl_local.node import images
from mmrl_local.node.kubelet_logs import LogServer
from mmrl_local.node.kubelet_pod import PodWorker, finish_delete

LOG_ADDRESS = "127.0.0.1"  # the apiserver reaches the log endpoint here (test traffic stays on loopback)
POD_RANGE = "10.244.128.0/17"  # kwok hands out podnet.KWOK_POD_CIDR, the other half; podnet.slice_of narrows it
LEASE_SECONDS = 40


def is_ours(node: dict[str, Any]) -> bool:
    return hp.KUBELET_ANNOTATION in (node["metadata"].get("annotations") or {})


def node_status(node: dict[str, Any], heartbeat: str, log_port: int) -> dict[str, Any]:
    """The status this kubelet reports for ``node`` now: Ready unless a NotReady reason is set on it. Its address is
    loopback and its kubelet port the log endpoint's (kubelet_logs), where the apiserver sends pods/log."""
    reason = (node["metadata"].get("annotations") or {}).get(hp.NOT_READY_ANNOTATION)
    old = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}

    def condition(kind: str, status: str, why: str, message: str) -> dict[str, Any]:
        prev = old.get(kind)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == status else heartbeat
        return {
            "type": kind,
            "status": status,
            "reason": why,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        }

    ready = (
        condition("Ready", "False", reason, "node reported NotReady (mmrl-local fault injection)")
        if reason
        else condition("Ready", "True", "KubeletReady", "mmrl-local kubelet is posting ready status")
    )
    pressure = [
        condition(kind, "False", f"KubeletHas{what}", f"kubelet has {what.lower()}")
        for kind, what in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    return {
        "conditions": [*pressure, ready],
        "addresses": [
            {"type": "InternalIP", "address": LOG_ADDRESS},
            {"type": "Hostname", "address": node["metadata"]["name"]},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": log_port}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "HyperPod node (mmrl-local kubelet: pods run on this machine)",
            "kubeletVersion": "mmrl-local",
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "mmrl-local://mountns",
            "kernelVersion": "",
            "bootID": "",
            "machineID": "",
            "systemUUID": "",
        },
    }


# The kubelets started in this process and not yet closed: a failed test's report shows their pods' logs.
RUNNING: weakref.WeakSet[Kubelet] = weakref.WeakSet()


@dataclass(frozen=True)
class ContainerLog:
    name: str  # namespace/pod/container
    path: Path
    running: bool
    pid: int | None = None  # the container's PID 1 on this machine while it runs


class Kubelet:
    """``start()`` it (or use it as a context manager); ``close()`` stops every pod it runs."""

    def __init__(
        self,
        api: client.ApiClient,
        network: podnet.PodNetwork,
        workdir: Path,
        *,
        image_env: Callable[[str], dict[str, str]] | None = None,
        poll: float = 0.5,
        heartbeat: float = 10.0,
    ) -> None:
        self.api, self.core = api, client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.network, self.workdir = network, workdir
        self.image_env = image_env or images.image_env
        self.poll, self.heartbeat = poll, heartbeat
        self.workers: dict[str, PodWorker] = {}
        self.ran: list[PodWorker] = []  # every pod this kubelet started, running or not (container_logs)
        self._ips: dict[str, str] = {}  # pod uid -> the IP this kubelet gave it
        self._cursor = 0
        self.pod_range = podnet.slice_of(POD_RANGE)
        self._beats: dict[str, float] = {}
        self._reported: dict[str, str] = {}  # node -> the Ready status last written
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmrl-local-kubelet", daemon=True)
        self.errors: list[str] = []
        self.logs = LogServer(self.log_file, workdir)

    def start(self) -> Kubelet:
        self.logs.start()
        self._thread.start()
        RUNNING.add(self)
        return self

    def close(self) -> None:
        RUNNING.discard(self)
        self._stop.set()
        self.logs.close()
        self._thread.join(timeout=30)
        for worker in list(self.workers.values()):
            worker.stop(wait=False)
        for worker in list(self.workers.values()):
            worker.stop()
        self.workers.clear()

    def __enter__(self) -> Kubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_file(self, namespace: str, pod: str, container: str) -> Path | None:
        """The output file of a container this kubelet runs (for the log endpoint, kubelet_logs)."""
        for worker in list(self.workers.values()):
            if (worker.ns, worker.name) == (namespace, pod):
                names = {c.name for c in worker.containers + worker.init}
                return worker.workdir / "logs" / f"{container}.log" if container in names else None
        return None

    def container_logs(self) -> list[ContainerLog]:
        """The output file of every container of every pod this kubelet started, deleted pods' included, and whether
        its process still runs: what a failed test's report shows (tests/support/failure_logs.py)."""
        return [
            ContainerLog(f"{w.ns}/{w.name}/{c.name}", w.workdir / "logs" / f"{c.name}.log", c.running(), c.pid_one())
            for w in list(self.ran)
            for c in [*w.init, *w.containers]
            if c.proc is not None or c.terminated is not None
        ]

    # -- the loop -------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        # A pass that fails (an apiserver hiccup, or worse) is logged; the next pass reads everything again.
        loops.run_passes(
            "kubelet",
            self.sync,
            self._stop,
            interval=self.poll,
            backoff=self.poll,
            on_error=lambda err: self.errors.append(str(err)),
        )

    def sync(self) -> None:
        nodes = _items(self.core.list_node(_preload_content=False))
        ours = {n["metadata"]["name"]: n for n in nodes if is_ours(n)}
        for node in ours.values():
            self._report(node)
        pods = _items(self.core.list_pod_for_all_namespaces(_preload_content=False))
        mine = [p for p in pods if (p.get("spec") or {}).get("nodeName") in ours]
        seen = {p["metadata"]["uid"] for p in mine}
        for uid in [u for u in self.workers if u not in seen]:  # deleted, or its node went (pods go with it)
            self.workers.pop(uid).stop(wait=False)
        self._forget_ips(seen)
        used = {(p.get("status") or {}).get("podIP") for p in pods}
        services = self._services() if mine else ([], [])
        for pod in mine:
            uid = pod["metadata"]["uid"]
            worker = self.workers.get(uid)
            if worker is not None and not worker.alive():  # it ended (Succeeded/Failed): only a delete is left
                if pod["metadata"].get("deletionTimestamp"):
                    self._finish_delete(pod)
                continue
            if worker is not None:
                worker.update(pod)
                worker.refresh_hosts(*services)
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._finish_delete(pod)  # never started here (or this kubelet restarted): nothing to stop
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            pod = self._assign_ip(pod, used)
            worker = PodWorker(
                self.api,
                pod,
                self.network,
                self.workdir / "pods" / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}_{uid[:8]}",
                self.image_env,
                podnet.NODE_IP,
            )
            worker.refresh_hosts(*services)
            self.workers[uid] = worker.start()
            self.ran.append(worker)

    def _services(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every Service and EndpointSlice: a pod's hosts file names the Services of all namespaces (etchosts)."""
        services = _items(self.core.list_service_for_all_namespaces(_preload_content=False))
        return services, _items(self.discovery.list_endpoint_slice_for_all_namespaces(_preload_content=False))

    # -- IPs ------------------------------------------------------------------------------------------------

    def _assign_ip(self, pod: dict[str, Any], used: set[str | None]) -> dict[str, Any]:
        uid = pod["metadata"]["uid"]
        current = (pod.get("status") or {}).get("podIP")
        if current:
            self._ips[uid] = current
            return pod
        # Round robin over the range, as an IPAM does, so a freed address is not handed out again at once; an
        # address another run on this machine routes to its own bridge is skipped too.
        pod_range = self.pod_range
        routed = {r.get("dst") for r in podnet.ip_json("route", "show", "root", str(pod_range))}
        taken = used | routed | set(self._ips.values()) | {podnet.GATEWAY}
        size = pod_range.num_addresses - 2  # the range's hosts: pod_range[1] .. pod_range[size]
        start = self._cursor % size
        index = next(i for i in [*range(start, size), *range(start)] if str(pod_range[1 + i]) not in taken)
        address, self._cursor = str(pod_range[1 + index]), index + 1
        self._ips[uid] = address
        used.add(address)
        pod.setdefault("status", {})
        pod["status"].update({"podIP": address, "phase": "Pending"})
        return pod

    def _forget_ips(self, live: set[str]) -> None:
        for uid in [u for u in self._ips if u not in live]:
            self._ips.pop(uid)

    def _finish_delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        finish_delete(self.core, meta["namespace"], meta["name"], meta["uid"])

    # -- nodes ----------------------------------------------------------------------------------------------

    def _report(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        want = "False" if hp.NOT_READY_ANNOTATION in (node["metadata"].get("annotations") or {}) else "True"
        due = time.monotonic() - self._beats.get(name, 0.0) >= self.heartbeat
        if not due and self._reported.get(name) == want:
            return
        try:
            self.core.patch_node_status(name, {"status": node_status(node, now_iso(), self.logs.port)})
            self._renew_lease(name, node["metadata"]["uid"], micro_now())
        except ApiException as err:
            if err.status != 404:
                raise
            return
        self._beats[name], self._reported[name] = time.monotonic(), want

    def _renew_lease(self, node: str, uid: str, now: str) -> None:
        spec = {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now}
        try:
            self.coord.patch_namespaced_lease(node, "kube-node-lease", {"spec": spec})
        except ApiException as err:
            if err.status != 404:
                raise
            body = {
                "metadata": {
                    "name": node,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}],
                },
                "spec": spec,
            }
            with contextlib.suppress(ApiException):
                self.coord.create_namespaced_lease("kube-node-lease", body)


def running_pod(core: client.CoreV1Api, namespace: str, selector: str) -> dict | None:
    """The newest Running pod with an IP matching ``selector``, as a plain dict."""
    pods = [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        if p.status and p.status.phase == "Running" and p.status.pod_ip and not p.metadata.deletion_timestamp
    ]
    if not pods:
        return None
    newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
    return core.api_client.sanitize_for_serialization(newest)


def _items(response: Any) -> list[dict[str, Any]]:
    """A LIST's items as the API sent them. The loop lists every node, pod, Service and EndpointSlice twice a second;
    the client's typed models cost ten times the request (20 pods: 15 ms to build objects and turn them back into
    dicts, 1.4 ms to parse the JSON), and a kubelet reads dicts anyway."""
    return json.loads(response.data)["items"]
