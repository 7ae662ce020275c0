"""A STAND-IN for the KubeRay operator (not KubeRay): a level-triggered loop that makes RayClusters and
RayJobs behave the way KubeRay v1.5 does on a cluster whose kubelets are fake. RayClusters get head and worker
pods (KubeRay's labels, owned by the cluster; finished or lost pods are replaced) and KubeRay's status;
RayJobs go "" → Initializing → Running → Complete/Failed as their script says (see ``standin_job``), or, in run
mode, as the exit code of their entrypoint run on this machine, with the status writes KubeRay makes on the way
(Running before Ray reports a job status; Ray's terminal status while the submitter Job still runs, then
Complete/Failed). Watches only wake the loop; every pass reads the whole world again, so missing an event never
matters.

Run mode also keeps what tests/cluster/test_kuberay_contract.py checks against the real KubeRay and Ray: KubeRay's
finalizer on every RayJob (deleting one stops its Ray job first), and a lost head pod does not fail the RayJob:
the driver dies with the head, and KubeRay's submitter Job, retrying, submits the job again once a head is ready
(``SUBMITTER_RETRIES``), or fails the RayJob with SubmissionFailed when its retries run out first.

Strict mode adds the timing of the real thing that makes naive controllers run two attempts at once: a RayJob is
deleted through KubeRay's finalizer, which takes a while; Ray pods terminate over their grace period (kwok holds
them until ``deletionTimestamp``) and keep reporting Ready meanwhile; ``readyWorkerReplicas`` counts those
Terminating-but-Ready workers. It also records ``violations``: a RayJob that starts on a cluster while another
RayJob of that cluster is still running or being deleted, or while one of its pods is still terminating.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import logging
import secrets
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from mmrl_local.cluster import hyperpod as hp
from mmrl_local.common import loops, rest
from mmrl_local.common.clock import now_iso
from mmrl_local.network import podnet
from mmrl_local.node import podrun
from mmrl_local.standin import standin_cluster as sc
from mmrl_local.standin import standin_job as sj

log = logging.getLogger("mmrl_local.standin.kuberay_standin")
RAY = ("ray.io", "v1")
RAYJOB_FINALIZER = "ray.io/rayjob-finalizer"
# When KubeRay's submitter Job tries again after the Ray job it followed was lost with the head: the Job
# controller's pod failure back-off (10 s, doubled each time) within the submitter's backoffLimit of 2 (three
# pods; the first was the one that was following the lost job).
SUBMITTER_RETRIES = (10.0, 30.0)
# Ray without GCS fault tolerance: a worker's raylet that finds a new GCS (a recreated head) exits ("GCS returned
# an authentication error"), so its container restarts and the pod is not Ready until Ray is up again. Seconds
# after the new head is Ready, and how long the restart takes (about 25 s on a loaded 2-core machine for real Ray).
GCS_NOTICE_SECONDS = 1.0
WORKER_RESTART_SECONDS = 3.0


class KubeRayStandIn:
    """Start with ``start()`` or as a context manager. ``mode`` "scripted" ends each RayJob by its script
    (default ``default_script``); "run" executes every RayJob's entrypoint unless a script says otherwise."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        mode: str = "scripted",
        default_script: str = "succeed-after=1",
        log_dir: Path | None = None,
        namespaces: set[str] | None = None,
        image_env: dict[str, str] | None = None,
        resync: float = 0.5,
        strict: bool = False,
        grace_seconds: int = 3,
        finalizer_seconds: float = 2.0,
        network: podnet.PodNetwork | None = None,
    ) -> None:
        if mode not in ("scripted", "run"):
            raise ValueError(f"mode {mode!r}: use 'scripted' or 'run'")
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.default_script = sj.Script.parse("run" if mode == "run" else default_script)
        self.log_dir = Path(log_dir or Path.cwd() / "rayjob-logs")
        self.materialiser = podrun.PodMaterialiser(api_client, self.log_dir / "pods", image_env)
        self.network = network  # run mode: entrypoints run in the head pod's network namespace when given
        self.namespaces = namespaces
        self.resync = resync
        self._scripts: list[tuple[str, str, sj.Script]] = []
        self._runs: dict[tuple[str, str, str], sj.EntrypointRun] = {}
        self._tracked: dict[tuple[str, str, str], dict[str, str]] = {}
        self._since: dict[tuple[str, str, str], float] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.strict, self.grace_seconds, self.finalizer_seconds = strict, grace_seconds, finalizer_seconds
        self.violations: list[str] = []
        self._jobs: list[dict] = []
        self._deleting: dict[tuple[str, str, str], float] = {}
        self.finalizes = strict or mode == "run"  # strict and run mode keep KubeRay's RayJob finalizer
        self._head_lost: dict[tuple[str, str, str], list[float]] = {}  # key -> [when, submitter retries used]
        self._submissions: dict[tuple[str, str, str], int] = {}
        self.gcs_restarts = mode == "run"  # run mode: workers restart when their head (GCS) is recreated
        self._gcs: dict[tuple[str, str], str] = {}  # cluster -> uid of the head whose GCS its workers joined
        self._new_head: dict[tuple[str, str], float] = {}  # cluster -> when a different head was first Ready
        self._restarting: dict[tuple[str, str], dict[str, float]] = {}  # cluster -> worker pod uid -> began

    # -- public API --------------------------------------------------------------------------------------------

    def script(self, name: str, script: str, namespace: str = "*") -> None:
        """Decide how RayJobs named ``name`` (a glob, e.g. "train-a*") end; the newest matching rule wins."""
        self._scripts.append((namespace, name, sj.Script.parse(script)))
        self._wake.set()

    def entrypoint_pids(self) -> dict[str, int]:
        """``{"namespace/name": pid}`` of the run-mode entrypoints executing now."""
        return {f"{ns}/{name}": run.proc.pid for (ns, name, _), run in list(self._runs.items())}

    def start(self) -> KubeRayStandIn:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._loop, name="kuberay-standin", daemon=True)]
        for kind in ("rayclusters", "rayjobs", "pods", "nodes"):
            self._threads.append(
                threading.Thread(target=self._watch, args=(kind,), daemon=True, name=f"kuberay-standin-watch-{kind}")
            )
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._threads[0].join(timeout=10)
        for run in list(self._runs.values()):
            run.kill()
        self._runs.clear()

    def __enter__(self) -> KubeRayStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- loop --------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        # The loop survives API hiccups (and anything else): the next pass reads everything again.
        loops.run_passes(
            "kuberay stand-in",
            self._reconcile_pass,
            self._stop,
            interval=self.resync,
            backoff=self.resync,
            pause=self._wake.wait,
            on_error=lambda err: self.errors.append(repr(err)),
        )

    def _reconcile_pass(self) -> None:
        self._wake.clear()
        self.reconcile_once()

    def _watch(self, kind: str) -> None:
        loops.run_passes(f"kuberay stand-in watch of {kind}", lambda: self._watch_once(kind), self._stop, interval=0.0)

    def _watch_once(self, kind: str) -> None:
        """Follow ``kind`` for a few seconds, waking the loop on every event."""
        ns = self._one_namespace()
        if kind in ("rayclusters", "rayjobs"):
            if ns is None:
                func, args = self.custom.list_cluster_custom_object, (*RAY, kind)
            else:
                func, args = self.custom.list_namespaced_custom_object, (*RAY, ns, kind)
        elif kind == "pods":
            func, args = (
                (self.core.list_pod_for_all_namespaces, ()) if ns is None else (self.core.list_namespaced_pod, (ns,))
            )
        else:
            func, args = self.core.list_node, ()
        kwargs = {"label_selector": "ray.io/cluster"} if kind == "pods" else {}
        try:
            for _ in watch.Watch().stream(func, *args, timeout_seconds=5, **kwargs):
                self._wake.set()
                if self._stop.is_set():
                    return
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            # CRDs not installed yet, apiserver restarting: expected, so quiet; retry shortly.
            log.debug("watch of %s: %s", kind, err)
            self._stop.wait(1.0)

    def _one_namespace(self) -> str | None:
        """The namespace a stand-in limited to one namespace asks the apiserver about (as KubeRay's
        ``--watch-namespace`` does), so other tests' objects neither travel nor wake it; None: all of them."""
        return next(iter(self.namespaces)) if self.namespaces is not None and len(self.namespaces) == 1 else None

    def _list(self, group_path: str, plural: str, label_selector: str | None = None) -> list[dict]:
        """``plural`` under ``group_path`` ("/api/v1", "/apis/ray.io/v1"), in the stand-in's namespaces."""
        ns = self._one_namespace()
        if ns is not None:
            return rest.items(self.api, f"{group_path}/namespaces/{ns}/{plural}", label_selector)
        found = rest.items(self.api, f"{group_path}/{plural}", label_selector)
        if self.namespaces is None:
            return found
        return [i for i in found if i["metadata"].get("namespace") in self.namespaces]

    def _merge_patch(self, path: str, body: dict) -> None:
        rest.request(self.api, "PATCH", path, body=body, content_type=rest.MERGE)

    def reconcile_once(self) -> None:
        clusters = self._list("/apis/ray.io/v1", "rayclusters")
        jobs = self._list("/apis/ray.io/v1", "rayjobs")
        pods = self._list("/api/v1", "pods", "ray.io/cluster")
        services = {
            (s["metadata"]["namespace"], s["metadata"]["name"])
            for s in self._list("/api/v1", "services", f"app.kubernetes.io/created-by={sc.CREATED_BY}")
        }
        nodes = {n["metadata"]["name"]: n for n in rest.items(self.api, "/api/v1/nodes")}
        by_cluster: dict[tuple[str, str], list[dict]] = {}
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["labels"]["ray.io/cluster"])
            by_cluster.setdefault(key, []).append(pod)
        for cluster in clusters:
            meta = cluster["metadata"]
            try:
                self._reconcile_cluster(cluster, by_cluster.get((meta["namespace"], meta["name"]), []), services)
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
        cluster_index = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in clusters}
        self._jobs = jobs
        live_jobs = set()
        for job in jobs:
            meta = job["metadata"]
            key = (meta["namespace"], meta["name"], meta["uid"])
            live_jobs.add(key)
            try:
                if self.finalizes:
                    self._finalize(key, job)
                self._reconcile_job(key, job, cluster_index, by_cluster, nodes)
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
        for key in (set(self._runs) | set(self._head_lost)) - live_jobs:  # RayJob deleted: stop its entrypoint
            self._forget(key)

    # -- RayCluster --------------------------------------------------------------------------------------------

    def _reconcile_cluster(self, cluster: dict, pods: list[dict], services: set) -> None:
        meta = cluster["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp"):
            return
        suspended = bool((cluster.get("spec") or {}).get("suspend"))
        for pod in pods:
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if (suspended or finished) and not pod["metadata"].get("deletionTimestamp"):
                # KubeRay deletes finished Ray pods and creates fresh ones.
                self.core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        if not suspended:
            if (ns, sc.head_service_name(name)) not in services:
                with contextlib.suppress(ApiException):
                    self.core.create_namespaced_service(ns, sc.build_head_service(cluster))
            for want in sc.wanted_groups(cluster):
                live = [
                    p
                    for p in pods
                    if sc.pod_is_live(p)
                    and p["metadata"]["labels"].get("ray.io/group") == want.group
                    and p["metadata"]["labels"].get("ray.io/node-type") == want.node_type
                ]
                for _ in range(want.count - len(live)):
                    try:
                        self.core.create_namespaced_pod(ns, self._pod(cluster, want))
                    except ApiException as err:
                        # Admission refusals (a ServiceAccount not there yet, or already garbage-collected
                        # with its owner) are what KubeRay reports as an event and retries; not a stand-in bug.
                        if err.status not in (403, 404, 409):
                            raise
                        log.warning("cannot create a %s pod for %s/%s yet: %s", want.node_type, ns, name, err.reason)
                        break
                for pod in live[want.count :] if want.node_type == "worker" else []:
                    self.core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        if self.gcs_restarts and not suspended:
            self._restart_workers_on_new_gcs((ns, name), pods)
        service = sc.head_service_name(name) if not suspended else None
        status = sc.cluster_status(cluster, pods, service, now_iso(), strict=self.strict)
        patch = sc.merge_patch_for(cluster.get("status") or {}, status)
        if patch:
            self._merge_patch(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}/status", {"status": patch})

    def _restart_workers_on_new_gcs(self, key: tuple[str, str], pods: list[dict]) -> None:
        """Run mode: once a recreated head has been Ready for ``GCS_NOTICE_SECONDS``, every worker started before
        it restarts its container (same pod, restartCount + 1, not Ready for ``WORKER_RESTART_SECONDS``)."""
        now = time.monotonic()
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        restarting = self._restarting.setdefault(key, {})
        for uid, began in list(restarting.items()):
            pod = by_uid.get(uid)
            if now - began >= WORKER_RESTART_SECONDS and (pod is None or self._set_container_ready(pod, True)):
                restarting.pop(uid)
        heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head" and sc.pod_is_ready(p)]
        if not heads:
            return
        head = heads[0]
        joined = self._gcs.setdefault(key, head["metadata"]["uid"])
        if joined == head["metadata"]["uid"]:
            return
        if now - self._new_head.setdefault(key, now) < GCS_NOTICE_SECONDS:
            return
        restarted = True
        for pod in pods:
            meta = pod["metadata"]
            older = meta.get("creationTimestamp", "") <= head["metadata"].get("creationTimestamp", "")
            if meta["labels"].get("ray.io/node-type") == "worker" and older and sc.pod_is_ready(pod):
                if self._set_container_ready(pod, False):
                    restarting[meta["uid"]] = now
                else:
                    restarted = False  # changed since this pass read it: the next pass tries again
        if restarted:
            self._gcs[key] = head["metadata"]["uid"]
            self._new_head.pop(key, None)

    def _set_container_ready(self, pod: dict, ready: bool) -> bool:
        """Write the status a kubelet reports for a container that exited and started again (``ready`` False), or
        that passed its readiness probe again. False when the pod changed since it was read."""
        meta, status = pod["metadata"], copy.deepcopy(pod.get("status") or {})
        now = now_iso()
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != str(ready):
                cond.update({"status": str(ready), "lastTransitionTime": now})
        for cs in status.get("containerStatuses") or []:
            cs["ready"] = ready
            if not ready:
                cs["restartCount"] = (cs.get("restartCount") or 0) + 1
                cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now}}
                cs["state"] = {"running": {"startedAt": now}}
        try:
            self.core.replace_namespaced_pod_status(meta["name"], meta["namespace"], {**pod, "status": status})
        except ApiException as err:
            if err.status == 404:  # gone: nothing left to restart
                return True
            if err.status != 409:
                raise
            return False
        return True

    def _pod(self, cluster: dict, want: sc.GroupWant) -> dict:
        pod = sc.build_pod(cluster, want)
        if self.strict:  # terminate over the grace period, as a kubelet would (stages/pod-delete-graceful.yaml)
            pod["metadata"]["annotations"][hp.GRACEFUL_DELETE] = "true"
            pod["spec"].setdefault("terminationGracePeriodSeconds", self.grace_seconds)
        return pod

    # -- RayJob ------------------------------------------------------------------------------------------------

    def _finalize(self, key, job: dict) -> None:
        """KubeRay's finalizer on every RayJob: on deletion the Ray job is stopped (its entrypoint killed), then the
        finalizer goes; strict mode holds it ``finalizer_seconds`` first."""
        meta = job["metadata"]
        path = f"/apis/ray.io/v1/namespaces/{meta['namespace']}/rayjobs/{meta['name']}"
        finalizers = list(meta.get("finalizers") or [])
        if not meta.get("deletionTimestamp"):
            if RAYJOB_FINALIZER not in finalizers:
                self._merge_patch(path, {"metadata": {"finalizers": [*finalizers, RAYJOB_FINALIZER]}})
            return
        self._stop_run(key)
        since = self._deleting.setdefault(key, time.monotonic())
        hold = self.finalizer_seconds if self.strict else 0.0
        if RAYJOB_FINALIZER in finalizers and time.monotonic() - since >= hold:
            rest = [f for f in finalizers if f != RAYJOB_FINALIZER]
            self._merge_patch(path, {"metadata": {"finalizers": rest or None}})
            self._deleting.pop(key, None)

    def _check_one_at_a_time(self, job: dict, jobs: list[dict], pods: list[dict]) -> None:
        meta = job["metadata"]
        cluster = ((job.get("spec") or {}).get("clusterSelector") or {}).get("ray.io/cluster")
        for other in jobs:
            o_meta = other["metadata"]
            same = ((other.get("spec") or {}).get("clusterSelector") or {}).get("ray.io/cluster") == cluster
            if o_meta["uid"] == meta["uid"] or o_meta["namespace"] != meta["namespace"] or not same:
                continue
            if o_meta.get("deletionTimestamp") or not sj.is_terminal(other.get("status") or {}):
                self.violations.append(f"{meta['name']} started while {o_meta['name']} was still live or deleting")
        # Only pods whose deletion was asked for before the RayJob was created count: a pod lost after the
        # operator decided is a fault of the running attempt (handled as one), not an overlap it could have seen.
        created = sj.parse_time(meta.get("creationTimestamp"))
        terminating = [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"].get("deletionTimestamp") and _deletion_requested(p["metadata"], created)
        ]
        if terminating:
            self.violations.append(f"{meta['name']} started while pods {terminating} were terminating")

    def _script_for(self, job: dict) -> sj.Script:
        annotation = (job["metadata"].get("annotations") or {}).get(hp.RAYJOB_SCRIPT)
        if annotation is not None:
            return sj.Script.parse(annotation)
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        for rule_ns, pattern, script in reversed(self._scripts):
            if fnmatch.fnmatchcase(ns, rule_ns) and fnmatch.fnmatchcase(name, pattern):
                return script
        return self.default_script

    def _patch_job(self, job: dict, status: dict) -> None:
        meta = job["metadata"]
        self._merge_patch(
            f"/apis/ray.io/v1/namespaces/{meta['namespace']}/rayjobs/{meta['name']}/status", {"status": status}
        )

    def _stop_run(self, key) -> None:
        """Stop the Ray job's entrypoint, if it runs (Ray's stop-job, or its driver lost)."""
        run = self._runs.pop(key, None)
        if run is not None:
            run.kill()

    def _forget(self, key) -> None:
        self._stop_run(key)
        for memo in (self._tracked, self._since, self._head_lost, self._submissions):
            memo.pop(key, None)

    def _finish(self, key, job: dict, succeeded: bool, reason: str = "AppFailed", message: str = "") -> None:
        self._forget(key)
        self._patch_job(job, sj.finished(succeeded, reason, message))

    def _ray_job_ended(self, key, job: dict, succeeded: bool, message: str = "") -> None:
        """Ray reports the job ended; the RayJob stays Running until the next pass (KubeRay's next reconcile, once
        its submitter Job has finished too)."""
        self._stop_run(key)
        self._patch_job(job, sj.ray_job_ended(succeeded, message))

    def _reconcile_job(self, key, job: dict, clusters: dict, pods: dict, nodes: dict) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status = job.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp") or sj.is_terminal(status):
            self._forget(key)
            return
        error = sj.validation_error(job)
        if error:
            self._patch_job(job, sj.validation_failed(error))
            return
        try:
            script = self._script_for(job)
        except sj.ScriptError as err:
            self._patch_job(job, sj.validation_failed(f"annotation {hp.RAYJOB_SCRIPT}: {err}"))
            return
        phase = status.get("jobDeploymentStatus", "")
        if phase == "":
            selector = spec.get("clusterSelector") or {}
            cluster_name = selector.get("ray.io/cluster") or f"{name}-{secrets.token_hex(3)[:5]}"
            if self.strict:
                self._check_one_at_a_time(job, self._jobs, pods.get((ns, cluster_name), []))
            self._patch_job(job, sj.initializing(job, cluster_name))
            return
        cluster_name = status["rayClusterName"]
        cluster = clusters.get((ns, cluster_name))
        deadline = spec.get("activeDeadlineSeconds")
        started = sj.parse_time(status.get("startTime"))
        if deadline and started and (time.time() - started.timestamp()) > deadline:
            self._finish(
                key, job, False, "DeadlineExceeded", f"The RayJob has passed the activeDeadlineSeconds ({deadline}s)."
            )
            return
        if phase == "Initializing":
            if cluster is None and spec.get("rayClusterSpec"):
                self.custom.create_namespaced_custom_object(
                    *RAY,
                    ns,
                    "rayclusters",
                    {
                        "apiVersion": "ray.io/v1",
                        "kind": "RayCluster",
                        "metadata": {
                            "name": cluster_name,
                            "namespace": ns,
                            "ownerReferences": [sc.owner_ref(job)],
                            "labels": {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": name},
                        },
                        "spec": spec["rayClusterSpec"],
                    },
                )
                return
            if cluster is None or (cluster.get("status") or {}).get("state") != "ready":
                return
            cluster_pods = [p for p in pods.get((ns, cluster_name), []) if sc.pod_is_live(p)]
            self._track(key, cluster_pods)
            self._since[key] = time.monotonic()
            if script.outcome == "run" and not self._submit(key, job, cluster_pods):
                return
            self._patch_job(job, sj.submitted())
            return
        # phase == "Running" (or a transient one we do not model): decide the outcome.
        if status.get("jobStatus") in sj.RAY_TERMINAL:
            # KubeRay's next reconcile after Ray's job ended: the submitter has finished too.
            self._finish(key, job, status["jobStatus"] != "FAILED", "AppFailed", status.get("message") or "")
            return
        if cluster is None:
            self._finish(key, job, False, "AppFailed", f"RayCluster {cluster_name} not found.")
            return
        cluster_pods = pods.get((ns, cluster_name), [])
        if key in self._head_lost:
            self._resubmit(key, job, cluster_pods, script)
            return
        if script.outcome == "run":
            self._reconcile_run(key, job, status, cluster_pods, nodes)
            return
        if script.fail_on_node_loss:
            lost, head = self._lost(key, cluster_pods, nodes)
            if lost and head:  # as in run mode: the RayJob stays as it was and the submitter retries
                self._head_lost[key] = [time.monotonic(), 0]
                return
            if lost:
                self._ray_job_ended(key, job, False, f"Ray node lost: {lost}")
                return
        if status.get("jobStatus") != "RUNNING":
            self._patch_job(job, sj.running())  # KubeRay's first poll of the dashboard after submitting
            return
        since = self._since.setdefault(key, time.monotonic())
        if script.outcome in ("succeed", "fail") and time.monotonic() - since >= script.after:
            self._ray_job_ended(key, job, script.outcome == "succeed", script.message)

    def _reconcile_run(self, key, job: dict, status: dict, cluster_pods: list[dict], nodes: dict) -> None:
        """Run mode, RayJob Running: the entrypoint's exit decides; a lost head sends the job back to the
        submitter's retries (``_resubmit``); a lost worker fails it, as the trainer does when a Ray actor dies."""
        run = self._runs.get(key)
        if run is None:  # the stand-in restarted while Ray was running the job: Ray lost the driver with it
            self._finish(key, job, False, "AppFailed", "the Ray job's driver is gone")
            return
        lost, head = self._lost(key, cluster_pods, nodes)
        if lost and head:
            # The driver ran on the head and Ray's job table lived in its GCS: both are gone. KubeRay's calls to
            # the dashboard fail meanwhile and leave the status as it was.
            self._stop_run(key)
            self._head_lost[key] = [time.monotonic(), 0]
            return
        if lost:
            self._ray_job_ended(key, job, False, f"Ray node lost: {lost}")
            return
        code = run.poll()
        if code is not None:
            self._ray_job_ended(key, job, code == 0, "" if code == 0 else run.failure_message())
        elif status.get("jobStatus") != "RUNNING":
            self._patch_job(job, sj.running())

    def _resubmit(self, key, job: dict, cluster_pods: list[dict], script: sj.Script) -> None:
        """KubeRay's submitter Job after the head was lost: each retry finds Ray's job unknown to the head (if one
        is up) and submits it again under the same submission id, so the entrypoint runs again from the start (a
        scripted job's clock starts again)."""
        lost_at, used = self._head_lost[key]
        if time.monotonic() - lost_at < SUBMITTER_RETRIES[used]:
            return
        live = [p for p in cluster_pods if sc.pod_is_live(p)]
        if any(p["metadata"]["labels"].get("ray.io/node-type") == "head" and sc.pod_is_ready(p) for p in live):
            self._head_lost.pop(key)
            self._track(key, live)
            self._since[key] = time.monotonic()
            if script.outcome != "run" or self._submit(key, job, live):
                self._patch_job(job, sj.pending())
            return
        self._head_lost[key][1] = used = used + 1
        if used == len(SUBMITTER_RETRIES):
            self._forget(key)
            self._patch_job(job, sj.submission_failed())

    def _track(self, key, cluster_pods: list[dict]) -> None:
        """The pods a Ray job starts on; losing one of them later is a node loss for the job."""
        self._tracked[key] = {
            p["metadata"]["uid"]: (p["spec"].get("nodeName", ""), p["metadata"]["labels"].get("ray.io/node-type"))
            for p in cluster_pods
        }

    def _submit(self, key, job: dict, cluster_pods: list[dict]) -> bool:
        """Run mode: start the Ray job's entrypoint on the head; when it cannot start, Ray never got the job and
        the RayJob fails as KubeRay reports a failed submission (False)."""
        try:
            self._start_run(key, job, cluster_pods)
        except (podrun.PodRunError, podnet.PodNetError, ApiException) as err:
            self._finish(key, job, False, "SubmissionFailed", f"cannot start the entrypoint: {err}")
            return False
        return True

    def _start_run(self, key, job: dict, cluster_pods: list[dict]) -> sj.EntrypointRun:
        heads = [p for p in cluster_pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if not heads:
            raise podrun.PodRunError("the RayCluster has no head pod")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        submission = self._submissions[key] = self._submissions.get(key, 0) + 1
        run = sj.EntrypointRun(job, heads[0], self.materialiser, self.log_dir, self.network, submission)
        self._runs[key] = run
        return run

    def _lost(self, key, pods: list[dict], nodes: dict) -> tuple[str, bool]:
        """Describe the first Ray pod (present when the job started) that is gone or whose node is, and whether it
        was the head; ("", False) when none is."""
        current = {p["metadata"]["uid"]: p for p in pods}
        for uid, (node_name, node_type) in (self._tracked.get(key) or {}).items():
            head = node_type == "head"
            pod = current.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return f"pod {uid} on node {node_name} was deleted", head
            if (pod.get("status") or {}).get("phase") == "Failed":
                return f"pod {pod['metadata']['name']} failed on node {node_name}", head
            node = nodes.get(node_name)
            if node is None:
                return f"node {node_name} (pod {pod['metadata']['name']}) is gone", head
            conditions = (node.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return f"node {node_name} (pod {pod['metadata']['name']}) is NotReady", head
        return "", False


def _deletion_requested(meta: dict, before: datetime | None) -> bool:
    """Whether the deletion of an object was asked for before `before` (the apiserver sets deletionTimestamp to
    the request time plus the grace period; timestamps have one-second resolution, so ties are not "before")."""
    deadline = sj.parse_time(meta.get("deletionTimestamp"))
    if deadline is None or before is None:
        return deadline is not None
    requested = deadline - timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
    return requested < before
