"""The vLLM Deployment + Service `<name>-inference` that serves the base model with the trained LoRA adapter.

vLLM loads every `--lora-modules` adapter before its HTTP server listens and exits if one cannot load, so the
startup and readiness probes on `/v1/models` mean "the adapter is loaded"; liveness uses `/health`. An init
container (the trainer image, `python -m mmrl_trainer.adapter`) fetches the adapter from S3 when it lives there
and re-checks it against the same rules the trainer applied at export, plus the sha256 the trainer reported, so
a changed or broken adapter stops the pod with a message instead of a crash-looping or silently degraded server.

The pods land where the training pods did: the same HyperPod health affinity, tolerations and pull secrets, the
checkpoint and model volumes read-only at the same paths (so the adapter path the trainer reported is valid
here), and `tensorParallelSize` GPUs per replica. Adapter runtime updates are a vLLM development feature and
are never enabled; a new adapter or a changed `spec.inference` rolls the Deployment instead.

The server sees what training saw: `--max-model-len` holds the longest conversation the adapter was trained on
(`inference.maxModelLen`, which admission keeps at least that long, or exactly that length), and a SkyRL-trained
adapter's images are resized under the same pixel cap its rollout engines used (`--mm-processor-kwargs`), so the
model never meets an image larger, in tokens, than any it learned on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_api.context_budget import spec_max_model_len
from mmrl_api.image_budget import image_budget
from mmrl_operator.core.builders.common import child_metadata, stamped
from mmrl_operator.core.builders.pod_security import locked_container, root_image_pod
from mmrl_operator.core.builders.raycluster import affinity, trainer_identity
from mmrl_operator.core.builders.volumes import build_mounts, local_path
from mmrl_operator.core.names import inference_name, job_dir

PORT = 8000
COMPONENT = "inference"
S3_ADAPTER_DIR = c.ADAPTER_MOUNT
SERVER_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
ADAPTER_SHA_ANNOTATION = "mmrl.dev/adapter-sha256"
PROMETHEUS = {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORT), "prometheus.io/path": "/metrics"}


@dataclass(frozen=True)
class Adapter:
    """What the Deployment serves: the adapter's location as the pods see it, and the limits it needs."""

    path: str
    max_lora_rank: int
    base_model: str
    sha256: str = ""


def served_base_name(model_uri: str) -> str:
    """The name vLLM serves the base model under: a hub id as is, a path or URI by its last component."""
    if "://" not in model_uri and not model_uri.startswith("/"):
        return model_uri.removeprefix("hf://")
    return model_uri.rstrip("/").rsplit("/", 1)[-1]


def adapter_name(job: MultimodalRLJob) -> str:
    return job.spec.inference.served_model_name or job.name


def model_path(job: MultimodalRLJob) -> str:
    """The model as the pods see it (pvc:// rewritten to the mount path); the trainer saw the same path."""
    path = local_path(job.spec.model.name, build_mounts(job).claim_paths) or job.spec.model.name
    return path.removeprefix("hf://")


def default_adapter(job: MultimodalRLJob) -> Adapter:
    """Where the trainer exports the adapter, for when it has not reported one (e.g. an older trainer)."""
    from mmrl_api.adapter_rules import smallest_max_lora_rank

    return Adapter(f"{job_dir(job)}/adapter", smallest_max_lora_rank(job.spec.lora.rank), model_path(job))


def serving_max_model_len(job: MultimodalRLJob) -> int:
    """`inference.maxModelLen`, or the longest conversation the adapter was trained on when it is unset."""
    spec = job.spec
    return spec.inference.max_model_len or spec_max_model_len(spec.algorithm, spec.dataset.environment)


def training_processor_kwargs(job: MultimodalRLJob) -> dict[str, Any] | None:
    """The image processor settings the rollout engines trained with, or None where training used the model's own.

    SkyRL's engines cap each image at `image_budget(maxPromptLength, n)` (trainer backends/skyrl_config.py), where n
    is the most images one prompt of the data carries, which only the trainer sees. Here n is 1: exact for an
    environment (one image per turn) and for one-image datasets; for a dataset whose prompts carry several images
    this cap is above the trained one. The local backend resizes with the model's own processor settings."""
    if job.spec.trainer.backend != "skyrl":
        return None
    return image_budget(job.spec.algorithm.max_prompt_length).processor_kwargs()


