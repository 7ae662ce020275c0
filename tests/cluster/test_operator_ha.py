"""Operator robustness: only the Lease holder acts, a standby takes over, and an operator killed anywhere in a
reconcile (by SIGKILL at random times and by exiting after its k-th API write) never duplicates a child and
always converges."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.jobspecs import cluster_job
from tests.support.operator import OperatorProcess, phases_until_done, wait_until

pytestmark = pytest.mark.cluster
RECONCILES = "mmrl_reconcile_duration_seconds_count"


def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(
    control_plane, jobs, kuberay, nodes_ready, tmp_path: Path, api_client
):
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
        holder = client.CoordinationV1Api(api_client).read_namespaced_lease(lease, "default").spec.holder_identity
        leader, standby = (a, b) if holder == "replica-a" else (b, a)
        assert holder in ("replica-a", "replica-b")
        assert leader.metric(RECONCILES) > 0 and standby.metric(RECONCILES) == 0
        leader.kill()
        kuberay.script("geo-a2", "succeed-after=1")
        jobs.patch("geo", {"spec": {"suspend": True}})  # work that only a live leader can do
        wait_until(lambda: jobs.status("geo").get("phase") == "Suspended", 60, what="standby to take over")
        assert standby.metric(RECONCILES) > 0
    finally:
        a.stop()
        b.stop()


def test_killed_at_random_points_never_duplicates_and_converges(
    control_plane, jobs, kuberay, nodes_ready, tmp_path: Path
):
    # Attempt 1 fails (application), attempt 2 succeeds: the run crosses creation, failure, retry and success.
    kuberay.script("geo-a*", "succeed-after=1")
    kuberay.script("geo-a1", "fail-after=1")
    jobs.create(cluster_job("geo", {"spec": {"resilience": {"maxRestarts": 3}}}))
    rng = random.Random(7)
    kills = 0
    deadline = time.monotonic() + 240
    while kills < 20 or jobs.status("geo").get("phase") not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"did not converge after {kills} kills"
        if kills % 2 == 0:
            # Exit right after the k-th write of this process: lands between any two API calls of a pass.
            env = {"MMRL_CRASH_AFTER_WRITES": str(rng.randint(1, 6))}
            op = OperatorProcess(control_plane.kubeconfig, tmp_path / "op.log", namespaces=[jobs.ns], env=env).start()
            end = time.monotonic() + 5
            while op.alive and time.monotonic() < end:
                time.sleep(0.05)
            op.kill()  # a pass in steady state makes no writes, so it may still be alive: kill it then
        else:
            op = OperatorProcess(control_plane.kubeconfig, tmp_path / "op.log", namespaces=[jobs.ns]).start()
            time.sleep(rng.uniform(0.5, 3.0))
            op.kill()
        kills += 1
        # Invariants after every crash: one cluster, attempts numbered 1..N without gaps or repeats.
        assert jobs.ray_names("rayclusters") in ([], ["geo"])
        attempts = sorted(int(n.rsplit("-a", 1)[1]) for n in jobs.ray_names("rayjobs"))
        assert attempts == list(range(1, len(attempts) + 1))
        if kills >= 20 and jobs.status("geo").get("phase") not in ("Succeeded", "Failed"):
            with OperatorProcess(control_plane.kubeconfig, tmp_path / "final.log", namespaces=[jobs.ns]):
                phases_until_done(jobs, "geo", timeout=120)
    status = jobs.status("geo")
    assert status["phase"] == "Succeeded"
    assert jobs.ray_names("rayjobs") == ["geo-a1", "geo-a2"] and jobs.ray_names("rayclusters") == ["geo"]
    assert status["restarts"] == {"application": 1}
    assert [a["result"] for a in status["attempts"]] == ["Failed", "Succeeded"]
