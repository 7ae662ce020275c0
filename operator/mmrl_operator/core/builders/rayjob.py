"""The RayJob for one attempt: `<name>-a<N>`, submitted to the job's warm RayCluster by clusterSelector.

KubeRay's own `backoffLimit` would delete and recreate the whole cluster (and with clusterSelector it cannot
retry at all), so it stays 0: mmrl starts the next attempt itself, on the same cluster, resuming from the latest
complete checkpoint.

KubeRay's submitter pod (`ray job submit` against the head's dashboard) is built from our template rather than
KubeRay's default: the same container KubeRay would make (its name, the head's image, its resources; KubeRay fills
in the command), plus a label naming the job, which the job's NetworkPolicy admits to the dashboard port, the
restricted securityContext of the other Ray pods, the job's pull secrets, and no API token (it calls only Ray).
"""

from __future__ import annotations

from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_api.contract import config_digest, entrypoint_command, selftest_command
from mmrl_operator.core.builders.common import child_metadata
from mmrl_operator.core.builders.pod_security import locked_container, non_root_pod
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.builders.volumes import CONFIG_FILE
from mmrl_operator.core.names import PREFLIGHT_ATTEMPT, job_dir, raycluster_name, rayjob_name


def trainer_entrypoint(job: MultimodalRLJob, attempt: int) -> str:
    """The trainer reads the TrainerConfig where the job's ConfigMap is mounted on every Ray pod. The config's digest
    pins the attempt to the config it was created for: a ConfigMap change reaches pods only when the kubelet next
    syncs the volume, and the trainer waits for that instead of training on the old one."""
    (text,) = build_config_map(job)["data"].values()
    return entrypoint_command(CONFIG_FILE, attempt, config_digest(text))


def preflight_entrypoint(job: MultimodalRLJob) -> str:
    """Attempt 0 runs the image self-test with the job's backend; on a PVC it trains under the job's directory, so
    the checkpoint volume is part of what it proves (S3 jobs use the pod's temporary directory)."""
    workdir = f"{job_dir(job)}/preflight" if job.spec.checkpoint.pvc is not None else None
    return selftest_command(job.spec.trainer.backend, workdir)


def build_rayjob(job: MultimodalRLJob, attempt: int) -> dict[str, Any]:
    # Kueue admits the RayCluster; the RayJob only selects it, so queue labels on it would double-admit.
    labels = {c.LABEL_ATTEMPT: str(attempt)}
    metadata = child_metadata(job, rayjob_name(job.name, attempt), "rayjob", labels)
    # No entrypointNumCpus, entrypointNumGpus, entrypointMemory or entrypointResources: a job that asks for none
    # has its driver pinned to the head node with num_cpus=0 (Ray's JobManager.submit_job and _get_label_selector,
    # ray/dashboard/modules/job/job_manager.py), so the driver needs nothing from the head's num-cpus "0" and
    # takes no GPU worker's CPU. It only builds the config and waits on SkyRL's entry task, which runs on a worker.
    spec: dict[str, Any] = {
        "clusterSelector": {c.RAY_CLUSTER_LABEL: raycluster_name(job.name)},
        "entrypoint": preflight_entrypoint(job) if attempt == PREFLIGHT_ATTEMPT else trainer_entrypoint(job, attempt),
        "submissionMode": "K8sJobMode",
        "backoffLimit": 0,
        "shutdownAfterJobFinishes": False,
        "metadata": {"mmrl.dev/job": job.name, "mmrl.dev/attempt": str(attempt)},
    }
    spec["submitterPodTemplate"] = submitter_template(job)
    return {"apiVersion": c.RAY_API_VERSION, "kind": "RayJob", "metadata": metadata, "spec": spec}


# KubeRay's own submitter container (ray-operator common/job.go GetDefaultSubmitterContainer, v1.5.1).
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def submitter_template(job: MultimodalRLJob) -> dict[str, Any]:
    trainer = job.spec.trainer
    container = {
        "name": SUBMITTER_CONTAINER,
        "image": trainer.image,
        "imagePullPolicy": trainer.image_pull_policy,
        "resources": {k: dict(v) for k, v in SUBMITTER_RESOURCES.items()},
        "securityContext": locked_container(read_only_root=False),  # Ray's CLI writes under /tmp and $HOME
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": non_root_pod(),
        "containers": [container],
    }
    secrets = job.spec.cluster.pod_template.image_pull_secrets
    if secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in secrets]
    return {"metadata": {"labels": {c.LABEL_RAY_SUBMITTER: job.name}}, "spec": pod}
