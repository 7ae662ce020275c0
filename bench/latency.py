"""Reconcile latency at scale, against the real KubeRay operator, on one local control plane.

mmrl's phase: N MultimodalRLJobs are created at once (8 client threads). For each: apply → its RayCluster exists,
and apply → its first RayJob exists. The first RayJob needs a ready cluster, so that time also holds KubeRay creating
the pods, the scheduler placing them on fake HyperPod nodes, kwok running them and KubeRay reporting `ready`; the
operator's own share (cluster ready → RayJob) is reported apart.
KubeRay's phase: N RayJobs carrying the same cluster spec in `rayClusterSpec`; KubeRay creates a RayCluster for
each. RayJob created → its RayCluster exists is KubeRay's own reaction time to a new object, the same measurement as
mmrl's apply → RayCluster, so the ratio of the two compares the controllers.

Like for like (issue #32): `--rounds` rounds, each on a fresh control plane with both controllers running, the two
phases in alternating order (mmrl first in odd rounds, KubeRay first in even ones), each phase on a quiet cluster
(the first phase's RayJobs have failed, as they do under kwok, before the second starts). Both controllers run the
same reconcile concurrency (mmrl's MMRL_WORKERS, KubeRay's --reconcile-concurrency) and neither is throttled on the
client side: mmrl's client has no rate limiter, so KubeRay gets --qps/--burst far above what N objects need (its
defaults, 100/200, would make it wait on its own limiter). The ratio is reported per round and as the median over
rounds with its min-max.

Times are `time.monotonic()` on this machine: t0 just before the create call, the end when a watch delivers the
child. With `--profile` py-spy samples the operator during mmrl's phase (run it separately: sampling slows it).

    python bench/latency.py [--jobs 200] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import signal
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

import common
from mmrl_api import constants as c
from mmrl_local.addons.kuberay_operator import KubeRayOperator
from mmrl_local.addons.operator_process import OperatorProcess
from tests.support.operator import Jobs

OURS, THEIRS = "lat-mmrl", "lat-kuberay"


def create_all(names: list[str], create) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Create every object from 8 threads; returns the monotonic time just before each create call."""
    started: dict[str, float] = {}

    def one(name: str) -> None:
        started[name] = time.monotonic()
        create(name)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    return started


def deltas(start: dict[str, float], end: dict[str, float]) -> list[float]:
    return [end[n] - start[n] for n in start if n in end]


def ready(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("state") == "ready"


class Profiler:
    """py-spy (from PyPI, in its own cached venv) sampling one process until stopped; collapsed stacks to a file."""

    def __init__(self, pid: int, out: Path) -> None:
        import tools

        self.out = out
        args = [str(tools.py_spy()), "record", "--pid", str(pid), "--rate", "50", "--format", "raw"]
        self.proc = subprocess.Popen([*args, "--nonblocking", "-o", str(out)], stdout=subprocess.DEVNULL)

    def stop(self) -> Path:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        return self.out


def where(frames: list[str]) -> str:
    """What a sample was doing: the innermost operator function, else which part of kopf or the runtime."""
    mine = [f for f in frames if "mmrl_operator/" in f and "mmrl_operator/runtime/run.py" not in f and "/cli/" not in f]
    if mine:
        return mine[-1]
    if any("kopf/" in f for f in frames):
        return "kopf event processing: deepcopy" if any("deepcopy" in f for f in frames) else "kopf, other"
    return f"runtime: {frames[-1]}"


def hot_spots(collapsed: Path, top: int = 25) -> dict[str, Any]:
    """Share of samples per function (file:function, any line) from py-spy's raw output: inclusive, self, and by
    `where` (the innermost operator function, else kopf or the runtime)."""
    total, inclusive, own, by_where = 0, collections.Counter(), collections.Counter(), collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue  # a frame name with a newline in it (a multi-line qualname) splits a sample over lines
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0] + ")" for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
        by_where[where(frames)] += n
    share = lambda counter: [(f, round(100 * n / total, 1)) for f, n in counter.most_common(top)]  # noqa: E731
    return {"samples": total, "inclusive_pct": share(inclusive), "self_pct": share(own), "where_pct": share(by_where)}


