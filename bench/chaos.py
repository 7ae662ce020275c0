"""Chaos: SIGKILL the operator at random moments across many job lifecycles with HyperPod node faults.

J jobs (the tests' HyperPod job, one 8-GPU worker each) run through their whole lifecycle, at most C at once, on the
KubeRay stand-in in strict mode (KubeRay v1.5's RayJob finalizer and graceful pod termination; it records any
attempt that starts while the previous one still runs or its pods still terminate). Each attempt succeeds after a
few seconds unless a node fault stops it first. Meanwhile, at random intervals, the operator is SIGKILLed and
started again; independently, every few seconds the worker node of a random running job is marked
UnschedulablePendingReboot for 5-20 s (longer than an operator restart), then Schedulable.

Reported: duplicates, which must be 0 — a RayJob or RayCluster name created more than once (a second uid), a
RayJob the job's status does not record, overlapping attempts seen by the stand-in; jobs converged (Succeeded);
time to converge per job (created → Succeeded) and after the last kill.

    python bench/chaos.py [--jobs 50] [--concurrent 10]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client

import common
from mmrl_api import constants as c
from mmrl_local.addons.operator_process import OperatorProcess
from mmrl_local.cluster import nodes
from mmrl_local.standin.kuberay_standin import KubeRayStandIn
from tests.support.jobspecs import cluster_job
from tests.support.operator import Jobs

NS = "chaos"


class Chaos:
    """Kills and restarts the operator from one thread and faults nodes from another, until stopped."""

    def __init__(self, op: OperatorProcess, jobs: Jobs, rng: random.Random, kill_every: float) -> None:
        self.op, self.jobs, self.core, self.rng, self.kill_every = op, jobs, jobs.core, rng, kill_every
        self.timers: list[threading.Timer] = []
        self.kills, self.faults, self.last_kill = 0, 0, time.monotonic()
        self.startups: list[float] = []  # start -> metrics endpoint up, per (re)start
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self.kill_loop, daemon=True, name="chaos-kill"),
            threading.Thread(target=self.fault_loop, daemon=True, name="chaos-fault"),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        for timer in self.timers:
            timer.cancel()

    def kill_loop(self) -> None:
        # A moment is random within the operator's working life: it takes seconds just to import (kopf, the
        # kubernetes client, pydantic models), and a kill during start-up would only test start-up.
        while self.wait_until_up() and not self.stop.wait(self.rng.uniform(0.0, 2 * self.kill_every)):
            self.op.kill()
            self.kills += 1
            self.last_kill = time.monotonic()
            self.stop.wait(self.rng.uniform(0.0, 1.0))
            self.op.start()

    def wait_until_up(self) -> bool:
        started = time.monotonic()
        while not common.metrics_up(self.op):
            if self.stop.wait(0.1):
                return False
        self.startups.append(time.monotonic() - started)
        return True

    def fault_loop(self) -> None:
        """A HyperPod reboot of a random running worker's node every few seconds, lasting longer than an operator
        restart, so faults start and end while it is up, while it is down, and across a kill."""
        while not self.stop.wait(self.rng.uniform(2.0, 8.0)):
            with contextlib.suppress(client.ApiException):  # a pod or node that went meanwhile: next time
                self.fault_a_worker_node()

    def fault_a_worker_node(self) -> None:
        """Pick the worker node of a job whose attempt is training (a finished job's pods are only waiting for
        its ttl), as the job's status says; the operator may be down, so this does not wait for it."""
        training = {
            j["metadata"]["name"]
            for j in self.jobs.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, NS, c.PLURAL)["items"]
            if (j.get("status") or {}).get("phase") == "Running"
        }
        pods = self.core.list_namespaced_pod(NS, label_selector=f"{c.LABEL_COMPONENT}=ray-worker").items
        live = [
            p.spec.node_name
            for p in pods
            if p.spec.node_name and p.status.phase == "Running" and p.metadata.labels.get(c.LABEL_JOB) in training
        ]
        if not live:
            return
        node = self.rng.choice(live)
        nodes.set_health(self.core, node, "UnschedulablePendingReboot")
        self.faults += 1
        timer = threading.Timer(self.rng.uniform(5.0, 20.0), nodes.set_health, (self.core, node, "Schedulable"))
        timer.daemon = True
        self.timers.append(timer)
        timer.start()


