"""The RayCluster a job trains on: a CPU head and GPU worker groups placed on healthy HyperPod nodes.

Every pod template carries the job label (so the operator can find pods by job and node), the Kueue labels (HyperPod
task governance admits on the pods as well as the cluster), the checkpoint volume, and — in HyperPod mode — a
required node affinity that excludes nodes HyperPod marked unhealthy, so KubeRay's replacement pods land on good
nodes, and a preference for nodes whose deep health check Passed. NotIn (rather than In Schedulable) also admits
nodes without the label, e.g. a plain EKS CPU node group for the head. Nothing the operator builds tolerates
HyperPod's node-health-status taint (see `tolerations`).
"""

from __future__ import annotations

from typing import Any

from mmrl_api import MultimodalRLJob, WorkerGroup
from mmrl_api import constants as c
from mmrl_api.contract import ATTEMPT_LOG_CONTAINER, ATTEMPT_LOG_DIR, attempt_log_argv
from mmrl_api.tracking import secret_env
from mmrl_operator.core.builders.common import SPEC_HASH_ANNOTATION, child_metadata, spec_hash
from mmrl_operator.core.builders.efa import efa_env
from mmrl_operator.core.builders.pod_security import locked_container, non_root_pod
from mmrl_operator.core.builders.volumes import CONFIG_FILE, build_mounts
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_operator.core.names import TRAINER_IDENTITY, hf_cache_dir, job_dir, kueue_labels, raycluster_name
from mmrl_operator.core.observed import AVOIDED_NODES_ANNOTATION

SPEC_HASH_LABEL = SPEC_HASH_ANNOTATION
HOSTNAME_LABEL = "kubernetes.io/hostname"
UNHEALTHY = [c.HEALTH_UNSCHEDULABLE, c.HEALTH_PENDING_REPLACEMENT, c.HEALTH_PENDING_REBOOT]


def affinity(job: MultimodalRLJob) -> dict[str, Any] | None:
    return hyperpod_affinity() if job.spec.cluster.hyperpod else None


def hyperpod_affinity() -> dict[str, Any]:
    """Only nodes HyperPod has not marked unhealthy; among them, those whose deep health check Passed (GPU, NVLink,
    EFA and NCCL tested) first: only a preference, since nodes of instance groups created without deep health checks
    carry no such label."""
    term = {"matchExpressions": [{"key": c.HYPERPOD_HEALTH_LABEL, "operator": "NotIn", "values": UNHEALTHY}]}
    vetted = {
        "matchExpressions": [{"key": c.HYPERPOD_DEEP_HEALTH_LABEL, "operator": "In", "values": [c.DEEP_HEALTH_PASSED]}]
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": vetted}],
        }
    }


def _env(job: MultimodalRLJob) -> list[dict[str, Any]]:
    fixed = [
        {"name": "MMRL_TRAINER_CONFIG", "value": CONFIG_FILE},
        {"name": "MMRL_JOB_NAME", "value": job.name},
        {"name": "MMRL_JOB_NAMESPACE", "value": job.namespace},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    cache = hf_cache_dir(job)
    if cache is not None and "HF_HOME" not in _user_env(job):  # a job's own HF_HOME wins
        fixed.append({"name": "HF_HOME", "value": cache})
    return fixed + [e.wire() for e in job.spec.trainer.env] + _tracking_env(job)


def _tracking_env(job: MultimodalRLJob) -> list[dict[str, Any]]:
    """spec.tracking's credentials, as the variables MLflow's and W&B's clients read; a variable the user set in
    trainer.env wins."""
    taken = _user_env(job)
    return [
        {"name": var, "valueFrom": {"secretKeyRef": ref}}
        for var, ref in sorted(secret_env(job.spec.tracking).items())
        if var not in taken
    ]


def _user_env(job: MultimodalRLJob) -> set[str]:
    return {e.name for e in job.spec.trainer.env}


def _pod_template(
    job: MultimodalRLJob,
    *,
    container: str,
    component: str,
    resources: dict[str, Any],
    node_selector: dict[str, str],
    extra_tolerations: list[dict[str, Any]],
) -> dict[str, Any]:
    spec = job.spec
    overrides = spec.cluster.pod_template
    mounts = build_mounts(job)
    labels = {
        **overrides.labels,
        c.LABEL_JOB: job.name,
        c.LABEL_COMPONENT: component,
        **kueue_labels(job),
    }
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": container,
                "image": spec.trainer.image,
                "imagePullPolicy": spec.trainer.image_pull_policy,
                "env": _env(job) + efa_env(resources, node_selector.get(c.INSTANCE_TYPE_LABEL), _user_env(job)),
                "envFrom": [e.wire() for e in spec.trainer.env_from],
                "resources": resources,
                "volumeMounts": mounts.mounts,
                # Ray, torch and vLLM write under /tmp and $HOME (where the image keeps its Python too): not read-only.
                "securityContext": locked_container(read_only_root=False),
            }
        ],
        "securityContext": non_root_pod(),
        "volumes": mounts.volumes,
        "tolerations": [t.wire() for t in spec.cluster.tolerations] + extra_tolerations,
    }
    if not pod["containers"][0]["envFrom"]:
        del pod["containers"][0]["envFrom"]
    if not pod["tolerations"]:
        del pod["tolerations"]
    placement = affinity(job)
    if placement:
        pod["affinity"] = placement
    if node_selector:
        pod["nodeSelector"] = node_selector
    if spec.cluster.priority_class_name:
        pod["priorityClassName"] = spec.cluster.priority_class_name
    if overrides.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in overrides.image_pull_secrets]
    if overrides.scheduler_name:
        pod["schedulerName"] = overrides.scheduler_name
    if overrides.spec_patch:
        pod = merge_patch(pod, overrides.spec_patch)
    pod.update(trainer_identity(token=True))  # last: no specPatch chooses the pods' identity
    pod.pop("serviceAccount", None)  # the deprecated alias of serviceAccountName
    metadata: dict[str, Any] = {"labels": labels}
    if overrides.annotations:
        metadata["annotations"] = dict(overrides.annotations)
    return {"metadata": metadata, "spec": pod}


