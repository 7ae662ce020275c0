"""The parts of a ModelServer replica that make it a trust boundary: the gateway container (the operator's own image,
which no job and no server chooses) on the server's port in front of a vLLM that listens on loopback only; the store
of staged adapter copies (an emptyDir only the gateway writes; vLLM mounts it read-only and sees no adapter claim);
and the Secret `<server>-vllm-admin` with the server's admin key, mounted into the gateway alone.

vLLM's probes run inside its container (exec, on loopback): nothing outside the pod reaches it, the kubelet
included. The gateway's readiness answers True only while vLLM holds every adapter the gateway loaded, so a vLLM
restarted in place rejoins the Service once it has them back (`mmrl_operator.gateway.admin`).
"""

from __future__ import annotations

import base64
from typing import Any

from mmrl_api import constants as c
from mmrl_api.gateway_contract import ADMIN_KEY_DIR, ADMIN_KEY_ITEM, LIVE, PORT, READY, STORE, VLLM_PORT
from mmrl_api.model_server import ModelServer
from mmrl_operator.core.names import admin_secret_name

GATEWAY = "gateway"
STORE_VOLUME = "staged-adapters"
ADMIN_KEY_VOLUME = "admin-key"
SECRET_COMPONENT = "admin-key"
GATEWAY_COMMAND = ["python", "-m", "mmrl_operator.gateway"]
# The operator image's user (docker/operator.Dockerfile) and the chart's restricted container settings.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# vLLM's probes from inside its container: python3 is in every vLLM image (it is how the server starts).
_PROBE = f"import sys, urllib.request as u; u.urlopen('http://127.0.0.1:{VLLM_PORT}' + sys.argv[1], timeout=4)"


def loopback_probe(path: str, period: int, failures: int) -> dict[str, Any]:
    """A probe of vLLM on loopback, run in its container."""
    return {
        "exec": {"command": ["python3", "-c", _PROBE, path]},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def gateway_container(
    server: ModelServer, image: str, adapter_roots: list[str], adapter_mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The gateway: the adapter claims read-only (it copies from them), the store read-write, the admin key."""
    args = ["--port", str(PORT), "--upstream", f"http://127.0.0.1:{VLLM_PORT}", "--store", STORE]
    args += ["--admin-key-file", f"{ADMIN_KEY_DIR}/{ADMIN_KEY_ITEM}", "--max-lora-rank", str(server.spec.max_lora_rank)]
    for root in adapter_roots:
        args += ["--adapter-root", root]
    http = {"httpGet": {"path": READY, "port": "http"}, "timeoutSeconds": 5}
    return {
        "name": GATEWAY,
        "image": image,
        "command": GATEWAY_COMMAND,
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [
            *adapter_mounts,
            {"name": STORE_VOLUME, "mountPath": STORE},
            {"name": ADMIN_KEY_VOLUME, "mountPath": ADMIN_KEY_DIR, "readOnly": True},
        ],
        # Out of the Service while vLLM lacks an adapter the gateway loaded (it loads it again meanwhile).
        "readinessProbe": {**http, "periodSeconds": 5, "failureThreshold": 1},
        "livenessProbe": {
            **http,
            "httpGet": {"path": LIVE, "port": "http"},
            "periodSeconds": 15,
            "failureThreshold": 4,
        },
        "securityContext": dict(RESTRICTED),
    }


def store_mount() -> dict[str, Any]:
    """The store as vLLM sees it: read-only."""
    return {"name": STORE_VOLUME, "mountPath": STORE, "readOnly": True}


def gateway_volumes(server: ModelServer) -> list[dict[str, Any]]:
    return [
        {"name": STORE_VOLUME, "emptyDir": {}},
        {
            "name": ADMIN_KEY_VOLUME,
            # Mounted whole (no subPath), so the kubelet brings a rotated key into the running gateway.
            "secret": {
                "secretName": admin_secret_name(server.name),
                "items": [{"key": ADMIN_KEY_ITEM, "path": ADMIN_KEY_ITEM}],
                "defaultMode": 0o444,
            },
        },
    ]


def build_admin_secret(server: ModelServer, key: str, owner: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The Secret with the server's admin key (made once, by the operator, with a random key)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": admin_secret_name(server.name),
            "namespace": server.namespace,
            "labels": {**labels, c.LABEL_COMPONENT: SECRET_COMPONENT},
            "ownerReferences": [owner],
        },
        "data": {ADMIN_KEY_ITEM: base64.b64encode(key.encode()).decode()},
    }


def admin_key_of(secret: dict[str, Any]) -> str:
    """The key a Secret holds ('' when it holds none)."""
    raw = (secret.get("data") or {}).get(ADMIN_KEY_ITEM) or ""
    try:
        return base64.b64decode(raw).decode().strip()
    except ValueError:
        return ""
