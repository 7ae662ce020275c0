"""What every benchmark shares: the import path of this checkout, a bench-sized job, summaries (p50/p99), the
machine description, a watch that timestamps when objects appear or reach a state, process RSS, and the JSON
result file that `bench/report.py` turns into docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The operator and API measured: this checkout's, or another revision's tree (`make bench-compare` unpacks one and
# names it here); the harness (bench/, local/, tests/support) is always this checkout's.
UNDER_TEST = Path(os.environ.get("MMRL_BENCH_UNDER_TEST") or ROOT).resolve()
_SOURCES = [UNDER_TEST / "api", UNDER_TEST / "operator", ROOT / "trainer", ROOT / "local", ROOT]
for _src in reversed(_SOURCES):
    if str(_src) in sys.path:
        sys.path.remove(str(_src))
    sys.path.insert(0, str(_src))
# Processes the benchmarks start (the operator) import the same sources, not another install in the shared venv.
os.environ["PYTHONPATH"] = os.pathsep.join([str(s) for s in _SOURCES] + [os.environ.get("PYTHONPATH", "")]).rstrip(
    os.pathsep
)

from kubernetes import client, watch  # noqa: E402

from mmrl_local.cluster import nodes  # noqa: E402
from mmrl_local.cluster.controlplane import ControlPlane  # noqa: E402
from mmrl_local.cluster.crd_install import install_mmrl_crd  # noqa: E402
from mmrl_operator.core.jsonmerge import merge_patch  # noqa: E402
from tests.support.jobspecs import cluster_job  # noqa: E402

RESULTS = ROOT / "bench" / "out"
# The operator's reconcile passes so far (its Prometheus histogram's count).
PASSES = "mmrl_reconcile_duration_seconds_count"
OPERATOR_ENV = {"MMRL_RESYNC_SECONDS": "30"}  # the operator's production default (tests use 2 s)
BENCH_USER_AGENT = "mmrl-bench"


def bench_job(name: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tests' HyperPod job with a 1-GPU worker, so eight jobs share one fake p5 node and a few dozen nodes hold
    hundreds of jobs. Placement (affinity, selector, tolerations) is the same as for a full node."""
    group = {
        "name": "p5",
        "replicas": 1,
        "instanceType": "ml.p5.48xlarge",
        "gpusPerNode": 1,
        "efaPerNode": 0,
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}},
    }
    return merge_patch(cluster_job(name, {"spec": {"cluster": {"workerGroups": [group]}}}), patch or {})


def gpu_nodes_for(jobs: int) -> int:
    """Fake p5 nodes (8 GPUs, 110 pods) for `jobs` bench jobs with room to spare for replacements."""
    return max(2, -(-jobs // 7))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "p50": round(statistics.median(samples), 3),
        "p90": round(percentile(samples, 0.9), 3),
        "p99": round(percentile(samples, 0.99), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
    }


def fmt(s: dict[str, float]) -> str:
    if not s.get("n"):
        return "no samples"
    return f"n={s['n']} p50 {s['p50']:.2f}s p90 {s['p90']:.2f}s p99 {s['p99']:.2f}s max {s['max']:.2f}s"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "load_1m": round(os.getloadavg()[0], 2),  # when the result is written
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def write_result(name: str, result: dict[str, Any], out: Path = RESULTS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    measured = {"operator_tree": str(UNDER_TEST)}
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **measured, **result}, indent=2) + "\n")
    print(f"wrote {path}", flush=True)
    return path


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of a process in MiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def bench_client(api: client.ApiClient) -> client.ApiClient:
    """The harness's own requests carry their own user agent, so the apiserver's audit log tells them apart."""
    api.user_agent = BENCH_USER_AGENT
    return api


class Appearances:
    """Watch one kind of object in one namespace from a thread; record `time.monotonic()` when each name is first
    seen, and when it first satisfies `reached` (e.g. a RayCluster reported ready)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        plural: str,
        *,
        group: str = "ray.io",
        version: str = "v1",
        reached: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.ns, self.plural, self.group, self.version, self.reached = namespace, plural, group, version, reached
        self.first_seen: dict[str, float] = {}
        self.first_reached: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.uids: dict[str, set[str]] = {}  # more than one uid under a name: it was created again
        self.deleting: dict[str, float] = {}  # first seen with a deletionTimestamp, or deleted
        self.reached_at: dict[str, list[float]] = {}  # every time `reached` turned true
        self._reached_now: dict[str, bool] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{plural}")

    def _record_reached(self, name: str, now_reached: bool, now: float) -> None:
        before = self._reached_now.get(name, False)
        self._reached_now[name] = now_reached
        if now_reached and not before:
            self.first_reached.setdefault(name, now)
            self.reached_at.setdefault(name, []).append(now)

    def start(self) -> Appearances:
        self._thread.start()
        if not self._synced.wait(30):
            raise TimeoutError(f"watch of {self.plural} in {self.ns} did not start")
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        rv = self.custom.list_namespaced_custom_object(self.group, self.version, self.ns, self.plural)["metadata"][
            "resourceVersion"
        ]
        self._synced.set()
        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    self.group,
                    self.version,
                    self.ns,
                    self.plural,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    now = time.monotonic()
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    name = obj["metadata"].get("name", "")
                    if event["type"] == "DELETED" or obj["metadata"].get("deletionTimestamp"):
                        self.deleting.setdefault(name, now)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.first_seen.setdefault(name, now)
                        self.objects[name] = obj
                        self.uids.setdefault(name, set()).add(obj["metadata"]["uid"])
                        if self.reached is not None:
                            self._record_reached(name, self.reached(obj), now)
                    if self._stop.is_set():
                        return
            except client.ApiException as exc:
                if exc.status == 410:  # history compacted: relist from now (only later changes matter here)
                    rv = self.custom.list_namespaced_custom_object(self.group, self.version, self.ns, self.plural)[
                        "metadata"
                    ]["resourceVersion"]
                else:
                    time.sleep(0.5)
            except Exception:  # the control plane is stopping (or hiccuped): retry unless we were stopped
                if self._stop.wait(0.5):
                    return


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def create_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})
    # ServiceAccount admission refuses pods until the controller-manager made "default".
    wait_for(lambda: core.list_namespaced_service_account(name).items, 30, f"default ServiceAccount in {name}", 0.1)


def metrics_up(op: Any) -> bool:
    """The operator (an OperatorProcess) serves its Prometheus metrics: it has started."""
    try:
        op.metric(PASSES)
    except OSError:
        return False
    return True


def join_nodes(core: client.CoreV1Api, gpu: int) -> list[str]:
    """One CPU node and `gpu` fake p5 nodes, created without waiting one by one, then all waited for at once."""
    names = [nodes.create_cpu_node(core, wait=False), *nodes.create_gpu_nodes(core, gpu, wait=False)]
    want = set(names)
    wait_for(lambda: want <= {n.metadata.name for n in core.list_node().items if nodes.is_ready(n)}, 300, "nodes", 1)
    return names


@contextlib.contextmanager
def cluster(gpu_nodes: int, namespaces: list[str], **control_plane: Any) -> Iterator[tuple[ControlPlane, Any, Any]]:
    """A local control plane with mmrl's CRD, fake HyperPod nodes and the namespaces: (control plane, the harness's
    ApiClient, CoreV1Api)."""
    with ControlPlane(**control_plane) as cp:
        api = bench_client(cp.api_client())
        install_mmrl_crd(api)
        core = client.CoreV1Api(api)
        join_nodes(core, gpu_nodes)
        for ns in namespaces:
            create_namespace(core, ns)
        yield cp, api, core