def duplicates(jobs: Jobs, rayjobs: common.Appearances, clusters: common.Appearances) -> dict[str, Any]:
    recreated = {n: len(u) for n, u in {**rayjobs.uids, **clusters.uids}.items() if len(u) > 1}
    unrecorded = []
    for job in jobs.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, NS, c.PLURAL)["items"]:
        name, status = job["metadata"]["name"], job.get("status") or {}
        recorded = {a["rayJob"] for a in status.get("attempts") or []}
        made = {r for r in rayjobs.uids if r.rsplit("-a", 1)[0] == name}
        # The status keeps a bounded history: anything at or below its newest attempt number is accounted for.
        newest = int(status.get("attempt") or 0)
        unrecorded += [r for r in made - recorded if int(r.rsplit("-a", 1)[1]) > newest]
    return {"recreated_names": recreated, "rayjobs_not_in_status": sorted(unrecorded)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=10)
    parser.add_argument(
        "--kill-every", type=float, default=3.0, help="mean seconds the operator serves before each SIGKILL"
    )
    parser.add_argument("--attempt-seconds", type=float, default=4.0, help="an undisturbed attempt succeeds after")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="mmrl-bench-chaos-"))
    began = time.monotonic()
    with common.cluster(args.concurrent + 4, [NS]) as (cp, api, _):
        standin = KubeRayStandIn(
            api,
            default_script=f"succeed-after={args.attempt_seconds}",
            namespaces={NS},
            log_dir=work / "rayjobs",
            resync=1.0,
            strict=True,
        )
        jobs = Jobs(api, NS)
        op = OperatorProcess(cp.kubeconfig, work / "operator.log", env=common.OPERATOR_ENV)
        with standin, op:
            rayjobs = common.Appearances(api, NS, "rayjobs").start()
            clusters = common.Appearances(api, NS, "rayclusters").start()
            succeeded = common.Appearances(
                api, NS, c.PLURAL, group=c.GROUP, version=c.VERSION,
                reached=lambda o: (o.get("status") or {}).get("phase") == "Succeeded",
            ).start()  # fmt: skip
            chaos = Chaos(op, jobs, rng, args.kill_every)
            chaos.start()
            created: dict[str, float] = {}
            # ttl 0: a finished job's RayCluster goes (as it would after its ttl), freeing its node for the next job
            patch = {
                "spec": {"resilience": {"maxInfraRestarts": 1000, "maxRestarts": 100}, "ttlSecondsAfterFinished": 0}
            }
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                active = [n for n in created if n not in succeeded.first_reached]
                if len(created) < args.jobs and len(active) < args.concurrent:
                    name = f"c{len(created)}"
                    created[name] = time.monotonic()
                    jobs.create(cluster_job(name, patch))
                    continue
                if len(created) == args.jobs and not active:
                    break
                time.sleep(0.2)
            chaos.join()
            if not op.alive:
                op.start()
            converged_at = time.monotonic()
            time.sleep(5)  # a last look after the operator settled: nothing may be created afterwards
            dup = duplicates(jobs, rayjobs, clusters)
            for watcher in (rayjobs, clusters, succeeded):
                watcher.stop()
            phases = [
                (j.get("status") or {}).get("phase")
                for j in jobs.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, NS, c.PLURAL)["items"]
            ]
    violations = list(standin.violations)
    converge = [succeeded.first_reached[n] - t for n, t in created.items() if n in succeeded.first_reached]
    attempts = [len([r for r in rayjobs.uids if r.rsplit("-a", 1)[0] == n]) for n in created]
    result = {
        "jobs": args.jobs,
        "concurrent": args.concurrent,
        "operator_kills": chaos.kills,
        "node_faults": chaos.faults,
        "duplicates": len(dup["recreated_names"]) + len(dup["rayjobs_not_in_status"]) + len(violations),
        "duplicate_detail": {**dup, "overlapping_attempts": violations},
        "converged": sum(1 for p in phases if p == "Succeeded"),
        "phases": {p: phases.count(p) for p in set(phases)},
        "attempts_total": sum(attempts),
        "time_to_converge": common.summary(converge),
        "operator_start_to_serving": common.summary(chaos.startups),
        "last_kill_to_all_converged_seconds": round(max(0.0, converged_at - chaos.last_kill), 2),
        "standin_errors": list(standin.errors),
        "seconds": round(time.monotonic() - began, 1),
        "workdir": str(work),
    }
    print(f"{chaos.kills} SIGKILLs, {chaos.faults} node faults across {len(created)} job lifecycles")
    print(f"duplicates: {result['duplicates']} {result['duplicate_detail']}")
    print(f"converged: {result['converged']}/{args.jobs} ({result['phases']}), {result['attempts_total']} attempts")
    print(f"time to converge (created -> Succeeded): {common.fmt(result['time_to_converge'])}")
    print(f"operator (re)start -> serving metrics: {common.fmt(result['operator_start_to_serving'])}")
    common.write_result("chaos", result, args.out)
    return 0 if result["duplicates"] == 0 and result["converged"] == args.jobs else 1


if __name__ == "__main__":
    raise SystemExit(main())
