"""The Deployment and Service `<server>-vllm` of a ModelServer: vLLM serving one base model, with runtime LoRA
loading switched on so adapters are loaded and unloaded without a restart, behind the gateway (`gateway.py`) that
alone reaches that API.

Unlike a job's dedicated server (`inference.py`), no adapter is named at start: vLLM starts with the base model only,
and the operator has the gateway of each ready replica stage and load each adapter. Everything vLLM fixes at start
comes from the ModelServer's spec: the largest rank it can hold, how many adapters one batch may mix (`--max-loras`)
and how many it keeps (`--max-cpu-loras`), the context length and the image pixel cap. It listens on 127.0.0.1 only,
whatever `extraArgs` say. The adapters are read by the gateway from the claims in `adapterVolumes`, mounted read-only
where the jobs' pods mount them, and of each only the server's namespace's directory; vLLM reads only the gateway's
checked copies.
"""

from __future__ import annotations

import json
from typing import Any

from mmrl_api import constants as c
from mmrl_api.gateway_contract import DEFAULT_OPERATOR_IMAGE, VLLM_API_KEY_ENV, VLLM_PORT
from mmrl_api.image_budget import pixel_cap_kwargs
from mmrl_api.model_server import AdapterVolume, ModelServer
from mmrl_operator.core.builders.common import controller_reference
from mmrl_operator.core.builders.gateway import gateway_container, gateway_volumes, loopback_probe, store_mount
from mmrl_operator.core.builders.inference import (
    PORT,
    PROMETHEUS,
    SERVER_COMMAND,
    served_base_name,
    vllm_deployment,
    vllm_security,
    vllm_service,
)
from mmrl_operator.core.builders.pod_security import root_image_pod
from mmrl_operator.core.builders.raycluster import hyperpod_affinity
from mmrl_operator.core.names import object_uid

COMPONENT = "model-server"
ADAPTERS_LOADED = "mmrl.dev/adapters-loaded"  # the replicas' readiness gate
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def server_child_name(server_name: str) -> str:
    return f"{server_name}-vllm"


def server_labels(server: ModelServer) -> dict[str, str]:
    return {c.LABEL_SERVER: server.name, c.LABEL_COMPONENT: COMPONENT, c.LABEL_MANAGED_BY: c.MANAGED_BY}


def selector(server: ModelServer) -> dict[str, str]:
    return {c.LABEL_SERVER: server.name, c.LABEL_COMPONENT: COMPONENT}


def owner_reference(server: ModelServer) -> dict[str, Any]:
    return controller_reference(c.SERVER_KIND, server.name, object_uid(server))


def _metadata(server: ModelServer) -> dict[str, Any]:
    return {
        "name": server_child_name(server.name),
        "namespace": server.namespace,
        "labels": server_labels(server),
        "annotations": dict(PROMETHEUS),
        "ownerReferences": [owner_reference(server)],
    }


def model_claim(server: ModelServer) -> tuple[str, str] | None:
    """(claim, path inside it) of a pvc:// model, if the model is on a claim."""
    name = server.spec.model.name
    if not name.startswith("pvc://"):
        return None
    claim, _, rest = name.removeprefix("pvc://").partition("/")
    return claim, rest.strip("/")


def adapter_root(server: ModelServer, volume: AdapterVolume) -> str:
    """Where the namespace's job directories of an adapter claim are, in the trainer's pods and in the server's."""
    return f"{volume.mount_path.rstrip('/')}/{volume.sub_path.strip('/')}/{server.namespace}"


def model_path(server: ModelServer) -> str:
    """The model as the replicas see it: pvc://claim/rest under /mnt/pvc/claim/rest, hf:// without its scheme."""
    found = model_claim(server)
    if found is None:
        return server.spec.model.name.removeprefix("hf://")
    claim, rest = found
    return f"{c.DATA_MOUNT_ROOT}/{claim}/{rest}" if rest else f"{c.DATA_MOUNT_ROOT}/{claim}"


def gpus(server: ModelServer) -> int:
    spec = server.spec
    return spec.tensor_parallel_size if spec.gpus is None else spec.gpus


def vllm_args(server: ModelServer) -> list[str]:
    spec = server.spec
    args = [
        "--model",
        model_path(server),
        "--served-model-name",
        served_base_name(spec.model.name),
        "--enable-lora",
        "--max-lora-rank",
        str(spec.max_lora_rank),
        "--max-loras",
        str(spec.max_loras),
        "--max-cpu-loras",
        str(spec.max_adapters),
        "--tensor-parallel-size",
        str(spec.tensor_parallel_size),
        "--limit-mm-per-prompt",
        json.dumps({"image": spec.max_images_per_prompt}, separators=(",", ":")),
        "--max-model-len",
        str(spec.max_model_len),
    ]
    if spec.max_image_pixels is not None:
        args += ["--mm-processor-kwargs", json.dumps(pixel_cap_kwargs(spec.max_image_pixels), separators=(",", ":"))]
    if gpus(server):
        args += ["--gpu-memory-utilization", str(spec.gpu_memory_utilization)]
    if spec.model.revision and "://" not in spec.model.name:
        args += ["--revision", spec.model.revision]
    if spec.model.name.startswith("s3://"):
        args += ["--load-format", "runai_streamer"]
    # Last, so that extraArgs cannot move vLLM off loopback: the gateway is the only way in.
    return [*args, *spec.extra_args, "--host", "127.0.0.1", "--port", str(VLLM_PORT)]


