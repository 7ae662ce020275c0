"""Operator robustness: only the Lease holder acts, a standby takes over from a leader killed after it served
passes, and an operator killed anywhere in its work (by exiting after its k-th API write, or by SIGKILL at a random
moment after it has served a reconcile pass, never only during its imports) never duplicates a child and always
converges."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_local.addons.operator_process import CRASH_AFTER_WRITES
from tests.support.jobspecs import cluster_job
from tests.support.operator import OperatorProcess, phases_until_done, wait_until

pytestmark = pytest.mark.cluster
RECONCILES = "mmrl_reconcile_duration_seconds_count"  # observed at the end of every pass that read its job
STANDING_BY, LEADER = "mmrl_queue_standing_by", "mmrl_leader"
INJECTED_EXIT = 137  # mmrl_local.addons.crashing's os._exit after the operator's k-th write; a SIGKILL reads -9


def served_a_pass(op: OperatorProcess) -> bool:
    """Whether the process has completed a reconcile pass (its metrics port is up only after its imports)."""
    try:
        return op.metric(RECONCILES) >= 1
    except OSError:
        return False


# The lease's timings (leader.py): a standby takes a lease over when it is LEASE_SECONDS past its last renewal and
# asks every second; the operator's resync is 30 s. A replica that takes over within these bounds ran the job because
# it kept the job's key while it stood by, not because a resync came round.
LEASE_SECONDS = 15
FAILOVER_BOUND = LEASE_SECONDS + 10  # after a SIGKILL: the lease runs out, then one poll and one pass, on a busy host
HANDOVER_BOUND = 10  # after a clean stop, which releases the lease: one poll and one pass; far below the lease


@contextlib.contextmanager
def two_replicas(control_plane, jobs, kuberay, tmp_path: Path, api_client) -> Iterator[tuple[OperatorProcess, ...]]:
    """Two replicas with leader election; the job "geo" runs attempt 1 (held); yields (leader, standby)."""
    lease = "mmrl-test-" + jobs.ns[-6:]
    kw = {"standalone": False, "namespaces": [jobs.ns], "env": {"MMRL_LEASE_NAME": lease}}
    a = OperatorProcess(control_plane.kubeconfig, tmp_path / "a.log", identity="replica-a", **kw).start()
    b = OperatorProcess(control_plane.kubeconfig, tmp_path / "b.log", identity="replica-b", **kw).start()
    try:
        # Under load one replica can still be importing when the other has already run the job to Running.
        wait_until(lambda: a.serving() and b.serving(), 90, what="both replicas up")
        kuberay.script("geo-a1", "hang")
        jobs.create(cluster_job("geo"))
        wait_until(lambda: jobs.status("geo").get("phase") == "Running", 60)
        holder = holder_of(api_client, lease)
        assert holder in ("replica-a", "replica-b")
        leader, standby = (a, b) if holder == "replica-a" else (b, a)
        # The leader has served the passes that ran the job; the standby has served none.
        assert leader.metric(RECONCILES) > 0 and standby.metric(RECONCILES) == 0
        yield leader, standby
        assert holder_of(api_client, lease) == standby.identity
    finally:
        a.stop()
        b.stop()


def holder_of(api_client, lease: str) -> str | None:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(lease, "default").spec.holder_identity


def suspended_within(jobs, bound: float, since: float) -> None:
    """Suspend the job (work only a leader does) and wait until it is, at most `bound` seconds after `since`."""
    jobs.patch("geo", {"spec": {"suspend": True}})
    left = bound - (time.monotonic() - since)
    wait_until(lambda: jobs.status("geo").get("phase") == "Suspended", left, what="the other replica to act")


def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(
    control_plane, jobs, kuberay, nodes_ready, tmp_path: Path, api_client
):
    with two_replicas(control_plane, jobs, kuberay, tmp_path, api_client) as (leader, standby):
        # The standby kept the job's key from its first listing: it runs it the moment it leads.
        wait_until(lambda: standby.metric(STANDING_BY) == 1, 30, what="the standby to keep the job's key")
        assert standby.metric(LEADER) == 0 and leader.metric(LEADER) == 1
        leader.kill()
        killed = time.monotonic()
        kuberay.script("geo-a2", "succeed-after=1")
        suspended_within(jobs, FAILOVER_BOUND, killed)
        assert standby.metric(STANDING_BY) == 0 and standby.metric(LEADER) == 1
        # A pass is counted when it ends, a moment after its status write.
        wait_until(lambda: standby.metric(RECONCILES) > 0, 10, what="the standby's pass to be counted")
        wait_until(lambda: not jobs.ray_names("rayjobs") and not jobs.ray_names("rayclusters"), 60, what="deletes")
        # The new leader carries the job on to its end, with one cluster and one RayJob per attempt.
        jobs.patch("geo", {"spec": {"suspend": False}})
        assert phases_until_done(jobs, "geo", timeout=120)[-1] == "Succeeded"
    status = jobs.status("geo")
    assert [(a["rayJob"], a["result"]) for a in status["attempts"]] == [("geo-a1", "Stopped"), ("geo-a2", "Succeeded")]
    assert jobs.ray_names("rayjobs") == ["geo-a2"] and jobs.ray_names("rayclusters") == ["geo"]


def test_a_leader_stopped_cleanly_hands_the_lease_over_at_once(
    control_plane, jobs, kuberay, nodes_ready, tmp_path: Path, api_client
):
    """A rolling update: SIGTERM ends the leader's last pass, then releases its lease; the standby leads within a
    second, where it would otherwise wait out the lease (15 s)."""
    with two_replicas(control_plane, jobs, kuberay, tmp_path, api_client) as (leader, standby):
        wait_until(lambda: standby.metric(STANDING_BY) == 1, 30, what="the standby to keep the job's key")
        leader.stop()  # SIGTERM, as a rollout sends it
        assert "released the lease" in leader.log_path.read_text()
        suspended_within(jobs, HANDOVER_BOUND, time.monotonic())
        wait_until(lambda: standby.metric(RECONCILES) > 0, 10, what="the standby's pass to be counted")


def test_killed_at_random_points_never_duplicates_and_converges(
    control_plane, jobs, kuberay, nodes_ready, tmp_path: Path
):
    # Attempt 1 fails (application), attempt 2 succeeds: the run crosses creation, failure, retry and success.
    kuberay.script("geo-a*", "succeed-after=1")
    kuberay.script("geo-a1", "fail-after=1")
    jobs.create(cluster_job("geo", {"spec": {"resilience": {"maxRestarts": 3}}}))
    rng = random.Random(7)
    kills, injected, killed_after_a_pass = 0, 0, 0
    deadline = time.monotonic() + 420
    while kills < 20 or jobs.status("geo").get("phase") not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"did not converge after {kills} kills"
        if kills % 2 == 0:
            # Exit right after the k-th write of this process: lands between any two API calls of a pass.
            env = {CRASH_AFTER_WRITES: str(rng.randint(1, 6))}  # the operator, run by mmrl_local.addons.crashing
            op = OperatorProcess(control_plane.kubeconfig, tmp_path / "op.log", namespaces=[jobs.ns], env=env).start()
            wait_until(lambda op=op: not op.alive or served_a_pass(op), 90, interval=0.05, what="a write or a pass")
            if op.alive:
                # Its passes had fewer than k writes (in steady state a pass writes nothing): kill it now that it
                # has served one.
                op.kill()
                killed_after_a_pass += 1
            else:
                assert op.proc is not None and op.proc.returncode == INJECTED_EXIT, "exited, but not after a write"
                injected += 1
        else:
            op = OperatorProcess(control_plane.kubeconfig, tmp_path / "op.log", namespaces=[jobs.ns]).start()
            wait_until(lambda op=op: served_a_pass(op), 90, interval=0.05, what="the operator to serve a pass")
            # Then at a random moment of what follows: the passes its own writes and the job's progress ask for.
            time.sleep(rng.uniform(0.0, 1.5))
            op.kill()
            killed_after_a_pass += 1
        kills += 1
        # Invariants after every crash: one cluster, attempts numbered 1..N without gaps or repeats.
        assert jobs.ray_names("rayclusters") in ([], ["geo"])
        attempts = sorted(int(n.rsplit("-a", 1)[1]) for n in jobs.ray_names("rayjobs"))
        assert attempts == list(range(1, len(attempts) + 1))
        if kills >= 20 and jobs.status("geo").get("phase") not in ("Succeeded", "Failed"):
            with OperatorProcess(control_plane.kubeconfig, tmp_path / "final.log", namespaces=[jobs.ns]):
                phases_until_done(jobs, "geo", timeout=120)
    # Both kinds of crash happened: between two writes of a pass, and after at least one pass was served.
    assert injected > 0 and killed_after_a_pass > 0, (injected, killed_after_a_pass)
    status = jobs.status("geo")
    assert status["phase"] == "Succeeded"
    assert jobs.ray_names("rayjobs") == ["geo-a1", "geo-a2"] and jobs.ray_names("rayclusters") == ["geo"]
    assert status["restarts"] == {"application": 1}
    assert [a["result"] for a in status["attempts"]] == ["Failed", "Succeeded"]