def phase_ours(api, op: OperatorProcess, n: int, profile_to: Path | None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    jobs = Jobs(api, OURS)
    clusters = common.Appearances(api, OURS, "rayclusters", reached=ready).start()
    rayjobs = common.Appearances(api, OURS, "rayjobs").start()
    names = [f"lat-{i}" for i in range(n)]
    # maxRestarts 0: under kwok KubeRay fails every RayJob ~30-60 s later (no dashboard); no retries keep phase 2 quiet
    patch = {"spec": {"resilience": {"maxRestarts": 0}}}
    profiler = Profiler(op.proc.pid, profile_to) if profile_to and op.proc else None
    reconciles0, seconds0 = (
        op.metric(common.PASSES),
        op.metric("mmrl_reconcile_duration_seconds_sum"),
    )
    t_start = time.monotonic()
    started = create_all(names, lambda name: jobs.create(common.bench_job(name, patch)))
    created_s = time.monotonic() - t_start
    common.wait_for(lambda: all(f"{x}-a1" in rayjobs.first_seen for x in names), 900, f"{n} first RayJobs", 1.0)
    wall = time.monotonic() - t_start
    hot = hot_spots(profiler.stop()) if profiler else None
    clusters.stop()
    rayjobs.stop()
    first_rayjob = {x: rayjobs.first_seen[f"{x}-a1"] for x in names}
    reconciles = op.metric(common.PASSES) - reconciles0
    result = {
        "jobs": n,
        "create_calls_seconds": round(created_s, 2),
        "all_first_rayjobs_after_seconds": round(wall, 2),
        "apply_to_raycluster": common.summary(deltas(started, clusters.first_seen)),
        "apply_to_first_rayjob": common.summary(deltas(started, first_rayjob)),
        "raycluster_to_ready": common.summary(deltas(clusters.first_seen, clusters.first_reached)),
        "ready_to_first_rayjob": common.summary(deltas(clusters.first_reached, first_rayjob)),
        "reconciles": int(reconciles),
        "reconcile_seconds_mean": round(
            (op.metric("mmrl_reconcile_duration_seconds_sum") - seconds0) / max(reconciles, 1), 4
        ),
        "operator_rss_mib": common.rss_mib(op.proc.pid)[0] if op.proc else None,
    }
    if hot is not None:
        result["profile"] = hot
    return result


def pods_need(spec: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The ServiceAccounts and ConfigMaps the cluster spec's pod templates name."""
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec.get("workerGroupSpecs") or [])]
    accounts = {t["spec"]["serviceAccountName"] for t in templates if t["spec"].get("serviceAccountName")}
    maps = {v["configMap"]["name"] for t in templates for v in t["spec"].get("volumes") or [] if "configMap" in v}
    return accounts, maps


def phase_kuberay(api, n: int, cluster_spec: dict[str, Any]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    # What mmrl creates beside a job's RayCluster, made here once for all of KubeRay's: without them KubeRay cannot
    # create a single pod (no such ServiceAccount), so its clusters would never be ready nor its RayJobs end.
    accounts, maps = pods_need(cluster_spec)
    for name in accounts:
        core.create_namespaced_service_account(THEIRS, {"metadata": {"name": name}})
    for name in maps:
        core.create_namespaced_config_map(THEIRS, {"metadata": {"name": name}, "data": {}})
    clusters = common.Appearances(api, THEIRS, "rayclusters").start()
    names = [f"kr-{i}" for i in range(n)]
    spec = {k: v for k, v in cluster_spec.items() if k != "suspend"}

    def create(name: str) -> None:
        body = {
            "apiVersion": c.RAY_API_VERSION,
            "kind": "RayJob",
            "metadata": {"name": name, "namespace": THEIRS},
            "spec": {"entrypoint": "python -c pass", "rayClusterSpec": spec, "shutdownAfterJobFinishes": False},
        }
        custom.create_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, THEIRS, "rayjobs", body)

    def by_rayjob() -> dict[str, float]:
        out = {}
        for cluster, obj in list(clusters.objects.items()):
            origin = (obj["metadata"].get("labels") or {}).get("ray.io/originated-from-cr-name")
            if origin:
                out[origin] = clusters.first_seen[cluster]
        return out

    t_start = time.monotonic()
    started = create_all(names, create)
    common.wait_for(lambda: len(by_rayjob()) >= n, 900, f"{n} RayClusters from KubeRay", 1.0)
    wall = time.monotonic() - t_start
    clusters.stop()
    return {
        "rayjobs": n,
        "all_rayclusters_after_seconds": round(wall, 2),
        "rayjob_to_raycluster": common.summary(deltas(started, by_rayjob())),
    }


