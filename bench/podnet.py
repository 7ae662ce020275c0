"""What the local pod network costs (local/mmrl_local/network/podnet.py): making and removing a pod's network namespace,
how long a deleted pod's namespace outlives it (the reaper polls), and what the apiserver relay adds to a request
made from inside a pod compared with the same request from this machine's own network.

Every request is a GET /version over TLS, once on a kept-alive connection and once on a new connection each time
(which is what the trainer's progress patches mostly are). Pods are plain kwok pods on one fake node.

    python bench/podnet.py [--pods 20] [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client

import common
from mmrl_local.cluster import nodes
from mmrl_local.cluster.controlplane import ControlPlane
from mmrl_local.network import podnet
from mmrl_local.node import podrun
from mmrl_local.toolchain import build

NS = "bench-podnet"
# Run inside the pod and on the host alike: n GETs of /version, kept alive and fresh; prints seconds per request.
CLIENT = r"""
import http.client, json, os, ssl, sys, time
host, port, ca, n = os.environ["TARGET_HOST"], int(os.environ["TARGET_PORT"]), sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(cafile=ca)
def get(conn):
    conn.request("GET", "/version"); r = conn.getresponse(); r.read(); assert r.status == 200, r.status
kept, fresh = [], []
conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10); get(conn)
for _ in range(n):
    t = time.perf_counter(); get(conn); kept.append(time.perf_counter() - t)
for _ in range(n):
    t = time.perf_counter(); c = http.client.HTTPSConnection(host, port, context=ctx, timeout=10); get(c); c.close()
    fresh.append(time.perf_counter() - t)
print(json.dumps({"kept_alive": kept, "new_connection": fresh}))
"""


def pod_body(name: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


def wait_ips(core: client.CoreV1Api, names: list[str]) -> list[dict]:
    deadline = time.monotonic() + 120
    while True:
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items if p.status.pod_ip}
        if all(n in pods for n in names):
            return [core.api_client.sanitize_for_serialization(pods[n]) for n in names]
        if time.monotonic() > deadline:
            raise TimeoutError("kwok gave the pods no IPs")
        time.sleep(0.2)


def requests_from(env: dict[str, str], ca: str, n: int, sandbox: podnet.Sandbox | None, work: Path) -> dict:
    argv = [sys.executable, "-c", CLIENT, ca, str(n)]
    if sandbox is None:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)
    view = podrun.PodView(pod=sandbox.pod, env=env, mounts=[], cwd="/", command=[])
    log = work / "client.log"
    log.unlink(missing_ok=True)
    proc = podrun.spawn_in_pod(view, argv, log, work / "root", sandbox)
    if proc.wait(timeout=300) != 0:
        raise RuntimeError(log.read_text())
    return json.loads(log.read_text().strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    reason = podnet.unavailable_reason()
    if reason is not None:
        print(f"bench/podnet.py: skipped, {reason}")
        return 0
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"mmrl-bench-podnet-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    with ControlPlane(binaries=build.build(verbose=False)) as cp:
        assert cp.pod_network is not None, cp.network_note
        net = cp.pod_network
        core = client.CoreV1Api(cp.api_client())
        core.create_namespace({"metadata": {"name": NS}})
        node = nodes.create_cpu_node(core)
        names = [f"p{i}" for i in range(args.pods)]
        for name in names:
            core.create_namespaced_pod(NS, pod_body(name, node))
        pods = wait_ips(core, names)

        setup = []
        for pod in pods:
            t = time.perf_counter()
            net.sandbox(pod)
            setup.append(time.perf_counter() - t)
        boxes = net.sandboxes()

        ca = str(cp.pki.ca_cert)
        host_env = {**os.environ, "TARGET_HOST": "127.0.0.1", "TARGET_PORT": str(cp.api_port)}
        pod_env = {**os.environ, "TARGET_HOST": podnet.GATEWAY, "TARGET_PORT": str(net.service_port)}
        direct = requests_from(host_env, ca, args.requests, None, work)
        relayed = requests_from(pod_env, ca, args.requests, boxes[0], work)

        half = len(boxes) // 2
        release = []
        for box in boxes[:half]:
            t = time.perf_counter()
            net.release(box.uid)
            release.append(time.perf_counter() - t)
        reaped = []
        rng = random.Random(0)
        for box in boxes[half:]:
            time.sleep(rng.uniform(0, net.poll))  # land at a random point of the reaper's round
            t = time.perf_counter()
            core.delete_namespaced_pod(box.pod.split("/", 1)[1], NS, grace_period_seconds=0)
            while any(b.uid == box.uid for b in net.sandboxes()) or os.path.exists(box.netns_path):
                time.sleep(0.02)
            reaped.append(time.perf_counter() - t)

    def ms(samples: list[float]) -> dict[str, float]:
        return common.summary([x * 1000 for x in samples])

    result = {
        "pods": args.pods,
        "requests": args.requests,
        "reaper_poll_s": net.poll,
        "sandbox_setup_ms": ms(setup),
        "sandbox_release_ms": ms(release),
        "pod_deleted_to_namespace_gone_ms": ms(reaped),
        "host_kept_alive_ms": ms(direct["kept_alive"]),
        "pod_kept_alive_ms": ms(relayed["kept_alive"]),
        "host_new_connection_ms": ms(direct["new_connection"]),
        "pod_new_connection_ms": ms(relayed["new_connection"]),
    }
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{key:34} n={value['n']} p50 {value['p50']:.2f} ms p90 {value['p90']:.2f} ms max {value['max']:.2f}")
    common.write_result("podnet", result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