def vllm_args(job: MultimodalRLJob, adapter: Adapter) -> list[str]:
    inf = job.spec.inference
    local_adapter = S3_ADAPTER_DIR if adapter.path.startswith("s3://") else adapter.path
    base = served_base_name(job.spec.model.name)
    lora = {"name": adapter_name(job), "path": local_adapter, "base_model_name": base}
    args = [
        "--model",
        model_path(job),
        "--served-model-name",
        base,
        "--enable-lora",
        "--lora-modules",
        json.dumps(lora, separators=(",", ":")),
        "--max-lora-rank",
        str(adapter.max_lora_rank),
        "--max-loras",
        "1",
        "--tensor-parallel-size",
        str(inf.tensor_parallel_size),
        "--limit-mm-per-prompt",
        json.dumps({"image": inf.max_images_per_prompt}, separators=(",", ":")),
        "--max-model-len",
        str(serving_max_model_len(job)),
        "--port",
        str(PORT),
    ]
    processor = training_processor_kwargs(job)
    if processor is not None:
        args += ["--mm-processor-kwargs", json.dumps(processor, separators=(",", ":"))]
    if gpus(job):
        args += ["--gpu-memory-utilization", str(inf.gpu_memory_utilization)]
    if job.spec.model.revision and "://" not in job.spec.model.name:
        args += ["--revision", job.spec.model.revision]
    if job.spec.model.name.startswith("s3://"):
        args += ["--load-format", "runai_streamer"]  # vLLM streams safetensors from S3 itself
    return args + list(inf.extra_args)


def gpus(job: MultimodalRLJob) -> int:
    inf = job.spec.inference
    return inf.tensor_parallel_size if inf.gpus is None else inf.gpus


def _resources(job: MultimodalRLJob) -> dict[str, Any]:
    res = job.spec.inference.resources
    requests, limits = dict(res.requests), dict(res.limits)
    if gpus(job):
        requests[c.GPU_RESOURCE] = limits[c.GPU_RESOURCE] = str(gpus(job))
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def check_container(job: MultimodalRLJob, adapter: Adapter, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    command = ["python", "-m", "mmrl_trainer.adapter"]
    if adapter.path.startswith("s3://"):
        command += ["--adapter", S3_ADAPTER_DIR, "--copy-from", adapter.path]
    else:
        command += ["--adapter", adapter.path]
    command += ["--base-model", adapter.base_model, "--max-lora-rank", str(adapter.max_lora_rank)]
    if adapter.sha256:
        command += ["--sha256", adapter.sha256]
    return {
        "name": "check-adapter",
        "image": job.spec.trainer.image,
        "imagePullPolicy": job.spec.trainer.image_pull_policy,
        "command": command,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": mounts,
        # The last log lines become the termination message, so the operator can quote the broken rule.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # The trainer image's user, in a pod whose vLLM runs as root; it writes only the adapter volume.
        "securityContext": locked_container(read_only_root=True, non_root=True),
    }


def http_probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def adapter_volumes(job: MultimodalRLJob, adapter: Adapter) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training pods' claims (read-only here), /dev/shm in memory, and an emptyDir for an S3 adapter."""
    m = build_mounts(job)
    keep = {v["name"] for v in m.volumes if "persistentVolumeClaim" in v}
    volumes = [
        {**v, "persistentVolumeClaim": {**v["persistentVolumeClaim"], "readOnly": True}}
        for v in m.volumes
        if v["name"] in keep
    ]
    mounts = [{**vm, "readOnly": True} for vm in m.mounts if vm["name"] in keep]
    if adapter.path.startswith("s3://"):
        volumes.append({"name": "adapter", "emptyDir": {}})
        mounts.append({"name": "adapter", "mountPath": S3_ADAPTER_DIR})
    return volumes, mounts


def _env(job: MultimodalRLJob) -> list[dict[str, Any]]:
    """The server's own settings, then the trainer's secret variables (HF_TOKEN for a gated hub model, say): the
    server loads the same base model, so it needs the same credentials — as the same secretKeyRef, so the value
    never appears in the Deployment. The trainer's literal settings (NCCL, logging) are the trainer's alone."""
    env = [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}]
    taken = {e["name"] for e in env}
    return env + [
        e.wire() for e in job.spec.trainer.env if e.value_from and e.value_from.secret_key_ref and e.name not in taken
    ]


