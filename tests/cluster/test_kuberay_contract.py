"""Contract test: the KubeRay stand-in (``kuberay_run``: run mode, Ray pods on kwok nodes, entrypoints run in the head
pod's view) and the real KubeRay v1.5.1 with real Ray (``real_ray``: Ray pods run by the local kubelet, KubeRay in
the cluster, reaching each Ray head's dashboard by its Service's name) go through the same short scenarios, and what
the operator reads of them must agree.

Scenarios, in order, on ONE RayCluster per side (head offering Ray no CPUs, one worker); every RayJob selects it
with ``clusterSelector`` and ``submissionMode: K8sJobMode``, as the operator's do:

0. provision: the RayCluster comes up;
1. success: ``python -c "print('ok')"``;
2. app-failure: ``python -c "import sys; sys.exit(3)"``;
3. delete-running: a sleeping RayJob is deleted once its Ray job is RUNNING; on the real side Ray's own job list
   (the dashboard through the apiserver's service proxy) must then say STOPPED, and nothing RUNNING (issue #20 item
   4); on the stand-in side the entrypoint process must be gone;
4. node-loss: a sleeping RayJob, then ``nodes.replace_node`` of the head pod's node; recorded until the cluster
   was not ready and is ready again and the RayJob ended or runs again (KubeRay resubmits a job lost with the head:
   it sleeps 600 s, nothing changes after that), with nothing changing for ``QUIET_SECONDS``; a side that has not
   settled so within 180 s fails, rather than compare a recovery half done.

Each scenario ends once the watches have delivered the state its objects are in (a GET agrees with the last view
recorded), so nothing a scenario caused is left for the next one.

Recorded: watches on the test namespace's RayJobs and RayClusters (a watch sees every write, so a status KubeRay
held for less than any poll interval is still seen), reduced per object to the sequence of distinct tuples of what
the operator reads (``mmrl_operator.core.observed``, ``faults.previous_attempt_lingers``), consecutive duplicates
collapsed:

- RayJob: present / being deleted (deletionTimestamp, which the operator waits out) / gone, ``jobDeploymentStatus``,
  ``jobStatus``, ``reason``, ``message``, and ``rayjob_outcome`` of it;
- RayCluster: ``state``, ``readyWorkerReplicas``, the desired workers from spec, the ``HeadPodReady`` condition,
  ``observedGeneration`` and ``metadata.generation``, and ``raycluster_ready`` of it.

Absent fields are recorded as ``None``, not as "" or 0: KubeRay's Go types omit empty values (``omitempty``).

Layout: one test per side runs every scenario, storing the sequences (with when each was first seen) in
``RECORDED``; then one test per scenario compares the two sides. The function-scoped fixtures (``real_ray``,
``kuberay_run``, namespace, nodes) live for one test, and a real RayCluster takes a minute or more to come up on a
loaded 2-core machine, so each side's scenarios share one test and one cluster; the comparison is separate so each
scenario passes or fails on its own, with both sides' timelines in its message, and what a side recorded is kept
when a later scenario of it fails.

Compared loosely (``comparable``), because they depend on timing, not on what KubeRay or Ray do:

- RayJob tuples of a Running RayJob that KubeRay writes only when its poll of Ray's dashboard (one reconcile every
  3 s, longer after errors) falls in the window, unless it is the last one recorded: ``PENDING`` (the driver starts
  within a second here), ``RUNNING`` (a job that fails at once can go from PENDING to FAILED between two polls),
  and Ray's terminal status (the submitter Job finishes a second or two after Ray's job). (``jobStatus: Failure``,
  which KubeRay writes only with ``--use-kubernetes-proxy``, parsing the apiserver's 503 for a head that is not up
  as Ray job info, is no longer excused: KubeRay runs in the cluster here.)
- Messages: without Ray's log timestamps and the 5 random characters KubeRay appends to a Ray job id.
- RayCluster: each field on its own, by its settled values (the first and last of the scenario) and the set of
  other values it passed through, not the tuples nor their order: how changes of different fields interleave, and
  how often a probe-driven field flickers, depend on which pod's readiness probe passes first. This includes
  ``raycluster_ready``, the operator's verdict. Values that may appear on one side only (``MAY_APPEAR``):
  ``readyWorkerReplicas`` absent or 0 while the head is replaced, which KubeRay writes only when a reconcile falls
  between the worker's Ray process dying with the head and its readiness probe passing again. And a new RayCluster
  as created, before KubeRay's first status write (``unwritten``): the recorder may or may not see it first.

Everything else must be equal: every RayJob tuple otherwise, messages included, and each RayCluster field's values.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from mmrl_api.spec import TrainerSpec
from mmrl_local.common import procs
from mmrl_operator.core.observed import raycluster_ready
from tests.cluster.ray_factories import RAY, raycluster, rayjob
from tests.support.kuberay_views import (
    VIEWS,
    ClusterView,
    JobView,
    collapse_timed,
    comparable,
)
from tests.support.operator import wait_until
from tests.support.ray_dashboard import ray_jobs

pytestmark = pytest.mark.cluster

SIDES = ("standin", "real")
FIXTURE = {"standin": "kuberay_run", "real": "real_ray"}
SCENARIOS = ("provision", "success", "app-failure", "delete-running", "node-loss")
CLUSTER = "rc"
IMAGE = TrainerSpec.model_fields["image"].default  # the trainer image the operator's RayClusters run
TERMINAL = ("Complete", "Failed", "ValidationFailed")  # a RayJob's terminal jobDeploymentStatus
NODE_LOSS_SECONDS = 180
QUIET_SECONDS = 15

# side -> scenario -> {"rayjob": [...], "raycluster": [...]}; plus each side's wall time.
RECORDED: dict[str, dict[str, dict[str, list[tuple[float, tuple]]]]] = {}
WALL: dict[str, dict[str, float]] = {}


class StatusRecorder:
    """Follows the namespace's RayJobs and RayClusters with watches (relisting after a gap) and keeps, in arrival
    order, every view of an object that differs from its previous one."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.ns = namespace
        self.events: list[tuple[float, str, str, tuple]] = []  # (monotonic time, plural, name, view)
        self.errors: list[str] = []
        self._last: dict[tuple[str, str], tuple] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(p,), daemon=True) for p in VIEWS]

    def __enter__(self) -> StatusRecorder:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def quiet_for(self) -> float:
        """Seconds since the last change of any object."""
        with self._lock:
            return time.monotonic() - self.events[-1][0] if self.events else 0.0

    def last(self, plural: str, name: str) -> tuple | None:
        """The latest view of the object that the watches delivered."""
        with self._lock:
            return self._last.get((plural, name))

    def mark(self) -> int:
        with self._lock:
            return len(self.events)

    def timeline(
        self, plural: str, name: str, start: int, end: int | None = None, began: float = 0.0
    ) -> list[tuple[float, tuple]]:
        """The object's distinct views from mark ``start`` to mark ``end``, each with when it was first seen
        (seconds after ``began``), beginning with the one it had at ``start`` when it existed then."""
        with self._lock:
            mine = [(i, t, v) for i, (t, p, n, v) in enumerate(self.events) if (p, n) == (plural, name)]
        before = [(began, v) for i, _, v in mine if i < start][-1:]
        during = [(t, v) for i, t, v in mine if i >= start and (end is None or i < end)]
        return [(round(t - began, 1), v) for t, v in collapse_timed(before + during)]

    def sequence(self, plural: str, name: str, start: int, end: int | None = None) -> list[tuple]:
        return [v for _, v in self.timeline(plural, name, start, end)]

    def _see(self, plural: str, obj: dict, gone: bool = False) -> None:
        key = (plural, obj["metadata"]["name"])
        view = VIEWS[plural](obj, gone)
        with self._lock:
            if self._last.get(key) != view:
                self._last[key] = view
                self.events.append((time.monotonic(), *key, view))

    def _relist(self, plural: str) -> str:
        listed = self.custom.list_namespaced_custom_object(*RAY, self.ns, plural)
        names = set()
        for obj in listed["items"]:
            names.add(obj["metadata"]["name"])
            self._see(plural, obj)
        for p, name in list(self._last):
            if p == plural and name not in names:
                self._see(plural, {"metadata": {"name": name}}, gone=True)
        return listed["metadata"]["resourceVersion"]

    def _follow(self, plural: str) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist(plural)
                stream = watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    *RAY,
                    self.ns,
                    plural,
                    resource_version=version,
                    timeout_seconds=5,
                )
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    self._see(plural, obj, gone=event["type"] == "DELETED")
                    if self._stop.is_set():
                        return
            except ApiException as err:
                version = None
                if err.status != 410:
                    self.errors.append(f"{plural}: {err.status} {err.reason}")
                    self._stop.wait(0.5)
            except Exception as err:  # the connection dropped: relist, so nothing is missed for good
                version = None
                self.errors.append(f"{plural}: {err!r}")
                self._stop.wait(0.5)


