"""Operator memory with many jobs and nodes, and its API calls per reconcile in steady state.

N GPU nodes (fake ml.p5.48xlarge) are joined, then J jobs are created: R of them train (the KubeRay stand-in, in
this process, run with `hang`, gives each a ready cluster with a head and a worker pod and a running first attempt),
S of them serve (`inference.enabled`; their first attempt succeeds at once, so each ends Serving and owns its
inference Deployment, with its ReplicaSet and pod, and Service, which the operator caches too; nothing answers their
`/v1/models` on kwok's pods, so they stay AdapterNotListed and keep being probed) and the other J - R - S are
suspended (`spec.suspend: true`: the operator holds and reconciles them, they own no children). All J pass through
the operator's watches, caches and queue; the split keeps the ramp within minutes on 2 shared cores, where a working
pass costs about a second (J = 1,000 all training did not reach steady state in 7 minutes: 338 jobs reconciled, 7
Running, operator RSS 189 MiB at that point).

The operator runs as its Deployment would, with the production resync period (30 s). Reported: its RSS (now and
peak, from /proc) after start with the nodes, and in steady state; over a steady-state window, its API requests
(from the apiserver's audit log, told apart by user agent: the python client's and kopf's) divided by its
reconciles (its own Prometheus counter), by verb and resource; and how many reconciles per second it managed
against how many the resync asks. At the end, the operator is SIGKILLed and started again `--restarts` times
(issue #32: restart -> first reconcile pass of an existing job): each restart is timed from the start to its
metrics port, to its first pass and to a pass of every job.

    python bench/memory.py [--jobs 1000] [--running 50] [--serving 50] [--nodes 500] [--window 60] [--restarts 5]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client

import common
from mmrl_api import constants as c
from mmrl_local.addons.operator_process import OperatorProcess
from mmrl_local.standin.kuberay_standin import KubeRayStandIn
from tests.support.operator import Jobs

NS = "mem"
SUSPENDED = {"spec": {"suspend": True}}
SERVING = {
    "spec": {
        "inference": {
            "enabled": True,
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        }
    }
}
RESYNC_SECONDS = float(common.OPERATOR_ENV["MMRL_RESYNC_SECONDS"])
OPERATOR_AGENTS = ("OpenAPI-Generator/", "kopf/")  # the kubernetes client inside the operator, and kopf's watches


def phases(api: client.ApiClient) -> collections.Counter:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(c.GROUP, c.VERSION, NS, c.PLURAL)["items"]
    return collections.Counter((j.get("status") or {}).get("phase") for j in items)


def steady(api: client.ApiClient, running: int, serving: int, suspended: int) -> bool:
    seen = phases(api)
    return seen["Running"] >= running and seen["Serving"] >= serving and seen["Suspended"] >= suspended


def audit_counts(path: Path, since: float, until: float) -> collections.Counter:
    """Operator requests in [since, until] (wall-clock seconds) by 'verb resource', from the audit log."""
    counts: collections.Counter = collections.Counter()
    with path.open() as log:
        for line in log:
            event = json.loads(line)
            agent = event.get("userAgent") or ""
            if event.get("stage") != "ResponseComplete" or not agent.startswith(OPERATOR_AGENTS):
                continue
            when = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if since <= when <= until:
                ref = event.get("objectRef") or {}
                sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
                counts[f"{event['verb']} {ref.get('resource', event.get('requestURI', '?'))}{sub}"] += 1
    return counts


def restart(op: OperatorProcess, jobs: int) -> dict[str, float]:
    """SIGKILL the operator and start it again (a new process: imports, caches' LISTs, kopf), timing from the start
    to its metrics port, to its first reconcile pass of an existing job, and to a pass of every job."""
    op.kill()
    began = time.monotonic()
    op.start()
    common.wait_for(lambda: common.metrics_up(op), 60, "operator metrics", interval=0.02)
    up = time.monotonic() - began
    common.wait_for(lambda: op.metric(common.PASSES) >= 1, 120, "the first pass", interval=0.02)
    first = time.monotonic() - began
    common.wait_for(lambda: op.metric(common.PASSES) >= jobs, 600, "a pass of every job", interval=0.2)
    sample = {"metrics_port": up, "first_pass": first, "every_job": time.monotonic() - began}
    print(f"restart: { ({k: round(v, 2) for k, v in sample.items()}) }", flush=True)
    return sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--running", type=int, default=50, help="jobs that train")
    parser.add_argument("--serving", type=int, default=50, help="jobs that succeed and serve; the rest are suspended")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--window", type=float, default=60.0, help="steady-state seconds to count API calls over")
    parser.add_argument("--restarts", type=int, default=5, help="SIGKILL and start the operator this often at the end")
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmrl-bench-memory-"))
    audit = work / "audit.log"
    began = time.monotonic()
    result: dict[str, Any] = {"jobs": args.jobs, "nodes": args.nodes, "workdir": str(work)}
    with common.cluster(args.nodes, [NS], audit_log=audit) as (cp, api, _):
        standin = KubeRayStandIn(api, default_script="hang", namespaces={NS}, log_dir=work / "rayjobs", resync=5.0)
        standin.script("v-*", "succeed-after=1")
        with standin, OperatorProcess(cp.kubeconfig, work / "operator.log", env=common.OPERATOR_ENV) as op:
            pid = op.proc.pid if op.proc else 0
            common.wait_for(lambda: common.metrics_up(op), 60, "operator metrics")
            time.sleep(5)
            result["rss_mib_with_nodes_only"] = common.rss_mib(pid)[0]
            jobs = Jobs(api, NS)
            t0 = time.monotonic()
            run, serve = args.running, args.serving
            held = args.jobs - run - serve
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: jobs.create(common.bench_job(f"m-{i}")), range(run)))
                list(pool.map(lambda i: jobs.create(common.bench_job(f"v-{i}", SERVING)), range(serve)))
                list(pool.map(lambda i: jobs.create(common.bench_job(f"s-{i}", SUSPENDED)), range(held)))
            mix = f"{run} Running, {serve} Serving, {held} Suspended"
            common.wait_for(lambda: steady(api, run, serve, held), 1800, mix, 5.0)
            result["steady_after_seconds"] = round(time.monotonic() - t0, 1)
            result["owned_deployments"] = len(client.AppsV1Api(api).list_namespaced_deployment(NS).items)
            result["owned_services"] = len(client.CoreV1Api(api).list_namespaced_service(NS).items)
            print(f"{mix} after {result['steady_after_seconds']}s", flush=True)
            time.sleep(10)  # let the last passes of the ramp drain
            r0, s0, w0 = op.metric(common.PASSES), time.time(), time.monotonic()
            samples = []
            while time.monotonic() - w0 < args.window:
                samples.append(common.rss_mib(pid)[0])
                time.sleep(2)
            r1, s1 = op.metric(common.PASSES), time.time()
            rss, peak = common.rss_mib(pid)
            at_end = dict(phases(api))
            restarts = [restart(op, args.jobs) for _ in range(args.restarts)]
    counts = audit_counts(audit, s0, s1)
    reconciles = int(r1 - r0)
    requests = sum(n for key, n in counts.items() if not key.startswith("watch "))
    result.update(
        {
            "rss_mib_steady": rss,
            "rss_mib_steady_max_sampled": max(samples),
            "rss_mib_peak": peak,
            "window_seconds": round(s1 - s0, 1),
            "reconciles_in_window": reconciles,
            "reconciles_per_second": round(reconciles / (s1 - s0), 2),
            "reconciles_per_second_asked_by_resync": round(args.jobs / RESYNC_SECONDS, 2),
            "api_requests_in_window": requests,
            "api_requests_per_reconcile": round(requests / max(reconciles, 1), 2),
            "api_requests_by_kind": dict(counts.most_common()),
            "running": args.running,
            "serving": args.serving,
            "phases_at_end": at_end,
            "seconds": round(time.monotonic() - began, 1),
        }
    )
    for key in ("metrics_port", "first_pass", "every_job"):
        result[f"restart_to_{key}"] = common.summary([r[key] for r in restarts])
        print(f"SIGKILL + start -> {key.replace('_', ' ')}: {common.fmt(result[f'restart_to_{key}'])}")
    print(f"operator RSS: {result['rss_mib_with_nodes_only']} MiB with {args.nodes} nodes; {rss} MiB with "
          f"{args.jobs} jobs (peak {peak} MiB)")  # fmt: skip
    per = result["api_requests_per_reconcile"]
    print(f"steady state: {reconciles} reconciles in {result['window_seconds']}s, {per} API requests per reconcile")
    print(f"  by kind: {dict(counts.most_common(8))}")
    common.write_result("memory", result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