def trainer_identity(*, token: bool) -> dict[str, Any]:
    """The pod fields that make a pod run as the namespace's trainer identity. The Ray pods mount its API token (the
    trainer patches its job's status with it); the pods that only read S3 through the identity's IAM role (vLLM, the
    adapter check) do not."""
    return {"serviceAccountName": TRAINER_IDENTITY, "automountServiceAccountToken": token}


def _worker_resources(group: WorkerGroup) -> dict[str, Any]:
    requests = dict(group.resources.requests)
    limits = dict(group.resources.limits)
    for resource, count in ((c.GPU_RESOURCE, group.gpus), (c.EFA_RESOURCE, group.efa_per_node)):
        if count:
            # Extended resources must have request == limit.
            requests[resource] = limits[resource] = str(count)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _worker_group(job: MultimodalRLJob, group: WorkerGroup) -> dict[str, Any]:
    selector = dict(group.node_selector)
    if group.instance_type:
        selector[c.INSTANCE_TYPE_LABEL] = group.instance_type
    gpu_toleration = [{"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}] if group.gpus else []
    return {
        "groupName": group.name,
        "replicas": group.replicas,
        "minReplicas": group.replicas,
        "maxReplicas": group.replicas,
        "numOfHosts": 1,
        "rayStartParams": {},
        "template": _pod_template(
            job,
            container="ray-worker",
            component="ray-worker",
            resources=_worker_resources(group),
            node_selector=selector,
            extra_tolerations=gpu_toleration,
        ),
    }


def build_raycluster(job: MultimodalRLJob) -> dict[str, Any]:
    cluster = job.spec.cluster
    head_resources = cluster.head.resources.wire()
    spec = {
        "rayVersion": cluster.ray_version,
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            # The head runs no Ray work: with no CPUs or GPUs to offer, SkyRL's entry task (`@ray.remote(num_cpus=1)`
            # in mmrl_trainer/backends/skyrl.py) and every training actor go to the GPU workers. The RayJob's driver
            # still runs here, because it requests no entrypoint resources (see builders/rayjob.py). The head must
            # accept dashboard/job submissions from the RayJob submitter.
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "num-gpus": "0"},
            "template": _pod_template(
                job,
                container="ray-head",
                component="ray-head",
                resources=head_resources,
                node_selector=dict(cluster.head.node_selector),
                extra_tolerations=[],
            ),
        },
        "workerGroupSpecs": [_worker_group(job, g) for g in cluster.worker_groups],
    }
    log_container = _trainer_log_container(job)
    if log_container is not None:
        spec["headGroupSpec"]["template"]["spec"]["containers"].append(log_container)
    digest = spec_hash(spec)
    # Every Ray pod carries the digest of the spec it was built from, so pods built from an older spec can be
    # found and replaced between attempts (KubeRay does not roll existing pods when a template changes).
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    for template in templates:
        template["metadata"]["labels"][SPEC_HASH_LABEL] = digest
    metadata = child_metadata(job, raycluster_name(job.name), "raycluster", kueue_labels(job))
    metadata["annotations"] = {SPEC_HASH_ANNOTATION: digest}
    # Faulty-node memory (operator/avoidance.py) is outside the digest: it changes which nodes new pods prefer,
    # and must not make the pods already running on good nodes count as built from an older spec.
    avoided = avoided_nodes(job)
    if avoided:
        metadata["annotations"][AVOIDED_NODES_ANNOTATION] = ",".join(avoided)
        for template in templates:
            # On the pods too (KubeRay copies template annotations): a pod placed without the preference is told
            # from one the scheduler put on a remembered node for want of another.
            template["metadata"].setdefault("annotations", {})[AVOIDED_NODES_ANNOTATION] = ",".join(avoided)
            _prefer_other_nodes(template["spec"], avoided)
    return {"apiVersion": c.RAY_API_VERSION, "kind": "RayCluster", "metadata": metadata, "spec": spec}


def _trainer_log_container(job: MultimodalRLJob) -> dict[str, Any] | None:
    """The head pod's `trainer-log` container: prints every attempt's trainer log from the job directory
    (mmrl_trainer.attempt_log), so `kubectl logs <head> -c trainer-log` and `mmrl logs` show them with only pods/log,
    also for attempts whose pods are gone. None for s3:// job directories (no shared file system to read)."""
    directory = job_dir(job)
    if directory.startswith("s3://"):
        return None
    return {
        "name": ATTEMPT_LOG_CONTAINER,
        "image": job.spec.trainer.image,
        "imagePullPolicy": job.spec.trainer.image_pull_policy,
        "command": attempt_log_argv(f"{directory}/{ATTEMPT_LOG_DIR}"),
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": build_mounts(job).mounts,
        "securityContext": locked_container(read_only_root=True),  # it only reads the claim and prints
    }


def avoided_nodes(job: MultimodalRLJob) -> list[str]:
    return sorted({a.node for a in (job.status.avoided_nodes if job.status else [])})


def _prefer_other_nodes(pod: dict[str, Any], nodes: list[str]) -> None:
    away = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": nodes}]}
    node_affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
        {"weight": 100, "preference": away}
    )
