"""RayJob side of the KubeRay stand-in: the outcome script language, the status objects KubeRay v1.5 writes at
each jobDeploymentStatus transition, and ``EntrypointRun``, which really executes a RayJob's entrypoint as a
local subprocess (run mode).

Script (annotation ``mmrl-local.dev/script`` on the RayJob, or ``KubeRayStandIn.script(...)``): comma-separated
directives, e.g. ``"succeed-after=2"``, ``"fail-after=1"``, ``"succeed-after=30,fail-on-node-loss"``,
``"hang"`` (stays RUNNING), ``"run"`` (execute ``spec.entrypoint`` in the head pod; its exit code decides).
"""

from __future__ import annotations

import secrets
import shlex
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mmrl_local.common import procs
from mmrl_local.common.clock import now_iso
from mmrl_local.network import podnet
from mmrl_local.node import podrun


class ScriptError(ValueError):
    pass


@dataclass(frozen=True)
class Script:
    """How a RayJob ends. ``outcome`` is "succeed", "fail", "hang" or "run"."""

    outcome: str = "succeed"
    after: float = 1.0
    fail_on_node_loss: bool = False
    message: str = ""

    @classmethod
    def parse(cls, text: str) -> Script:
        outcome, after, node_loss, message = "succeed", 1.0, False, ""
        for raw in text.split(","):
            item = raw.strip()
            key, _, value = item.partition("=")
            if not item:
                continue
            if key in ("succeed-after", "fail-after"):
                try:
                    after = float(value)
                except ValueError as err:
                    raise ScriptError(f"{item!r}: expected seconds, e.g. {key}=2") from err
                outcome = key.split("-")[0]
            elif key in ("hang", "run") and not value:
                outcome = key
            elif key == "fail-on-node-loss" and not value:
                node_loss = True
            elif key == "message":
                message = value
            else:
                raise ScriptError(
                    f"unknown directive {item!r}; use succeed-after=S, fail-after=S, hang, run, "
                    "fail-on-node-loss, message=TEXT"
                )
        # A job that really runs on the cluster's pods dies with them.
        return cls(outcome, after, node_loss or outcome == "run", message)


def parse_time(value: str | None) -> datetime | None:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if value else None


def validation_error(job: dict) -> str | None:
    spec = job.get("spec") or {}
    has_spec, has_selector = bool(spec.get("rayClusterSpec")), bool(spec.get("clusterSelector"))
    if has_spec == has_selector:
        return "exactly one of spec.rayClusterSpec and spec.clusterSelector must be set"
    if has_selector and "ray.io/cluster" not in spec["clusterSelector"]:
        return "spec.clusterSelector must contain the key ray.io/cluster"
    if not spec.get("entrypoint") and spec.get("submissionMode", "K8sJobMode") != "InteractiveMode":
        return "spec.entrypoint is required"
    return None


def initializing(job: dict, cluster_name: str) -> dict:
    """KubeRay's first status (``initRayJobStatusIfNeed``). Like every status below it leaves out what KubeRay's
    Go types omit when empty (``omitempty``): no ``jobStatus`` until Ray has reported one."""
    spec = job.get("spec") or {}
    ns = job["metadata"]["namespace"]
    return {
        "jobDeploymentStatus": "Initializing",
        "jobId": spec.get("jobId") or f"{job['metadata']['name']}-{secrets.token_hex(3)[:5]}",
        "rayClusterName": cluster_name,
        "dashboardURL": f"{cluster_name}-head-svc.{ns}.svc.cluster.local:8265",
        "startTime": now_iso(),
        "observedGeneration": job["metadata"].get("generation"),
    }


def submitted() -> dict:
    """The cluster is ready and the submitter Job exists: KubeRay moves to Running before it has asked Ray about
    the job, so there is no ``jobStatus`` yet (its next reconcile, up to 3 s later, reads Ray's)."""
    return {"jobDeploymentStatus": "Running"}


def pending() -> dict:
    """Ray's job exists and its driver has not started (Ray's wording, ``JobInfo.__post_init__``)."""
    return {"jobDeploymentStatus": "Running", "jobStatus": "PENDING", "message": "Job has not started yet."}


def running() -> dict:
    return {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "message": "Job is currently running."}


RAY_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def ray_job_ended(succeeded: bool, message: str = "") -> dict:
    """Ray's job ended while KubeRay's submitter Job has not finished yet (it follows the job's logs): KubeRay
    copies Ray's status and message but stays Running, without a reason; its next reconcile ends the RayJob."""
    if succeeded:
        return {"jobStatus": "SUCCEEDED", "message": message or "Job finished successfully."}
    return {"jobStatus": "FAILED", "message": message or "Job failed."}


