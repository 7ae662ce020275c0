"""kopf wiring, and nothing else: watch events are turned into work-queue keys for `runtime.reconcile.reconcile`.

Only `on.event` handlers are used: they add no finalizers and write no annotations on anyone's objects (kopf's
timers and daemons would add a finalizer to every job, which an operator that is down turns into a blocked
delete). Time-based work (backoff, hang detection, ttl) is a delayed requeue; a periodic resync covers anything
missed. kopf watches the jobs; nodes and the jobs' children (RayClusters, RayJobs, pods, the inference Deployment
and Service) come through the operator's own informers (`caches.Caches`), which keep slim copies the passes read
instead of listing, and wake the affected jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import kopf

from mmrl_api import constants as c
from mmrl_operator.runtime import metrics
from mmrl_operator.runtime.caches import Caches
from mmrl_operator.runtime.jobstore import JobStore
from mmrl_operator.runtime.kube import Kube, StatusConflict
from mmrl_operator.runtime.leader import LeaderElector
from mmrl_operator.runtime.prober import Prober
from mmrl_operator.runtime.reconcile import TRAINER_OWNED, ask_models, reconcile
from mmrl_operator.runtime.workqueue import Key, WorkQueue

log = logging.getLogger("mmrl.handlers")

# The custom resources the handlers below watch. kopf runs without observing CRDs (see _startup), so run.py waits
# until the apiserver serves these before kopf starts.
JOB_RESOURCE = (c.GROUP, c.VERSION, c.PLURAL)
CHILD_RESOURCES = (  # the child kinds caches.Caches watches that an apiserver may not serve (yet)
    (c.RAY_GROUP, c.RAY_VERSION, "rayclusters"),
    (c.RAY_GROUP, c.RAY_VERSION, "rayjobs"),
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
    caches: Caches = field(init=False)
    prober: Prober = field(init=False)
    jobs: JobStore = field(default_factory=JobStore)

    def __post_init__(self) -> None:
        self.caches = Caches(self.kube, self.namespaces, wake=self.queue.add)
        # /v1/models is asked on the prober's threads; a changed answer wakes the job's pass.
        self.prober = Prober(partial(ask_models, self.kube), wake=self.queue.add, workers=self.probe_workers)
        self.kube.prober = self.prober


RUNTIME: Runtime | None = None


def install(runtime: Runtime) -> None:
    """Called by run.py before kopf starts; the handlers below find everything through RUNTIME."""
    global RUNTIME
    RUNTIME = runtime


def reconcile_key(key: Key) -> float | None:
    assert RUNTIME is not None
    try:
        plan = reconcile(
            RUNTIME.kube, key[0], key[1], caches=RUNTIME.caches, written=_own_write(key), jobs=RUNTIME.jobs
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

    return remember


def _resync_loop(runtime: Runtime) -> None:
    while not runtime.stop.wait(runtime.resync_seconds):
        for key in list(runtime.phases):
            runtime.queue.add(key, low=True)  # behind every event-driven pass
        metrics.set_phases(list(runtime.phases.values()))


@kopf.on.startup()
def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    assert RUNTIME is not None, "run.py installs the runtime before kopf starts"
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.posting.enabled = False  # our own Events carry reasons; kopf's would duplicate them
    # kopf's "restricted mode": no watch on CRDs and no list of namespaces, which would take cluster-wide reads
    # (customresourcedefinitions; namespaces when it watches only some) that nothing else needs. It watches the
    # given namespaces, or the whole cluster, for the resources served at start (run.py waits for ours).
    settings.scanning.disabled = True
    RUNTIME.caches.start()  # every node and child listed before any pass runs
    RUNTIME.prober.start()
    if RUNTIME.elector:
        RUNTIME.elector.start()
    RUNTIME.queue.start()
    threading.Thread(target=_resync_loop, args=(RUNTIME,), name="mmrl-resync", daemon=True).start()


@kopf.on.cleanup()
def _cleanup(**_: Any) -> None:
    if RUNTIME:
        RUNTIME.stop.set()
        RUNTIME.queue.stop()
        finished = RUNTIME.queue.join(timeout=20.0)  # the passes in flight end before the lease is handed over
        RUNTIME.prober.stop()
        RUNTIME.caches.stop()
        if RUNTIME.elector:
            # A pass still running after 20 s keeps the lease to its end: a standby then waits for it to expire.
            RUNTIME.elector.stop(release=finished)


@kopf.on.probe(id="leader")
def _probe(**_: Any) -> bool:
    return bool(RUNTIME and (RUNTIME.elector is None or RUNTIME.elector.is_leader()))


def job_fingerprint(body: Any) -> str:
    """Everything of a job a reconcile decides on, except the trainer's progress: a heartbeat changes only that,
    and needs no pass (the hang deadline is already queued, and the pass at that time reads the newest heartbeat)."""
    meta = body.get("metadata") or {}
    status = {k: v for k, v in (body.get("status") or {}).items() if k != TRAINER_OWNED}
    seen = [meta.get("generation"), meta.get("deletionTimestamp"), status]
    return hashlib.sha1(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()


@kopf.on.event(*JOB_RESOURCE)
def _job_event(type: str | None, name: str, namespace: str, body: kopf.Body, **_: Any) -> None:
    assert RUNTIME is not None
    key = (namespace, name)
    if type == "DELETED":
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