# -- the scenarios ------------------------------------------------------------------------------------------------


def cluster_body() -> dict:
    """The smallest RayCluster shaped like the operator's: a head that offers Ray no CPUs, one worker, the trainer
    image, CPU and memory requests (KubeRay derives Ray's resources from them)."""
    body = raycluster(CLUSTER, workers=1, gpus=0)
    spec = body["spec"]
    spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    for template in (spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]):
        container = template["spec"]["containers"][0]
        container["image"] = IMAGE
        container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return body


def job_body(name: str, entrypoint: str) -> dict:
    body = rayjob(name, CLUSTER, entrypoint=entrypoint)
    body["spec"]["submissionMode"] = "K8sJobMode"
    return body


@dataclass
class Run:
    """One side's scenarios, in order, on its one RayCluster."""

    side: str
    backend: Any
    api_client: client.ApiClient
    namespace: str
    nodes: Any
    rec: StatusRecorder
    recorded: dict[str, dict[str, list[tuple[float, tuple]]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.real = self.side == "real"

    def get(self, plural: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(*RAY, self.namespace, plural, name)

    def job_status(self, name: str) -> dict:
        return self.get("rayjobs", name).get("status") or {}

    def scenario(self, name: str, body, job: str | None = None) -> None:
        start, began = self.rec.mark(), time.monotonic()
        body()
        self.caught_up("rayclusters", CLUSTER)
        if job is not None:
            self.caught_up("rayjobs", job)
        end = self.rec.mark()
        self.seconds[name] = round(time.monotonic() - began, 1)
        self.recorded[name] = {"raycluster": self.rec.timeline("rayclusters", CLUSTER, start, end, began)}
        if job is not None:
            self.recorded[name]["rayjob"] = self.rec.timeline("rayjobs", job, start, end, began)

    def caught_up(self, plural: str, name: str) -> None:
        """Wait until the recorder's watch has delivered the object's current state (or its deletion)."""

        def delivered() -> bool:
            seen = self.rec.last(plural, name)
            try:
                return seen == VIEWS[plural](self.get(plural, name))
            except ApiException as err:
                if err.status != 404:
                    raise
                return seen is not None and seen[0] == "gone"

        wait_until(
            delivered,
            30,
            what=f"the watch on {plural} to deliver {name}'s current state ({self.side})",
        )

    def create_job(self, name: str, entrypoint: str) -> None:
        self.custom.create_namespaced_custom_object(*RAY, self.namespace, "rayjobs", job_body(name, entrypoint))

    def wait_terminal(self, name: str, timeout: float = 120) -> dict:
        return wait_until(
            lambda: (st := self.job_status(name)).get("jobDeploymentStatus") in TERMINAL and st,
            timeout,
            what=f"RayJob {name} to end ({self.side})",
        )

    def wait_running(self, name: str) -> dict:
        return wait_until(
            lambda: (st := self.job_status(name)).get("jobStatus") == "RUNNING" and st,
            120,
            what=f"RayJob {name}'s Ray job RUNNING ({self.side})",
        )

    def delete_job(self, name: str, timeout: float = 60) -> None:
        try:
            self.custom.delete_namespaced_custom_object(*RAY, self.namespace, "rayjobs", name)
        except ApiException as err:
            if err.status != 404:
                raise

        def gone() -> bool:
            try:
                self.get("rayjobs", name)
            except ApiException as err:
                return err.status == 404
            return False

        wait_until(gone, timeout, what=f"RayJob {name} gone ({self.side})")

    # -- 0. the cluster comes up ---------------------------------------------------------------------------------

    def provision(self) -> None:
        self.custom.create_namespaced_custom_object(*RAY, self.namespace, "rayclusters", cluster_body())
        # Real Ray pods start in minutes on a loaded 2-core machine (each imports Ray, the head starts its GCS and
        # dashboard): the bound is generous, and the message says where the pods were when it ran out.
        wait_until(
            lambda: raycluster_ready(self.get("rayclusters", CLUSTER)),
            480 if self.real else 60,
            interval=0.5,
            what=lambda: f"RayCluster ready ({self.side}); pods: {self.pod_phases()}",
        )

    def pod_phases(self) -> dict[str, str]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"ray.io/cluster={CLUSTER}").items
        return {
            p.metadata.name: f"{p.status.phase} on {p.spec.node_name}, ready "
            + ",".join(str(bool(cs.ready)) for cs in p.status.container_statuses or [])
            for p in pods
        }

    # -- 1, 2. a Ray job that succeeds, one that exits 3 ---------------------------------------------------------

    def success(self) -> None:
        self.create_job("ok", "python -c \"print('ok')\"")
        self.wait_terminal("ok")

    def app_failure(self) -> None:
        self.create_job("fail", 'python -c "import sys; sys.exit(3)"')
        self.wait_terminal("fail")

    # -- 3. the RayJob is deleted while its Ray job runs ---------------------------------------------------------

    def delete_running(self) -> None:
        self.create_job("stop", 'python -c "import time; time.sleep(600)"')
        status = self.wait_running("stop")
        pid = None if self.real else self.backend.entrypoint_pids().get(f"{self.namespace}/stop")
        self.delete_job("stop")
        if self.real:
            # Issue #20 item 4: KubeRay's finalizer asked Ray to stop the job; Ray's own list says so.
            listed = wait_until(
                lambda: (
                    (jobs := ray_jobs(self.api_client, self.namespace, CLUSTER)).get(status["jobId"])
                    not in (None, "PENDING", "RUNNING")
                    and jobs
                ),
                30,
                what="Ray to stop the deleted RayJob's job",
            )
            assert listed[status["jobId"]] == "STOPPED", listed
            assert not [sid for sid, st in listed.items() if st in ("PENDING", "RUNNING")], listed
        else:
            assert pid is not None and procs.wait_gone([pid], timeout=10) == []

    # -- 4. the head's node is replaced while a Ray job runs -----------------------------------------------------

    def node_loss(self) -> None:
        self.create_job("lost", 'python -c "import time; time.sleep(600)"')
        self.wait_running("lost")
        head = next(
            p
            for p in self.core.list_namespaced_pod(
                self.namespace, label_selector=f"ray.io/cluster={CLUSTER},ray.io/node-type=head"
            ).items
            if not p.metadata.deletion_timestamp
        )
        start = self.rec.mark()
        self.nodes.replace(head.spec.node_name)
        # Both sides must settle: a side that never did would compare a half-finished recovery.
        wait_until(
            lambda: self.settled(start),
            NODE_LOSS_SECONDS,
            interval=0.5,
            # A callable, asked when the wait runs out: the timelines as they are then, not as they were at the start.
            what=lambda: (
                f"the {self.side} side to settle after the head's node was replaced; RayCluster so far:\n"
                f"{show(self.rec.timeline('rayclusters', CLUSTER, start))}\nRayJob so far:\n"
                f"{show(self.rec.timeline('rayjobs', 'lost', start))}"
            ),
        )

    def settled(self, start: int) -> bool:
        """Since mark ``start`` the cluster was not ready and is ready again, and the RayJob ended or runs again
        (KubeRay resubmitted the job lost with the head: it sleeps for 600 s, so nothing changes after that), and
        nothing changed for ``QUIET_SECONDS`` (the workers restart only after the new head is up)."""
        cluster = [ClusterView(*v) for v in self.rec.sequence("rayclusters", CLUSTER, start)]
        job = [JobView(*v) for v in self.rec.sequence("rayjobs", "lost", start)]
        healed = any(not v.ready for v in cluster) and cluster[-1].ready
        restarted = job[-1].job_status == "RUNNING" and (
            any(v.job_status != "RUNNING" for v in job) or (healed and self.ray_runs_again("lost"))
        )
        return healed and (job[-1].deployment in TERMINAL or restarted) and self.rec.quiet_for() >= QUIET_SECONDS

    def ray_runs_again(self, name: str) -> bool:
        """Real side: the new head's own job list has the RayJob's Ray job RUNNING (resubmitted after the old head
        went with its node). KubeRay in the cluster writes no other status while the head is down (its dashboard
        calls fail, and back off), so the RayJob's status can say RUNNING throughout."""
        if not self.real:
            return False
        job_id = self.job_status(name).get("jobId")
        try:
            return bool(job_id) and ray_jobs(self.api_client, self.namespace, CLUSTER).get(job_id) == "RUNNING"
        except (ApiException, OSError, ValueError):
            return False

    def cleanup(self) -> None:
        """Delete the RayJobs while KubeRay still runs, so its finalizer does not hold the namespace."""
        for job in ("ok", "fail", "stop", "lost"):
            self.delete_job(job)


def show(timeline: list) -> str:
    return "\n".join(f"    {t:6.1f}s {tuple(short(x) for x in v)}" for t, v in timeline) or "    (nothing)"


def short(value: Any) -> Any:
    return value if not isinstance(value, str) or len(value) <= 90 else value[:87] + "..."


@pytest.mark.parametrize("side", SIDES)
def test_side_runs_the_scenarios(side, request, api_client, control_plane, namespace, hyperpod_nodes, tmp_path) -> None:
    began = time.monotonic()
    backend = request.getfixturevalue(FIXTURE[side])
    hyperpod_nodes.cpu(kubelet=side == "real")
    hyperpod_nodes.gpu(1, kubelet=side == "real")
    with StatusRecorder(control_plane.api_client(), namespace) as rec:
        run = Run(side, backend, api_client, namespace, hyperpod_nodes, rec)
        try:
            run.scenario("provision", run.provision)
            run.scenario("success", run.success, "ok")
            run.scenario("app-failure", run.app_failure, "fail")
            run.scenario("delete-running", run.delete_running, "stop")
            run.scenario("node-loss", run.node_loss, "lost")
            run.cleanup()
        finally:
            RECORDED[side] = run.recorded
            WALL[side] = {"total": round(time.monotonic() - began, 1), **run.seconds}
            (tmp_path / "recorded.json").write_text(json.dumps({"seconds": WALL[side], **run.recorded}, indent=1))
            print(f"\n[{side}] seconds: {json.dumps(WALL[side])}")
            for scenario, timelines in run.recorded.items():
                for kind, timeline in timelines.items():
                    print(f"[{side}] {scenario} {kind}:\n{show(timeline)}")
            if rec.errors:
                print(f"[{side}] watch interruptions (relisted): {rec.errors}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sides_agree(scenario: str) -> None:
    missing = [side for side in SIDES if scenario not in RECORDED.get(side, {})]
    if missing:
        # A missing recording is a failure, never a skip: the side's own test failed before this scenario.
        pytest.fail(f"no recording of {scenario} from {missing}: see test_side_runs_the_scenarios[{missing[0]}]")
    standin, real = (RECORDED[side][scenario] for side in SIDES)
    assert standin.keys() == real.keys()
    for kind in standin:
        ours, theirs = ([v for _, v in side[kind]] for side in (standin, real))
        assert comparable(kind, ours) == comparable(kind, theirs), (
            f"{scenario}: the {kind} sequences differ\nstand-in:\n{show(standin[kind])}\nreal:\n{show(real[kind])}"
        )
