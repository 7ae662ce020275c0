"""What the KubeRay contract test (tests/cluster/test_kuberay_contract.py) records of a RayJob or RayCluster, and
how two sides' recordings are compared: pure, so the comparison rules have unit tests of their own
(tests/unit/contract/test_kuberay_views.py). See the contract test's docstring for why each rule is loose where it
is."""

from __future__ import annotations

import re
from typing import NamedTuple

from mmrl_operator.core.observed import desired_workers, raycluster_ready, rayjob_outcome

RAY_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")  # a Ray job's terminal status


class JobView(NamedTuple):
    life: str  # live | deleting | gone
    deployment: str | None
    job_status: str | None
    reason: str | None
    message: str | None
    outcome: str  # rayjob_outcome(...)[0], "" once gone


class ClusterView(NamedTuple):
    life: str
    state: str | None
    ready_workers: int | None
    desired_workers: int
    head_pod_ready: str | None
    observed_generation: int | None
    generation: int | None
    ready: bool  # raycluster_ready(...)


def life(obj: dict, gone: bool) -> str:
    return "gone" if gone else "deleting" if obj["metadata"].get("deletionTimestamp") else "live"


def job_view(obj: dict, gone: bool = False) -> JobView:
    if gone:
        return JobView("gone", None, None, None, None, "")
    st = obj.get("status") or {}
    return JobView(
        life(obj, gone),
        st.get("jobDeploymentStatus"),
        st.get("jobStatus"),
        st.get("reason"),
        st.get("message"),
        rayjob_outcome(obj)[0],
    )


def cluster_view(obj: dict, gone: bool = False) -> ClusterView:
    st = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    return ClusterView(
        life(obj, gone),
        st.get("state"),
        st.get("readyWorkerReplicas"),
        desired_workers(obj),
        conditions.get("HeadPodReady"),
        st.get("observedGeneration"),
        obj["metadata"].get("generation"),
        bool(raycluster_ready(obj)) and not gone,
    )


VIEWS = {"rayjobs": job_view, "rayclusters": cluster_view}


def collapse(seq: list[tuple]) -> list[tuple]:
    return [v for i, v in enumerate(seq) if i == 0 or v != seq[i - 1]]


def collapse_timed(seq: list[tuple[float, tuple]]) -> list[tuple[float, tuple]]:
    return [(t, v) for i, (t, v) in enumerate(seq) if i == 0 or v != seq[i - 1][1]]


# -- what is compared loosely -------------------------------------------------------------------------------------

# Ray stamps its log lines, and KubeRay names each Ray job `<rayjob>-<5 random characters>`; both reach the message.
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
JOB_ID = re.compile(r"\b(ok|fail|stop|lost)-[a-z0-9]{5}\b")


def transient_job(view: tuple) -> bool:
    """A status of a Running RayJob that KubeRay writes only when its poll of Ray's dashboard falls in the window:
    Ray's job PENDING or RUNNING (a job that ends at once can skip both between two polls), or ended while the
    submitter Job has not finished yet (it ends a second or two later)."""
    v = JobView(*view)
    return v.life == "live" and v.deployment == "Running" and v.job_status in ("PENDING", "RUNNING", *RAY_TERMINAL)


CLUSTER_FIELDS = (
    "life",
    "state",
    "ready_workers",
    "desired_workers",
    "head_pod_ready",
    "observed_generation",
    "generation",
    "ready",
)

# Values a RayCluster field may pass through on one side and not on the other, because whether a status write
# lands between two reconciles depends on when KubeRay's reconcile runs, not on what it does:
# - ``ready_workers`` None or 0 (KubeRay omits a zero) while the head is replaced: the worker's Ray process dies
#   with the head and its pod is seen unready only when a reconcile falls between that and its readiness probe
#   passing again; so ``ready`` (the operator's ``raycluster_ready``, which needs every worker) may flicker too,
#   and is compared by its settled values and by whether it went not ready at all.
MAY_APPEAR: dict[str, tuple] = {"ready_workers": (None, 0)}


def unwritten(view: ClusterView) -> bool:
    """A RayCluster KubeRay has not written a status for yet (no observedGeneration): the object as created. Whether
    the recorder sees it before KubeRay's first reconcile writes one depends on which comes first, not on what
    KubeRay does, so leading views of this kind may appear on one side only (seen once on a 4-worker run, where the
    real side's first view already carried KubeRay's first status)."""
    return view.observed_generation is None and view.state is None and view.head_pod_ready is None


def settled_form(values: list) -> tuple:
    """A field's sequence as (first value, last value, the other values it passed through, sorted by repr): the
    settled states a scenario starts and ends in, and what it went through on the way, whatever the order and
    however often it flickered."""
    return values[0], values[-1], sorted({repr(v) for v in values[1:-1]} - {repr(values[0]), repr(values[-1])})


def comparable(kind: str, seq: list[tuple]) -> list | dict:
    """RayJob: the tuples without the transient ones but the last, messages without Ray's timestamps and KubeRay's
    job id suffix, consecutive duplicates collapsed (KubeRay writes a RayJob's fields together, in one update).
    RayCluster: each field's ``settled_form``, from the first view with a status (``unwritten``), without its
    ``MAY_APPEAR`` values in the middle: how the changes of
    different fields interleave, and how often a probe-driven one flickers, depend on which pod's probe passes
    first."""
    if kind == "raycluster":
        views = [ClusterView(*v) for v in seq]
        while len(views) > 1 and unwritten(views[0]):
            views = views[1:]
        out = {}
        for name in CLUSTER_FIELDS:
            values = [getattr(v, name) for v in views]
            may = MAY_APPEAR.get(name, ())
            middle = [v for v in values[1:-1] if v not in may]
            out[name] = settled_form(values[:1] + middle + values[-1:] if len(values) > 1 else values)
        return out
    kept = [JobView(*v) for i, v in enumerate(seq) if not transient_job(v) or i == len(seq) - 1]
    return collapse([v._replace(message=normalise(v.message)) for v in kept])


def normalise(message: str | None) -> str | None:
    return JOB_ID.sub(r"\1-<id>", TIMESTAMP.sub("<time>", message)) if message else message