def _resources(server: ModelServer) -> dict[str, Any]:
    res = server.spec.resources
    requests, limits = dict(res.requests), dict(res.limits)
    if gpus(server):
        requests[c.GPU_RESOURCE] = limits[c.GPU_RESOURCE] = str(gpus(server))
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def _volumes(server: ModelServer) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, the gateway's adapter mounts, vLLM's mounts). Each adapter claim read-only, and of it only the
    namespace's directory (`<subPath>/<namespace>`), in the gateway only: a link in an adapter directory cannot reach
    another team's files, which are not in the container, and vLLM reads only the gateway's checked copies. A pvc://
    model's directory read-only in vLLM, and nothing else of its claim. /dev/shm in memory."""
    volumes: list[dict[str, Any]] = []
    adapter_mounts: list[dict[str, Any]] = []
    for i, v in enumerate(server.spec.adapter_volumes):
        volumes.append(
            {"name": f"adapters-{i}", "persistentVolumeClaim": {"claimName": v.claim_name, "readOnly": True}}
        )
        sub = f"{v.sub_path.strip('/')}/{server.namespace}"
        adapter_mounts.append(
            {"name": f"adapters-{i}", "mountPath": adapter_root(server, v), "subPath": sub, "readOnly": True}
        )
    mounts: list[dict[str, Any]] = []
    found = model_claim(server)
    if found is not None:
        claim, rest = found
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mount = {"name": "model", "mountPath": model_path(server), "readOnly": True}
        mounts.append({**mount, "subPath": rest} if rest else mount)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    mounts += [{"name": "dshm", "mountPath": c.SHM_MOUNT}, store_mount()]
    return [*volumes, *gateway_volumes(server)], adapter_mounts, mounts


def _env(server: ModelServer) -> list[dict[str, Any]]:
    """Runtime LoRA loading on and usage reports off; then the server's own variables, which cannot turn either
    back."""
    fixed = [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}, {"name": RUNTIME_LORA_ENV, "value": "True"}]
    taken = {e["name"] for e in fixed}
    return fixed + [e.wire() for e in server.spec.env if e.name not in taken]


def _pod_spec(server: ModelServer, gateway_image: str) -> dict[str, Any]:
    spec = server.spec
    volumes, adapter_mounts, mounts = _volumes(server)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.image,
        "command": SERVER_COMMAND,
        "args": vllm_args(server),
        "env": _env(server),
        "resources": _resources(server),
        "volumeMounts": mounts,
        # Loading a large model can take many minutes: startup allows 30, then readiness and liveness take over.
        # /health: open even when the server's env sets VLLM_API_KEY (clients' key; vLLM guards /v1 with it).
        "startupProbe": loopback_probe("/health", 10, 180),
        "readinessProbe": loopback_probe("/health", 10, 3),
        "livenessProbe": loopback_probe("/health", 15, 4),
        "securityContext": vllm_security(),
    }
    if spec.env_from:
        container["envFrom"] = [e.wire() for e in spec.env_from]
    gateway = gateway_container(server, gateway_image, [m["mountPath"] for m in adapter_mounts], adapter_mounts)
    client_key = [e.wire() for e in spec.env if e.name == VLLM_API_KEY_ENV]
    if client_key:  # the gateway asks vLLM with the clients' key too (vLLM has one key for every /v1 path)
        gateway["env"] = client_key
    pod: dict[str, Any] = {
        # The server never calls the Kubernetes API: no token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": root_image_pod(),
        "containers": [container, gateway],
        "volumes": volumes,
        # Ready (in the Service) only once the operator has loaded every adapter the server serves into it: a new or
        # restarted replica answers no request for an adapter it does not hold yet.
        "readinessGates": [{"conditionType": ADAPTERS_LOADED}],
    }
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    tolerations = [t.wire() for t in spec.tolerations]
    if gpus(server):
        tolerations.append({"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod["tolerations"] = tolerations
    if spec.hyperpod:
        pod["affinity"] = hyperpod_affinity()
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    return pod


def build_server_deployment(server: ModelServer, gateway_image: str = DEFAULT_OPERATOR_IMAGE) -> dict[str, Any]:
    """`gateway_image`: the operator's own image, which the gateway container runs."""
    labels = selector(server)
    pod = _pod_spec(server, gateway_image)
    return vllm_deployment(_metadata(server), server.spec.replicas, labels, dict(PROMETHEUS), pod)


def build_server_service(server: ModelServer) -> dict[str, Any]:
    return vllm_service(_metadata(server), selector(server))


def server_url(server: ModelServer) -> str:
    return f"http://{server_child_name(server.name)}.{server.namespace}.svc:{PORT}/v1"