def _pod_spec(job: MultimodalRLJob, adapter: Adapter) -> dict[str, Any]:
    spec, inf = job.spec, job.spec.inference
    volumes, mounts = adapter_volumes(job, adapter)
    check_mounts = [{**vm, "readOnly": vm["name"] != "adapter"} for vm in mounts]
    server_mounts = [*({**vm, "readOnly": True} for vm in mounts), {"name": "dshm", "mountPath": c.SHM_MOUNT}]
    container: dict[str, Any] = {
        "name": "vllm",
        "image": inf.image,
        "command": SERVER_COMMAND,
        "args": vllm_args(job, adapter),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": _env(job),
        "resources": _resources(job),
        "volumeMounts": server_mounts,
        # Loading a large model can take many minutes: startup allows 30, then readiness and liveness take over.
        "startupProbe": http_probe("/v1/models", 10, 180),
        "readinessProbe": http_probe("/v1/models", 10, 3),
        "livenessProbe": http_probe("/health", 15, 4),
        "securityContext": vllm_security(),
    }
    if spec.trainer.env_from:
        container["envFrom"] = [e.wire() for e in spec.trainer.env_from]  # e.g. HF_TOKEN for a hub model
    return {
        **job_pod_basics(job, gpus(job)),
        "initContainers": [check_container(job, adapter, check_mounts)],
        "containers": [container],
        "volumes": [*volumes, {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }


def vllm_security() -> dict[str, Any]:
    """vLLM's container: its published images run as root and write their caches under $HOME (pod_security)."""
    return locked_container(read_only_root=False)


def job_pod_basics(job: MultimodalRLJob, gpu_count: int) -> dict[str, Any]:
    """Identity and placement of a pod the operator runs for a trained job (its vLLM server, its adapter check):
    the namespace's trainer identity, whose IRSA / Pod Identity role reads the adapter and model from S3, without the
    Kubernetes API token (neither calls the API); the training pods' tolerations, HyperPod health affinity and pull
    secrets; `inference.nodeSelector`; the securityContext that holds for vLLM's root image (each container adds
    its own, see pod_security)."""
    spec, inf = job.spec, job.spec.inference
    pod: dict[str, Any] = {**trainer_identity(token=False), "securityContext": root_image_pod()}
    tolerations = [t.wire() for t in spec.cluster.tolerations]
    if gpu_count:
        tolerations.append({"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod["tolerations"] = tolerations
    placement = affinity(job)
    if placement:
        pod["affinity"] = placement
    if inf.node_selector:
        pod["nodeSelector"] = dict(inf.node_selector)
    if spec.cluster.pod_template.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.cluster.pod_template.image_pull_secrets]
    return pod


def selector(job: MultimodalRLJob) -> dict[str, str]:
    return {c.LABEL_JOB: job.name, c.LABEL_COMPONENT: COMPONENT}


def build_deployment(job: MultimodalRLJob, adapter: Adapter) -> dict[str, Any]:
    annotations = {**PROMETHEUS, ADAPTER_SHA_ANNOTATION: adapter.sha256} if adapter.sha256 else dict(PROMETHEUS)
    metadata = child_metadata(job, inference_name(job.name), COMPONENT)
    return vllm_deployment(metadata, job.spec.inference.replicas, selector(job), annotations, _pod_spec(job, adapter))


def build_service(job: MultimodalRLJob) -> dict[str, Any]:
    metadata = child_metadata(job, inference_name(job.name), COMPONENT)
    metadata["annotations"] = dict(PROMETHEUS)
    return vllm_service(metadata, selector(job))


def vllm_deployment(
    metadata: dict[str, Any],
    replicas: int,
    labels: dict[str, str],
    annotations: dict[str, str],
    pod_spec: dict[str, Any],
) -> dict[str, Any]:
    """A vLLM server's Deployment (a job's own, a ModelServer's): `labels` select its pods."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            # A new pod must be serving before an old one goes: no gap in answers during a roll-out.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 1800,
            # Copies: one dict in two places would print as a YAML anchor (`mmrl render`) and change together.
            "template": {"metadata": {"labels": dict(labels), "annotations": annotations}, "spec": pod_spec},
        },
    }
    return stamped(deployment)


def vllm_service(metadata: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The ClusterIP Service in front of the pods `labels` select, on vLLM's port."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": labels,
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return stamped(service)


def service_url(job: MultimodalRLJob) -> str:
    return f"http://{inference_name(job.name)}.{job.namespace}.svc:{PORT}/v1"
