"""spec.preflight on the real control plane with the strict KubeRay stand-in: the self-test runs as RayJob
`<name>-a0` before attempt 1 (never overlapping it), its failure ends the job InvalidConfig with no budget spent,
and an operator restart while it runs neither runs it again nor skips it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_local.addons.operator_process import OperatorProcess
from mmrl_operator.core.jsonmerge import merge_patch
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.operator import Jobs, phases_until_done, wait_until

pytestmark = pytest.mark.cluster
# S3 checkpoints (no PVC for kwok pods to wait on), so the local backend (MULTI_NODE's small model, which fits): the
# SkyRL self-test needs a PVC.
PREFLIGHT = merge_patch(MULTI_NODE, {"spec": {"preflight": True}})


@pytest.fixture
def kuberay(kuberay_strict):
    """Strict: the stand-in fails the test if attempt 1 starts while the preflight RayJob is still live."""
    return kuberay_strict


def rayjob(jobs: Jobs, name: str) -> dict:
    return next(o for o in jobs.ray("rayjobs") if o["metadata"]["name"] == name)


def test_preflight_passes_then_attempt_one_trains(jobs: Jobs, kuberay, operator, nodes_ready) -> None:
    kuberay.script("geo-a*", "succeed-after=1")
    jobs.create(cluster_job("geo", PREFLIGHT))
    assert phases_until_done(jobs, "geo", 120)[-1] == "Succeeded"
    st = jobs.status("geo")
    assert st["preflight"]["phase"] == "Succeeded" and jobs.condition("geo", "PreflightPassed") == "True"
    assert [a["index"] for a in st["attempts"]] == [1] and st.get("restarts", {}) == {}
    assert jobs.ray_names("rayjobs") == ["geo-a0", "geo-a1"]
    assert rayjob(jobs, "geo-a0")["spec"]["entrypoint"].startswith("python -m mmrl_trainer selftest")
    reasons = jobs.events("geo")
    assert reasons.index("PreflightStarted") < reasons.index("PreflightPassed") < reasons.index("AttemptStarted")


def test_a_failed_preflight_fails_the_job_as_invalid_config_without_an_attempt(
    jobs: Jobs, kuberay, operator, nodes_ready
) -> None:
    kuberay.script("geo-a*", "succeed-after=1")
    error = "mmrl-trainer error: self-test failed at hardware: --backend skyrl needs a CUDA GPU"
    kuberay.script("geo-a0", f"fail-after=1,message=Job entrypoint command failed with exit code 1; {error}")
    jobs.create(cluster_job("geo", PREFLIGHT))
    assert phases_until_done(jobs, "geo", 120)[-1] == "Failed"
    st = jobs.status("geo")
    failed = next(x for x in st["conditions"] if x["type"] == "Failed")
    assert failed["reason"] == "InvalidConfig" and "needs a CUDA GPU" in failed["message"]
    assert st["preflight"]["phase"] == "Failed" and "self-test failed at hardware" in st["preflight"]["message"]
    assert st.get("attempts", []) == [] and st.get("restarts", {}) == {} and st["attempt"] == 0
    assert jobs.ray_names("rayjobs") == ["geo-a0"]


def test_an_operator_restart_mid_preflight_neither_reruns_nor_skips_it(
    control_plane, jobs: Jobs, kuberay, nodes_ready, tmp_path: Path
) -> None:
    kuberay.script("geo-a*", "succeed-after=1")
    kuberay.script("geo-a0", "hang")
    first = OperatorProcess(control_plane.kubeconfig, tmp_path / "op1.log", namespaces=[jobs.ns]).start()
    try:
        jobs.create(cluster_job("geo", PREFLIGHT))
        wait_until(lambda: (jobs.status("geo").get("preflight") or {}).get("phase") == "Running", 90)
        wait_until(lambda: rayjob(jobs, "geo-a0").get("status", {}).get("jobDeploymentStatus") == "Running", 60)
        uid = rayjob(jobs, "geo-a0")["metadata"]["uid"]
    finally:
        first.kill()
    with OperatorProcess(control_plane.kubeconfig, tmp_path / "op2.log", namespaces=[jobs.ns]):
        wait_until(lambda: first.alive is False, 10)
        # The new operator sees the preflight running: attempt 1 waits for it.
        assert jobs.status("geo")["attempt"] == 0 and jobs.ray_names("rayjobs") == ["geo-a0"]
        kuberay.script("geo-a0", "succeed-after=1")
        assert phases_until_done(jobs, "geo", 120)[-1] == "Succeeded"
    assert rayjob(jobs, "geo-a0")["metadata"]["uid"] == uid  # the same preflight, never created twice
    st = jobs.status("geo")
    assert st["preflight"]["phase"] == "Succeeded" and [a["index"] for a in st["attempts"]] == [1]
    assert jobs.events("geo").count("PreflightStarted") == 1
