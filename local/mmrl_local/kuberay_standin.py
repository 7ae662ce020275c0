"""A STAND-IN for the KubeRay operator (not KubeRay): a level-triggered loop that makes RayClusters and
RayJobs behave the way KubeRay v1.5 does on a cluster whose kubelets are fake. RayClusters get head and worker
pods (KubeRay's labels, owned by the cluster; finished or lost pods are replaced) and KubeRay's status;
RayJobs go "" → Initializing → Running → Complete/Failed as their script says (see ``standin_job``), or, in run
mode, as the exit code of their entrypoint run on this machine. Watches only wake the loop; every pass reads
the whole world again, so missing an event never matters.

Strict mode adds the timing of the real thing that makes naive controllers run two attempts at once: a RayJob is
deleted through KubeRay's finalizer, which takes a while; Ray pods terminate over their grace period (kwok holds
them until ``deletionTimestamp``) and keep reporting Ready meanwhile; ``readyWorkerReplicas`` counts those
Terminating-but-Ready workers. It also records ``violations``: a RayJob that starts on a cluster while another
RayJob of that cluster is still running or being deleted, or while one of its pods is still terminating.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import secrets
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from mmrl_local import hyperpod as hp
from mmrl_local import podnet, podrun, rest
from mmrl_local import standin_cluster as sc
from mmrl_local import standin_job as sj

log = logging.getLogger("mmrl_local.kuberay_standin")
RAY = ("ray.io", "v1")
RAYJOB_FINALIZER = "ray.io/rayjob-finalizer"


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
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.reconcile_once()
            except Exception as err:  # the loop must survive API hiccups; the next pass retries
                log.exception("reconcile pass failed")
                self.errors.append(repr(err))
            self._wake.wait(self.resync)

    def _watch(self, kind: str) -> None:
        while not self._stop.is_set():
            try:
                if kind in ("rayclusters", "rayjobs"):
                    func, args = self.custom.list_cluster_custom_object, (*RAY, kind)
                elif kind == "pods":
                    func, args = self.core.list_pod_for_all_namespaces, ()
                else:
                    func, args = self.core.list_node, ()
                kwargs = {"label_selector": "ray.io/cluster"} if kind == "pods" else {}
                for _ in watch.Watch().stream(func, *args, timeout_seconds=5, **kwargs):
                    self._wake.set()
                    if self._stop.is_set():
                        return
            except Exception:  # CRDs not installed yet, apiserver restarting: retry shortly
                self._stop.wait(1.0)

    def _list(self, path: str, label_selector: str | None = None) -> list[dict]:
        found = rest.items(self.api, path, label_selector)
        if self.namespaces is None or path == "/api/v1/nodes":
            return found
        return [i for i in found if i["metadata"].get("namespace") in self.namespaces]

    def _merge_patch(self, path: str, body: dict) -> None:
        rest.request(self.api, "PATCH", path, body=body, content_type=rest.MERGE)

    def reconcile_once(self) -> None:
        clusters = self._list("/apis/ray.io/v1/rayclusters")
        jobs = self._list("/apis/ray.io/v1/rayjobs")
        pods = self._list("/api/v1/pods", "ray.io/cluster")
        services = {
            (s["metadata"]["namespace"], s["metadata"]["name"])
            for s in self._list("/api/v1/services", f"app.kubernetes.io/created-by={sc.CREATED_BY}")
        }
        nodes = {n["metadata"]["name"]: n for n in self._list("/api/v1/nodes")}
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
                if self.strict:
                    self._finalize(key, job)
                self._reconcile_job(key, job, cluster_index, by_cluster, nodes)
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
        for key in set(self._runs) - live_jobs:  # RayJob deleted: stop its entrypoint
            self._runs.pop(key).kill()

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
        service = sc.head_service_name(name) if not suspended else None
        status = sc.cluster_status(cluster, pods, service, sj.now_iso(), strict=self.strict)
        patch = sc.merge_patch_for(cluster.get("status") or {}, status)
        if patch:
            self._merge_patch(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}/status", {"status": patch})

    def _pod(self, cluster: dict, want: sc.GroupWant) -> dict:
        pod = sc.build_pod(cluster, want)
        if self.strict:  # terminate over the grace period, as a kubelet would (stages/pod-delete-graceful.yaml)
            pod["metadata"]["annotations"][hp.GRACEFUL_DELETE] = "true"
            pod["spec"].setdefault("terminationGracePeriodSeconds", self.grace_seconds)
        return pod

    # -- RayJob ------------------------------------------------------------------------------------------------

    def _finalize(self, key, job: dict) -> None:
        """Strict mode: KubeRay's finalizer on every RayJob, released a while after the deletion was asked for."""
        meta = job["metadata"]
        path = f"/apis/ray.io/v1/namespaces/{meta['namespace']}/rayjobs/{meta['name']}"
        finalizers = list(meta.get("finalizers") or [])
        if not meta.get("deletionTimestamp"):
            if RAYJOB_FINALIZER not in finalizers:
                self._merge_patch(path, {"metadata": {"finalizers": [*finalizers, RAYJOB_FINALIZER]}})
            return
        since = self._deleting.setdefault(key, time.monotonic())
        if RAYJOB_FINALIZER in finalizers and time.monotonic() - since >= self.finalizer_seconds:
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

    def _finish(self, key, job: dict, succeeded: bool, reason: str = "AppFailed", message: str = "") -> None:
        run = self._runs.pop(key, None)
        if run is not None:
            run.kill()
        self._patch_job(job, sj.finished(succeeded, reason, message))
        self._tracked.pop(key, None)
        self._since.pop(key, None)

    def _reconcile_job(self, key, job: dict, clusters: dict, pods: dict, nodes: dict) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status = job.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp") or sj.is_terminal(status):
            if key in self._runs:
                self._runs.pop(key).kill()
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
            self._tracked[key] = {p["metadata"]["uid"]: p["spec"].get("nodeName", "") for p in cluster_pods}
            self._since[key] = time.monotonic()
            if script.outcome == "run":
                try:
                    self._start_run(key, job, cluster_pods)
                except (podrun.PodRunError, podnet.PodNetError, ApiException) as err:
                    # Ray never got the job: KubeRay reports a failed submission.
                    self._finish(key, job, False, "SubmissionFailed", f"cannot start the entrypoint: {err}")
                    return
            self._patch_job(job, sj.running())
            return
        # phase == "Running" (or a transient one we do not model): decide the outcome.
        if cluster is None:
            self._finish(key, job, False, "AppFailed", f"RayCluster {cluster_name} not found.")
            return
        if script.fail_on_node_loss:
            lost = self._lost(key, pods.get((ns, cluster_name), []), nodes)
            if lost:
                self._finish(key, job, False, "AppFailed", f"Ray node lost: {lost}")
                return
        if script.outcome == "run":
            run = self._runs.get(key)
            if run is None:  # the stand-in restarted while Ray was running the job: Ray lost the driver with it
                self._finish(key, job, False, "AppFailed", "the Ray job's driver is gone")
                return
            code = run.poll()
            if code is not None:
                self._finish(key, job, code == 0, "AppFailed", "" if code == 0 else run.failure_message())
            return
        since = self._since.setdefault(key, time.monotonic())
        if script.outcome in ("succeed", "fail") and time.monotonic() - since >= script.after:
            self._finish(key, job, script.outcome == "succeed", "AppFailed", script.message)

    def _start_run(self, key, job: dict, cluster_pods: list[dict]) -> sj.EntrypointRun:
        heads = [p for p in cluster_pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if not heads:
            raise podrun.PodRunError("the RayCluster has no head pod")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        run = sj.EntrypointRun(job, heads[0], self.materialiser, self.log_dir, self.network)
        self._runs[key] = run
        return run

    def _lost(self, key, pods: list[dict], nodes: dict) -> str:
        """Describe the first Ray pod (present when the job started) that is gone or whose node is."""
        current = {p["metadata"]["uid"]: p for p in pods}
        for uid, node_name in (self._tracked.get(key) or {}).items():
            pod = current.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return f"pod {uid} on node {node_name} was deleted"
            if (pod.get("status") or {}).get("phase") == "Failed":
                return f"pod {pod['metadata']['name']} failed on node {node_name}"
            node = nodes.get(node_name)
            if node is None:
                return f"node {node_name} (pod {pod['metadata']['name']}) is gone"
            conditions = (node.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return f"node {node_name} (pod {pod['metadata']['name']}) is NotReady"
        return ""


def _deletion_requested(meta: dict, before: datetime | None) -> bool:
    """Whether the deletion of an object was asked for before `before` (the apiserver sets deletionTimestamp to
    the request time plus the grace period; timestamps have one-second resolution, so ties are not "before")."""
    deadline = sj.parse_time(meta.get("deletionTimestamp"))
    if deadline is None or before is None:
        return deadline is not None
    requested = deadline - timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
    return requested < before