# When a phase has stopped changing: under kwok KubeRay fails every RayJob 30-60 s after its submitter ends, and for
# mmrl's phase the operator then records each job's end. (group, version, namespace, plural, status field, ends)
SETTLED = {
    "mmrl": (c.GROUP, c.VERSION, OURS, c.PLURAL, "phase", ("Failed", "Succeeded")),
    "kuberay": (c.RAY_GROUP, c.RAY_VERSION, THEIRS, "rayjobs", "jobDeploymentStatus", ("Failed", "Complete")),
}


def settle(api, side: str, n: int, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Wait until `side`'s phase stops changing (see SETTLED), so the next phase runs on a quiet cluster."""
    group, version, namespace, plural, field_name, ends = SETTLED[side]
    custom, t0 = client.CustomObjectsApi(api), time.monotonic()

    def done() -> int:
        items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        return sum(1 for o in items if (o.get("status") or {}).get(field_name) in ends)

    with contextlib.suppress(TimeoutError):
        common.wait_for(lambda: done() >= n, timeout, f"{side}'s phase to settle", 2.0)
    return round(time.monotonic() - t0, 1)


def bench_cluster_spec() -> dict[str, Any]:
    """The RayCluster spec mmrl builds for a bench job: what KubeRay's RayJobs carry, in either order of phases (the
    ServiceAccount and ConfigMap it names are made in KubeRay's namespace, `pods_need`)."""
    from mmrl_api import MultimodalRLJob
    from mmrl_operator.core.builders.raycluster import build_raycluster

    doc = common.bench_job("lat-0")
    doc["metadata"].update({"namespace": OURS, "uid": "00000000-0000-0000-0000-000000000000"})
    return build_raycluster(MultimodalRLJob.model_validate(doc))["spec"]  # type: ignore[no-any-return]


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    mine, kuberay = ours["apply_to_raycluster"], theirs["rayjob_to_raycluster"]
    return {q: round(mine[q] / max(kuberay[q], 1e-3), 2) for q in ("p50", "p99")}


def one_round(args: argparse.Namespace, index: int, work: Path) -> dict[str, Any]:
    """Both phases on a fresh control plane, in the order `index` gives them."""
    n, m = args.jobs, args.kuberay_jobs
    order = ["mmrl", "kuberay"] if index % 2 else ["kuberay", "mmrl"]
    if not m:
        order = ["mmrl"]
    env = {**common.OPERATOR_ENV, "MMRL_WORKERS": str(args.workers)}
    kuberay_flags = [
        f"--reconcile-concurrency={args.workers}",
        f"--qps={args.kuberay_qps}",
        f"--burst={args.kuberay_burst}",
    ]
    out: dict[str, Any] = {"round": index, "order": order}
    began = time.monotonic()
    with (
        common.cluster(common.gpu_nodes_for(n + m), [OURS, THEIRS]) as (cp, api, _),
        KubeRayOperator(api, cp.kubeconfig, work / f"kuberay-{index}.log", namespaces=[OURS, THEIRS],
                        extra_args=kuberay_flags),
        OperatorProcess(cp.kubeconfig, work / f"operator-{index}.log", namespaces=[OURS], env=env) as op,
    ):  # fmt: skip
        common.wait_for(lambda: common.metrics_up(op), 60, "operator metrics endpoint")
        for position, side in enumerate(order):
            last = position == len(order) - 1
            if side == "mmrl":
                profile = work / f"operator-profile-{index}.txt" if args.profile else None
                out["mmrl"] = phase_ours(api, op, n, profile)
                out["mmrl_settle_seconds"] = 0.0 if last else settle(api, side, n, args.settle_timeout)
            else:
                out["kuberay"] = phase_kuberay(api, m, bench_cluster_spec())
                out["kuberay_settle_seconds"] = 0.0 if last else settle(api, side, m, args.settle_timeout)
    if "kuberay" in out:
        out["ratio"] = ratios(out["mmrl"], out["kuberay"])
    out["seconds"] = round(time.monotonic() - began, 1)
    return out


def over_rounds(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def print_round(r: dict[str, Any]) -> None:
    ours = r["mmrl"]
    print(f"round {r['round']} ({' then '.join(r['order'])}, {r['seconds']} s)", flush=True)
    print(f"  mmrl: apply -> RayCluster   {common.fmt(ours['apply_to_raycluster'])}", flush=True)
    print(f"  mmrl: apply -> first RayJob {common.fmt(ours['apply_to_first_rayjob'])}", flush=True)
    print(f"        RayCluster -> ready   {common.fmt(ours['raycluster_to_ready'])}", flush=True)
    print(f"        ready -> first RayJob {common.fmt(ours['ready_to_first_rayjob'])}", flush=True)
    if "kuberay" in r:
        print(f"  KubeRay: RayJob -> RayCluster {common.fmt(r['kuberay']['rayjob_to_raycluster'])}", flush=True)
        print(f"  ratio mmrl/KubeRay: p50 {r['ratio']['p50']}x, p99 {r['ratio']['p99']}x", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kuberay-jobs", type=int, default=None, help="RayJobs for KubeRay's phase (default: --jobs)")
    parser.add_argument("--rounds", type=int, default=5, help="fresh control planes, phases in alternating order")
    parser.add_argument("--profile", action="store_true", help="sample the operator with py-spy during mmrl's phase")
    parser.add_argument("--settle-timeout", type=float, default=180)
    parser.add_argument("--workers", type=int, default=4, help="reconcile concurrency of both controllers")
    parser.add_argument("--kuberay-qps", type=float, default=100_000, help="KubeRay's client QPS (its default: 100)")
    parser.add_argument("--kuberay-burst", type=int, default=100_000, help="KubeRay's client burst (its default: 200)")
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    parser.add_argument("--name", help="result file name (default: latency, latency-profile, latency-workers<N>)")
    args = parser.parse_args()
    args.kuberay_jobs = args.jobs if args.kuberay_jobs is None else args.kuberay_jobs
    work = Path(tempfile.mkdtemp(prefix="mmrl-bench-latency-"))
    began = time.monotonic()
    rounds = []
    for index in range(1, args.rounds + 1):
        rounds.append(one_round(args, index, work))
        print_round(rounds[-1])
    # The detailed figures are the round whose p99 ratio is the median one (or the first, without KubeRay).
    compared = [r for r in rounds if "ratio" in r]
    middle = sorted(compared, key=lambda r: r["ratio"]["p99"])[len(compared) // 2] if compared else rounds[0]
    result: dict[str, Any] = {
        "mmrl": middle["mmrl"],
        "kuberay": middle.get("kuberay"),
        "rounds": rounds,
        "workdir": str(work),
        "operator_workers": args.workers,
        "kuberay_flags": {"reconcile_concurrency": args.workers, "qps": args.kuberay_qps, "burst": args.kuberay_burst},
    }
    if compared:
        for q in ("p50", "p99"):
            spread = over_rounds([r["ratio"][q] for r in compared])
            result[f"ratio_{q}_ours_over_kuberay"] = spread["median"]
            result[f"ratio_{q}_over_rounds"] = spread
        print(
            f"ratio mmrl/KubeRay over {len(compared)} rounds (median, min-max): "
            f"p50 {result['ratio_p50_over_rounds']}, p99 {result['ratio_p99_over_rounds']}",
            flush=True,
        )
    if middle["mmrl"].get("profile"):
        print("operator hot spots (inclusive % of samples):")
        for frame, pct in middle["mmrl"]["profile"]["inclusive_pct"][:15]:
            print(f"  {pct:5.1f}%  {frame}")
    result["seconds"] = round(time.monotonic() - began, 1)
    name = "latency-profile" if args.profile else "latency"
    name = args.name or (f"{name}-workers{args.workers}" if args.workers != 4 else name)
    common.write_result(name, result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
