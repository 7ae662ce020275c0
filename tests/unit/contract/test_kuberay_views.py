"""The KubeRay contract test's comparison rules (tests/support/kuberay_views.py), on recordings shaped like the ones
the two sides produce: a transient that depends on when a reconcile runs compares equal, a difference in what the
operator acts on does not."""

from __future__ import annotations

from tests.support.kuberay_views import ClusterView, JobView, comparable


def cluster(ready_workers: int | None, head: str, ready: bool, state: str = "ready") -> tuple:
    return tuple(ClusterView("live", state, ready_workers, 1, head, 1, 1, ready))


def job(deployment: str | None, status: str | None, outcome: str, message: str | None = None) -> tuple:
    return tuple(JobView("live", deployment, status, None, message, outcome))


UP = cluster(1, "True", True)
HEAD_DOWN = cluster(1, "False", False)
WORKER_DOWN = cluster(None, "True", False)


def test_a_worker_dip_only_one_side_saw_during_node_loss_compares_equal() -> None:
    # Issue #29: the stand-in's status briefly had no readyWorkerReplicas; the real KubeRay never wrote that.
    standin = [UP, HEAD_DOWN, UP, WORKER_DOWN, UP]
    real = [UP, HEAD_DOWN, UP]
    assert comparable("raycluster", standin) == comparable("raycluster", real)


def test_a_head_that_never_went_unready_on_one_side_differs() -> None:
    assert comparable("raycluster", [UP, HEAD_DOWN, UP]) != comparable("raycluster", [UP, WORKER_DOWN, UP])


def test_a_side_that_ends_not_ready_differs() -> None:
    assert comparable("raycluster", [UP, HEAD_DOWN, UP]) != comparable("raycluster", [UP, UP, HEAD_DOWN])


def test_a_state_only_one_side_passed_through_differs() -> None:
    suspended = cluster(1, "True", False, state="suspended")
    assert comparable("raycluster", [UP, suspended, UP]) != comparable("raycluster", [UP, UP])


def test_a_worker_count_the_recovery_ends_on_is_compared() -> None:
    # MAY_APPEAR drops a transient from the middle only: a cluster left without its worker is a difference.
    assert comparable("raycluster", [UP, WORKER_DOWN]) != comparable("raycluster", [UP, UP])


def test_ray_statuses_a_poll_may_miss_compare_equal_but_the_outcome_does_not() -> None:
    start = job(None, None, "")
    polled = [start, job("Running", "PENDING", "running"), job("Running", "RUNNING", "running")]
    done = job("Complete", "SUCCEEDED", "succeeded")
    failed = job("Failed", "FAILED", "failed")
    assert comparable("rayjob", [*polled, done]) == comparable("rayjob", [start, done])
    assert comparable("rayjob", [*polled, done]) != comparable("rayjob", [*polled, failed])


def test_messages_compare_without_ray_timestamps_and_job_id_suffixes() -> None:
    ours = job("Failed", "FAILED", "failed", "2026-12-04 15:00:01,123 job fail-ab1c2 exited 3")
    theirs = job("Failed", "FAILED", "failed", "2026-12-04 16:30:59,999 job fail-zz9y8 exited 3")
    other = job("Failed", "FAILED", "failed", "2026-12-04 16:30:59,999 job fail-zz9y8 exited 4")
    assert comparable("rayjob", [ours]) == comparable("rayjob", [theirs]) != comparable("rayjob", [other])


AS_CREATED = tuple(ClusterView("live", None, None, 1, None, None, 1, False))
FIRST_STATUS = tuple(ClusterView("live", None, None, 1, "False", 1, 1, False))


def test_a_new_cluster_seen_before_its_first_status_on_one_side_only_compares_equal() -> None:
    # Seen on a 4-worker run: the stand-in's recorder saw the RayCluster as created, the real side's first view
    # already had KubeRay's first status.
    assert comparable("raycluster", [AS_CREATED, FIRST_STATUS, UP]) == comparable("raycluster", [FIRST_STATUS, UP])


def test_a_cluster_that_never_gets_a_status_differs_from_one_that_does() -> None:
    assert comparable("raycluster", [AS_CREATED]) != comparable("raycluster", [FIRST_STATUS, UP])
    assert comparable("raycluster", [AS_CREATED, AS_CREATED]) != comparable("raycluster", [FIRST_STATUS])
