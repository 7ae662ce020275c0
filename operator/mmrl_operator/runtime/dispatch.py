"""What the kopf handlers (`handlers.py`) hand over to, with no kopf in it: the operator's runtime state, the work
queue's pass (`reconcile_key`), job events turned into queue keys, and the start and stop of the caches, prober,
leader election and resync.

Only job events come through kopf. Nodes and the jobs' children (RayClusters, RayJobs, pods, the inference
Deployment and Service) come through the operator's own informers (`caches.Caches`), which keep slim copies the
passes read instead of listing, and wake the affected jobs. Time-based work (backoff, hang detection, ttl) is a
delayed requeue; a periodic resync covers anything missed.

A start lists before kopf is imported (`Runtime.warm_start`, on a thread run.py starts first): the caches' LISTs
and the first passes wait neither for kopf's import and start-up nor share the interpreter with them (issue #32:
restart -> first pass).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes.client.exceptions import ApiException

from mmrl_api import constants as c
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings
from mmrl_operator.runtime import metrics
from mmrl_operator.runtime.caches import Caches
from mmrl_operator.runtime.identity import IdentitySettings, TrainerIdentities
from mmrl_operator.runtime.jobstore import JobStore
from mmrl_operator.runtime.kube import Kube, StatusConflict
from mmrl_operator.runtime.leader import LeaderElector
from mmrl_operator.runtime.prober import Prober
from mmrl_operator.runtime.reconcile import TRAINER_OWNED, ask_models, reconcile
from mmrl_operator.runtime.servers import SERVER_RESOURCE, ServerController
from mmrl_operator.runtime.workqueue import Key, WorkQueue

log = logging.getLogger("mmrl.handlers")

# The custom resources the operator watches. kopf runs without observing CRDs (handlers._startup), so run.py waits
# until the apiserver serves the jobs before kopf starts; the warm start waits for KubeRay's when their LIST is a 404.
JOB_RESOURCE = (c.GROUP, c.VERSION, c.PLURAL)
CHILD_RESOURCES = (  # the kinds the informers watch that an apiserver may not serve (yet)
    (c.RAY_GROUP, c.RAY_VERSION, "rayclusters"),
    (c.RAY_GROUP, c.RAY_VERSION, "rayjobs"),
    SERVER_RESOURCE,
)


@dataclass
class Runtime:
    kube: Kube
    queue: WorkQueue
    elector: LeaderElector | None
    resync_seconds: float
    namespaces: list[str] = field(default_factory=list)  # watched namespaces; empty: cluster-wide
    phases: dict[Key, str] = field(default_factory=dict)
    fingerprints: dict[Key, str] = field(default_factory=dict)  # see job_fingerprint
    stop: threading.Event = field(default_factory=threading.Event)
    probe_workers: int = 4
    listing: Caches | None = None  # caches run.py made, their LISTs started on `early_lists`, before importing us
    early_lists: threading.Thread | None = None  # the warm start waits for those LISTs first
    caches: Caches = field(init=False)
    servers: ServerController = field(init=False)
    prober: Prober = field(init=False)
    jobs: JobStore = field(default_factory=JobStore)
    warm: threading.Thread | None = None  # the warm start: it has listed (or failed) once the thread has ended
    warm_error: BaseException | None = None
    network: NetworkPolicySettings = field(default_factory=NetworkPolicySettings)  # the chart's networkPolicy
    identity_settings: IdentitySettings = field(default_factory=IdentitySettings)  # the chart's trainerIdentity
    identities: TrainerIdentities = field(init=False)

    def __post_init__(self) -> None:
        self.caches = self.listing or Caches(self.kube, self.namespaces, wake=self.queue.add)
        self.servers = ServerController(
            self.kube,
            self.namespaces,
            active=self.is_leader,
            jobs=self.jobs,
            wake_job=self.queue.add,
            resync_seconds=self.resync_seconds,
        )
        self.caches.server_source = self.servers.servers.get
        self.identities = TrainerIdentities(self.kube, self.namespaces, self.identity_settings, self.wake_namespace)
        # /v1/models is asked on the prober's threads; a changed answer wakes the job's pass.
        self.prober = Prober(partial(ask_models, self.kube), wake=self.queue.add, workers=self.probe_workers)
        self.kube.prober = self.prober

    def start_warm(self) -> threading.Thread:
        """Start listing now, on a thread: run.py imports and starts kopf once it has ended."""
        self.warm = threading.Thread(target=self._warm, name="mmrl-warm-start", daemon=True)
        self.warm.start()
        return self.warm

    def _warm(self) -> None:
        try:
            self.warm_start()
        except BaseException as err:  # finish_start tries again, where kopf reports what fails
            self.warm_error = err

    def warm_start(self) -> None:
        """List every node and child (blocking: the first passes see them all), then elect and run the queue: the
        jobs the LISTs woke (every job with a child) pass at once. A LIST answered 404 is a resource the apiserver
        does not serve yet (KubeRay's CRDs): wait for it, then list what is left. No discovery request comes first:
        it cost a restart three sequential round trips (issue #32)."""
        if self.early_lists is not None:
            self.early_lists.join()  # a LIST that failed there is tried again below, where its error is raised
        while not self.stop.is_set():
            try:
                self.caches.start(also=[*self.servers.informers(), *self.identities.informers()])
                break
            except ApiException as err:
                if err.status != 404:
                    raise
                wait_until_served(self.kube, list(CHILD_RESOURCES), self.stop)
        else:
            return
        if self.elector:
            self.elector.start()
        self.queue.start()
        self.servers.queue.start()

    def finish_start(self) -> None:
        """From kopf's start-up handler: once the warm start has ended (a failed one is tried again here, where kopf
        reports what fails), the prober and the resync start."""
        if self.warm is not None:
            self.warm.join()
        if self.warm is None or self.warm_error is not None:
            self.warm, self.warm_error = None, None
            self.warm_start()
        self.prober.start()
        threading.Thread(target=_resync_loop, args=(self,), name="mmrl-resync", daemon=True).start()

    def shut_down(self) -> None:
        self.stop.set()
        self.queue.stop()
        self.servers.queue.stop()
        finished = self.queue.join(timeout=20.0)  # the passes in flight end before the lease is handed over
        finished = self.servers.queue.join(timeout=5.0) and finished
        self.prober.stop()
        self.servers.stop()
        self.caches.stop()
        self.identities.stop()
        if self.elector:
            # A pass still running after 20 s keeps the lease to its end: a standby then waits for it to expire.
            self.elector.stop(release=finished)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def wake_namespace(self, namespace: str) -> None:
        """A namespace's trainer identity is not as built: one pass of any of its jobs puts it back."""
        known = sorted(key for key in list(self.phases) if key[0] == namespace)  # a copy: passes change it
        if known:
            self.queue.add(known[0])


def wait_until_served(
    kube: Kube, resources: list[tuple[str, str, str]], stop: threading.Event, interval: float = 2.0
) -> None:
    """Block until the apiserver serves every custom resource the operator watches: kopf looks for them only once,
    at start. Until then the liveness endpoint is down (kopf has not started), so a cluster without the CRDs (or
    KubeRay) restarts the pod with this message in its log rather than running an operator that watches nothing."""
    waited = 0.0
    while missing := [r for r in resources if not kube.serves(*r)]:
        if waited % 30 < interval:
            names = ", ".join(f"{plural}.{group}/{version}" for group, version, plural in missing)
            log.warning("waiting for the apiserver to serve %s (are the mmrl CRD and KubeRay installed?)", names)
        if stop.wait(interval):
            return
        waited += interval


RUNTIME: Runtime | None = None


def install(runtime: Runtime) -> None:
    """Called by run.py before kopf starts; the handlers find everything through RUNTIME."""
    global RUNTIME
    RUNTIME = runtime


def reconcile_key(key: Key) -> float | None:
    assert RUNTIME is not None
    try:
        plan = reconcile(
            RUNTIME.kube,
            key[0],
            key[1],
            caches=RUNTIME.caches,
            written=_own_write(key),
            jobs=RUNTIME.jobs,
            network=RUNTIME.network,
            identities=RUNTIME.identities,
        )
    except StatusConflict:
        metrics.STATUS_CONFLICTS.inc()
        RUNTIME.jobs.invalidate(key)
        return 0.0  # decided on a stale read: decide again now, from a fresh GET
    if plan is None:
        RUNTIME.jobs.forget(key)
        RUNTIME.phases.pop(key, None)
        RUNTIME.prober.forget(key)
        return None
    RUNTIME.phases[key] = plan.status.get("phase", "Pending")
    return plan.requeue_after


def _own_write(key: Key):  # type: ignore[no-untyped-def]
    """The watch event of our own status write carries nothing the pass did not already decide on: remember its
    fingerprint so that event costs no pass (an event that differs from it, someone else's write, still does)."""

    def remember(stored: dict[str, Any]) -> None:
        assert RUNTIME is not None
        RUNTIME.fingerprints[key] = job_fingerprint(stored)
        server = ((stored.get("spec") or {}).get("inference") or {}).get("server")
        if server:  # a ModelServer decides from its jobs' status (e.g. the phase Serving just written)
            RUNTIME.servers.queue.add((key[0], server))

    return remember


def _resync_loop(runtime: Runtime) -> None:
    while not runtime.stop.wait(runtime.resync_seconds):
        for key in list(runtime.phases):
            runtime.queue.add(key, low=True)  # behind every event-driven pass
        metrics.set_phases(list(runtime.phases.values()))


def job_fingerprint(body: Any) -> str:
    """Everything of a job a reconcile decides on, except the trainer's progress: a heartbeat changes only that,
    and needs no pass (the hang deadline is already queued, and the pass at that time reads the newest heartbeat)."""
    meta = body.get("metadata") or {}
    status = {k: v for k, v in (body.get("status") or {}).items() if k != TRAINER_OWNED}
    seen = [meta.get("generation"), meta.get("deletionTimestamp"), status]
    return hashlib.sha1(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()


def job_event(type: str | None, namespace: str, name: str, body: Any) -> None:
    assert RUNTIME is not None
    key = (namespace, name)
    server = ((body.get("spec") or {}).get("inference") or {}).get("server")
    if type == "DELETED":
        if server:  # its adapter is unloaded
            RUNTIME.servers.queue.add((namespace, server))
        RUNTIME.jobs.forget(key)
        RUNTIME.phases.pop(key, None)
        RUNTIME.fingerprints.pop(key, None)
        RUNTIME.prober.forget(key)
        return
    RUNTIME.phases.setdefault(key, "Pending")
    RUNTIME.jobs.seen(body)  # the trainer's heartbeats too: a hang deadline's pass reads the newest
    fingerprint = job_fingerprint(body)
    if RUNTIME.fingerprints.get(key) == fingerprint:
        metrics.PROGRESS_ONLY_EVENTS.inc()
        return
    RUNTIME.fingerprints[key] = fingerprint
    RUNTIME.queue.add(key)
    if server:  # the server decides what it holds from its jobs' spec and status: this change may change that
        RUNTIME.servers.queue.add((namespace, server))
