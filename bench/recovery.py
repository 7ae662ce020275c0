"""Recovery latency: time from a HyperPod fault label on a node hosting a job's worker to the next attempt's RayJob.

Runs the real operator (subprocess, production resync) against the local control plane with the KubeRay stand-in
(`hang`: attempts run until stopped; real KubeRay would fail every RayJob after ~30-60 s under kwok, as no Ray
dashboard answers), J jobs training at once (the tests' HyperPod job: one 8-GPU worker, so one job per fake p5
node), and injects N faults one after another, each on the worker node of a job picked at random, alternating
UnschedulablePendingReboot (the node rejoins after recovery) and UnschedulablePendingReplacement (the node goes
NotReady, is deleted, and a new one joins). t0 is just before the label patch; the end is when a watch delivers
the job's next RayJob. A fault stops every job with a pod on the node (heads share the GPU nodes), as on a real
cluster; only the chosen job's recovery is timed. Prints every sample and p50/p90/p99.

    python bench/recovery.py [--jobs 20] [--faults 50]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client

import common
from mmrl_local.addons.operator_process import OperatorProcess
from mmrl_local.cluster import nodes
from mmrl_local.standin.kuberay_standin import KubeRayStandIn
from mmrl_operator.core.observed import raycluster_ready
from tests.support.jobspecs import cluster_job
from tests.support.operator import Jobs, wait_until

NS = "bench"
KINDS = ("PendingReboot", "PendingReplacement")
STAGES = ("fault_to_stop", "stop_to_next_rayjob", "cluster_ready_again_to_next_rayjob")


def worker_node(core: client.CoreV1Api, job: str) -> str:
    pods = core.list_namespaced_pod(NS, label_selector=f"mmrl.dev/job={job},mmrl.dev/component=ray-worker").items
    live = [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp and p.status.phase == "Running"]
    return live[0].spec.node_name if live else ""


def ready(obj: dict) -> bool:
    """Ready as the operator judges it (head ready, every desired worker ready, status current)."""
    return bool(raycluster_ready(obj))


def split(stages: dict[str, list[float]], t0: float, stopped: float | None, ready_at: list[float], t_next: float):
    """Where one recovery's time went: the operator stopping the attempt (its RayJob deleted), then, when the cluster
    was seen going unready and ready again in between, KubeRay (here the stand-in), the scheduler and kwok making it
    ready, and the operator starting the next attempt."""
    if stopped is None:
        return
    stages["fault_to_stop"].append(stopped - t0)
    stages["stop_to_next_rayjob"].append(t_next - stopped)
    again = [t for t in ready_at if stopped <= t <= t_next]
    if again:
        stages["cluster_ready_again_to_next_rayjob"].append(t_next - again[-1])


def training_attempt(jobs: Jobs, rayjobs: common.Appearances, job: str) -> int | None:
    """The attempt the job is training on, when its status says Running on the newest RayJob it has."""
    status = jobs.status(job)
    attempt = int(status.get("attempt") or 0)
    mine = [n.rsplit("-a", 1) for n in list(rayjobs.first_seen)]
    newest = max((int(a) for j, a in mine if j == job), default=0)
    return attempt if status.get("phase") == "Running" and attempt == newest > 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="mmrl-bench-recovery-"))
    samples: list[tuple[str, float]] = []
    stages: dict[str, list[float]] = {k: [] for k in STAGES}
    early: list[str] = []  # next attempts created while the job had no Running worker pod
    began = time.monotonic()
    with common.cluster(args.jobs + 3, [NS]) as (cp, api, core):
        standin = KubeRayStandIn(api, default_script="hang", namespaces={NS}, log_dir=work / "rayjobs", resync=2.0)
        with standin, OperatorProcess(cp.kubeconfig, work / "operator.log", env=common.OPERATOR_ENV):
            jobs = Jobs(api, NS)
            rayjobs = common.Appearances(api, NS, "rayjobs").start()
            clusters = common.Appearances(api, NS, "rayclusters", reached=ready).start()
            names = [f"r{i}" for i in range(args.jobs)]
            patch = {"spec": {"resilience": {"maxInfraRestarts": 1000}}}
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda n: jobs.create(cluster_job(n, patch)), names))
            common.wait_for(lambda: all(f"{n}-a1" in rayjobs.first_seen for n in names), 600, "every first RayJob")
            for i in range(args.faults):
                job = rng.choice(names)
                # A fault also stops every other job with a pod on that node (Ray heads share the GPU nodes), so
                # the chosen job may itself be between attempts: wait until it trains on its newest RayJob.
                attempt = wait_until(lambda j=job: training_attempt(jobs, rayjobs, j), 120, what=f"{job} training")
                node = wait_until(lambda j=job: worker_node(core, j), 120, what=f"a running worker of {job}")
                kind = KINDS[i % 2]
                nxt = f"{job}-a{attempt + 1}"
                t0 = time.monotonic()
                nodes.set_health(core, node, f"Unschedulable{kind}")
                common.wait_for(lambda x=nxt: x in rayjobs.first_seen, 120, f"RayJob {nxt}", 0.02)
                t_next = rayjobs.first_seen[nxt]
                if not worker_node(core, job):
                    early.append(nxt)
                samples.append((kind, t_next - t0))
                split(stages, t0, rayjobs.deleting.get(f"{job}-a{attempt}"), clusters.reached_at.get(job, []), t_next)
                print(f"fault {i + 1:2d} {kind:<18} {job} on {node}: {nxt} after {samples[-1][1]:.2f}s", flush=True)
                if kind == "PendingReboot":
                    nodes.set_health(core, node, "Schedulable")  # the reboot finished; the node rejoins the pool
                else:
                    nodes.replace_node(core, node)
            rayjobs.stop()
            clusters.stop()
    values = [s for _, s in samples]
    result = {
        "jobs": args.jobs,
        "faults": len(values),
        "fault_to_next_rayjob": common.summary(values),
        "by_kind": {k: common.summary([s for kind, s in samples if kind == k]) for k in KINDS},
        "stages": {k: common.summary(v) for k, v in stages.items()},
        "next_attempt_before_worker_running": early,
        "samples": [round(s, 3) for s in values],
        "seconds": round(time.monotonic() - began, 1),
        "workdir": str(work),
    }
    print(f"\nrecovery latency over {len(values)} faults with {args.jobs} jobs running (label -> next RayJob):")
    print(f"  {common.fmt(result['fault_to_next_rayjob'])}")
    for stage, summary in result["stages"].items():
        print(f"  {stage:<36} {common.fmt(summary)}")
    print(f"  next attempt created while the job had no Running worker pod: {len(early)} of {len(values)}")
    common.write_result("recovery", result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
