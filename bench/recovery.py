"""Recovery latency: time from a HyperPod fault label on a node hosting a job's worker to the next attempt's RayJob.

Runs the real operator (subprocess) against the local control plane with the KubeRay stand-in, one job whose
attempts run until stopped, and injects N faults (alternating PendingReboot and PendingReplacement with a new
node joining) on whichever node hosts the worker. Prints every sample and p50/p90/p99.

    python bench/recovery.py --faults 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from mmrl_local import nodes  # noqa: E402
from mmrl_local.controlplane import ControlPlane  # noqa: E402
from mmrl_local.crd_install import install_mmrl_crd  # noqa: E402
from mmrl_local.kuberay_standin import KubeRayStandIn  # noqa: E402
from tests.support.jobspecs import cluster_job  # noqa: E402
from tests.support.operator import Jobs, OperatorProcess, wait_until  # noqa: E402


def worker_node(core: client.CoreV1Api, ns: str, job: str) -> str:
    pods = core.list_namespaced_pod(ns, label_selector=f"mmrl.dev/job={job},mmrl.dev/component=ray-worker").items
    live = [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp and p.status.phase == "Running"]
    return live[0].spec.node_name if live else ""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmrl-bench-"))
    samples: list[tuple[str, float]] = []
    with ControlPlane() as cp:
        api = cp.api_client()
        install_mmrl_crd(api)
        core = client.CoreV1Api(api)
        nodes.create_cpu_node(core)
        nodes.create_gpu_nodes(core, 3)
        core.create_namespace({"metadata": {"name": "bench"}})
        with KubeRayStandIn(api, default_script="hang"), OperatorProcess(cp.kubeconfig, work / "operator.log"):
            jobs = Jobs(api, "bench")
            jobs.create(cluster_job("bench", {"spec": {"resilience": {"maxInfraRestarts": 1000}}}))
            for i in range(args.faults):
                attempt = i + 1
                wait_until(lambda a=attempt: jobs.status("bench").get("attempt") == a, 120, what=f"attempt {attempt}")
                node = wait_until(lambda: worker_node(core, "bench", "bench"), 60, what="a running worker")
                kind = "PendingReboot" if i % 2 == 0 else "PendingReplacement"
                t0 = time.monotonic()
                nodes.set_health(core, node, f"Unschedulable{kind}")
                wait_until(lambda a=attempt: f"bench-a{a + 1}" in jobs.ray_names("rayjobs"), 120, interval=0.05)
                samples.append((kind, time.monotonic() - t0))
                print(f"fault {attempt:2d} {kind:<18} on {node}: next RayJob after {samples[-1][1]:.2f}s", flush=True)
                if kind == "PendingReboot":
                    nodes.set_health(core, node, "Schedulable")  # the reboot finished; the node rejoins the pool
                else:
                    nodes.replace_node(core, node)
    values = [s for _, s in samples]
    print(f"\nrecovery latency over {len(values)} faults (fault label -> next attempt's RayJob created):")
    p50, p90, p99 = statistics.median(values), percentile(values, 0.9), percentile(values, 0.99)
    print(f"  p50 {p50:.2f}s  p90 {p90:.2f}s  p99 {p99:.2f}s  min {min(values):.2f}s  max {max(values):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
