"""The preflight (`spec.preflight`): the trainer image's self-test, run as attempt 0 (RayJob `<name>-a0`) on the
job's own RayCluster before attempt 1.

Guarantee: it runs to an outcome exactly once per job before the first attempt, across operator restarts. Its
RayJob has a fixed name; a pass that finds it without a record (the operator died between creating and recording
it) adopts it instead of creating another; a recorded one that disappeared before it finished (deleted, suspended)
is submitted again, since it never gave a verdict; attempt 1 is not started before `status.preflight.phase` is
Succeeded. A node going away under it stops it and runs it again. A failure ends the job Failed, reason
InvalidConfig, charging no restart budget: a broken image or cluster fails every retry the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from mmrl_api.contract import last_error_line
from mmrl_api.status import PreflightStatus
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.decision import Decision, parse_ts, ts
from mmrl_operator.core.names import PREFLIGHT_ATTEMPT, rayjob_name
from mmrl_operator.core.observed import rayjob_outcome
from mmrl_operator.core.shape import dig

REASON = "Preflight"
PASSED = "the image self-test passed on the job's RayCluster"
FAILED_REASON = "InvalidConfig"


def preflight_due(d: Decision) -> bool:
    """The job asks for a preflight, no attempt has started, and the preflight has not passed yet."""
    pf = d.status.preflight
    return d.spec.preflight and d.status.attempt == 0 and not (pf is not None and pf.phase == "Succeeded")


def unsupported(d: Decision) -> str | None:
    """Why this job's preflight cannot run, or None. The SkyRL self-test trains on the GPU workers from files its
    driver writes on the head (tiny model, parquet, checkpoints): only the checkpoint PVC is seen by every pod."""
    if d.spec.trainer.backend == "skyrl" and d.spec.checkpoint.pvc is None:
        return (
            "spec.preflight: the SkyRL self-test needs spec.checkpoint.pvc, the volume every Ray pod shares; "
            "with spec.checkpoint.s3 run `python -m mmrl_trainer selftest` in the image instead"
        )
    return None


def passed_before_attempt_one(d: Decision) -> None:
    """Attempt 1 is being adopted: the pass that created it saw the preflight pass, then died before writing so."""
    pf = d.status.preflight
    if pf is not None and pf.phase in ("Pending", "Running"):
        pf.phase, pf.end_time, pf.message = "Succeeded", ts(d.now), PASSED


def step_preflight(d: Decision, ready_to_start: Callable[[Decision], bool]) -> bool:
    """Advance the preflight; True when it passed in this pass (attempt 1 may start now)."""
    pf = d.status.preflight = d.status.preflight or PreflightStatus()
    if pf.phase == "Pending" and (why := unsupported(d)) is not None:
        fail(d, pf, why)
        return False
    name = rayjob_name(d.job.name, PREFLIGHT_ATTEMPT)
    rayjob = d.obs.rayjobs.get(PREFLIGHT_ATTEMPT)
    if pf.phase == "Running" and rayjob is None:
        pf.phase, pf.message = "Pending", f"RayJob {name} disappeared before it finished; it runs again"
        d.event("Warning", "PreflightLost", pf.message)
    if pf.phase == "Pending":
        if rayjob is None:
            if ready_to_start(d):
                d.plan.apply.append(build_rayjob(d.job, PREFLIGHT_ATTEMPT))
                record_start(d, pf, name)
                d.event("Normal", "PreflightStarted", f"preflight self-test submitted as RayJob {name}")
            return False
        if dig(rayjob, "metadata", "deletionTimestamp"):
            d.set_phase("Provisioning", f"waiting for the stopped preflight RayJob {name} to go", REASON)
            return False
        record_start(d, pf, name)  # created by a pass whose status write never happened: adopt, never recreate
    assert rayjob is not None
    return track(d, pf, rayjob, name)


def record_start(d: Decision, pf: PreflightStatus, name: str) -> None:
    pf.phase, pf.ray_job, pf.start_time, pf.end_time = "Running", name, ts(d.now), None
    pf.message = "the image self-test runs on the job's RayCluster"
    d.set_phase("Running", f"preflight: {pf.message}", REASON)


def track(d: Decision, pf: PreflightStatus, rayjob: dict, name: str) -> bool:
    outcome, message = rayjob_outcome(rayjob)
    if d.stopping and outcome != "Succeeded":
        d.delete_rayjob(PREFLIGHT_ATTEMPT)
        pf.phase, pf.message = "Pending", f"stopped by {d.stopping[0].message}; it runs again"
        d.event("Warning", "PreflightStopped", f"preflight RayJob {name} {pf.message}")
        d.set_phase("Provisioning", f"preflight {pf.message}", REASON)
        return False
    if outcome == "Succeeded":
        pf.phase, pf.end_time, pf.message = "Succeeded", ts(d.now), PASSED
        d.event("Normal", "PreflightPassed", f"preflight RayJob {name}: {pf.message}")
        return True
    if outcome == "Failed":
        fail(d, pf, last_error_line(message) or message.splitlines()[0])
        return False
    timeout = d.spec.resilience.startup_timeout_seconds
    started = parse_ts(pf.start_time)
    if timeout and started is not None:
        deadline = started + timedelta(seconds=timeout)
        if d.now >= deadline:
            d.delete_rayjob(PREFLIGHT_ATTEMPT)
            fail(d, pf, f"it did not finish within {timeout}s (spec.resilience.startupTimeoutSeconds)")
            return False
        d.due.append(deadline)
    state = "running" if outcome == "Running" else "being submitted"
    d.set_phase("Running", f"preflight: the image self-test is {state} as RayJob {name}", REASON)
    return False


def fail(d: Decision, pf: PreflightStatus, detail: str) -> None:
    """The job ends here: no attempt, no restart charged (spec.preflight)."""
    pf.phase, pf.end_time, pf.message = "Failed", ts(d.now), detail[:1024]
    text = f"the preflight self-test failed, so no attempt was started (spec.preflight): {detail}"
    d.status.finished_at = ts(d.now)
    d.status.message = text[:2048]
    d.set_phase("Failed", d.status.message, FAILED_REASON)
    d.event("Warning", FAILED_REASON, d.status.message)