def submission_failed() -> dict:
    """The submitter Job hit its backoffLimit (KubeRay's default 2: three pods failed): KubeRay fails the RayJob
    with SubmissionFailed and leaves ``jobStatus`` as Ray last reported it."""
    return {
        "jobDeploymentStatus": "Failed",
        "reason": "SubmissionFailed",
        "message": "Job submission has failed. Reason: BackoffLimitExceeded. "
        "Message: Job has reached the specified backoff limit",
        "endTime": now_iso(),
        "failed": 1,
    }


def finished(succeeded: bool, reason: str = "AppFailed", message: str = "") -> dict:
    if succeeded:
        return {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "endTime": now_iso(),
            "succeeded": 1,
            "failed": 0,
            "message": message or "Job finished successfully.",
        }
    return {
        "jobDeploymentStatus": "Failed",
        "jobStatus": "FAILED",
        "endTime": now_iso(),
        "succeeded": 0,
        "failed": 1,
        "reason": reason,
        "message": message or "Job failed.",
    }


def validation_failed(message: str) -> dict:
    return {"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed", "message": message}


def is_terminal(status: dict) -> bool:
    return status.get("jobDeploymentStatus") in ("Complete", "Failed", "ValidationFailed")


RAY_LOG_LINES = 10  # Ray's job supervisor quotes the last 10 lines of the job's log on failure
RAY_LOG_CHARS = 20000


def ray_entrypoint(entrypoint: str) -> str:
    """The entrypoint as Ray receives it from KubeRay's submitter: ``ray job submit ... -- <entrypoint>`` runs in
    a shell, which splits it into words, and Ray's CLI joins them again with ``shlex.join``. (Exact for plain words
    and quotes; the submitter's shell would also expand variables and act on ``&&``, ``;`` and redirections.)"""
    try:
        return shlex.join(shlex.split(entrypoint))
    except ValueError:
        return entrypoint


def ray_log_header(job_id: str, entrypoint: str) -> str:
    """The two lines Ray (2.60) writes at the top of every job's log, before the driver's own output: the job
    manager's, in Ray's logger format, then the supervisor's."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return (
        f"{stamp}\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
        f"Running entrypoint for job {job_id}: {ray_entrypoint(entrypoint)}\n"
    )


class EntrypointRun:
    """``spec.entrypoint`` executing as ``bash -c`` inside the Ray head pod's view (``podrun``): the head
    container's env and volumes at their mount paths, its ServiceAccount token for the API, and the head pod's
    network namespace when a ``network`` is given. Ray runs a job's driver on the head, which is why the head pod
    is the one that matters. Output is streamed to a log file."""

    def __init__(
        self,
        job: dict,
        head_pod: dict,
        materialiser: podrun.PodMaterialiser,
        log_dir: Path,
        network: podnet.PodNetwork | None = None,
        submission: int = 1,
    ) -> None:
        meta = job["metadata"]
        base = f"{meta['namespace']}_{meta['name']}" + (f".{submission}" if submission > 1 else "")
        self.log = log_dir / f"{base}.log"
        job_id = (job.get("status") or {}).get("jobId", "")
        view = materialiser.view(head_pod)
        view.env.update({"MMRL_LOCAL_RAYJOB": f"{meta['namespace']}/{meta['name']}", "RAY_JOB_ID": job_id})
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.log.write_text(ray_log_header(job_id, job["spec"]["entrypoint"]))
        root = log_dir / "roots" / base
        sandbox = network.sandbox(head_pod) if network is not None else None
        self.proc: subprocess.Popen = podrun.spawn_in_pod(
            view, ["bash", "-c", job["spec"]["entrypoint"]], self.log, root, sandbox
        )

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        procs.stop(self.proc, timeout=3.0)

    def failure_message(self) -> str:
        """Ray's own wording for a failed entrypoint (``JobSupervisor``), which KubeRay copies into the RayJob's
        status.message: the last lines of the job's log, newlines kept."""
        code = self.proc.returncode
        lines = self.log.read_text(errors="replace").splitlines(keepends=True) if self.log.exists() else []
        tail = "".join(lines[-RAY_LOG_LINES:])[-RAY_LOG_CHARS:]
        if not tail:
            return f"Job entrypoint command failed with exit code {code}. No logs available."
        head = f"Job entrypoint command failed with exit code {code}, last available logs (truncated to 20,000 chars)"
        return f"{head}:\n{tail}"
