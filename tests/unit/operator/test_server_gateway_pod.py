"""A ModelServer replica is a trust boundary by construction: vLLM on loopback behind the gateway (the operator's
image), the only way in; the staged copies written by the gateway alone; the admin key in the gateway alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mmrl_api import constants as c
from mmrl_api.gateway_contract import (
    ADMIN_KEY_DIR,
    DEFAULT_OPERATOR_IMAGE,
    PORT,
    READY,
    STORE,
    VLLM_PORT,
)
from mmrl_api.model_server import ModelServer, parse_server
from mmrl_operator.core.builders import model_server as build
from mmrl_operator.core.builders.gateway import admin_key_of, build_admin_secret

ROOT = Path(__file__).resolve().parents[3]
IMAGE = "registry.example/mmrl-operator:1.2.3"


def server(**spec: Any) -> ModelServer:
    doc = yaml.safe_load((ROOT / "examples" / "model-server.yaml").read_text())
    doc["metadata"]["uid"] = "u-1"
    doc["spec"].update(spec)
    return parse_server(doc)


def pod(s: ModelServer | None = None) -> dict[str, Any]:
    return build.build_server_deployment(s or server(), IMAGE)["spec"]["template"]["spec"]


def test_vllm_listens_on_loopback_whatever_extra_args_say() -> None:
    # Admission refuses --host and --port in extraArgs (mmrl_api.vllm_flags); the order holds even for a spec it
    # never saw (model_copy does not validate).
    s = server()
    extra = ["--host", "0.0.0.0", "--port", "8000", "--max-num-seqs", "8"]
    args = build.vllm_args(s.model_copy(update={"spec": s.spec.model_copy(update={"extra_args": extra})}))
    assert "--max-num-seqs" in args
    # argparse takes the last value: the operator's come after the server's own.
    assert args[-4:] == ["--host", "127.0.0.1", "--port", str(VLLM_PORT)]
    vllm = pod()["containers"][0]
    assert "ports" not in vllm
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = vllm[probe]["exec"]["command"]
        assert command[0] == "python3" and f"127.0.0.1:{VLLM_PORT}" in command[2] and command[3] == "/health"


def test_the_gateway_runs_from_the_operators_image_on_the_servers_port_restricted() -> None:
    gateway = pod()["containers"][1]
    assert (gateway["name"], gateway["image"]) == ("gateway", IMAGE)
    assert gateway["command"] == ["python", "-m", "mmrl_operator.gateway"]
    assert gateway["ports"] == [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
    assert gateway["readinessProbe"]["httpGet"] == {"path": READY, "port": "http"}
    security = gateway["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    args = gateway["args"]
    assert args[args.index("--adapter-root") + 1] == "/fsx/mmrl/hyperpod-ns-research"
    assert args[args.index("--max-lora-rank") + 1] == "32"
    service = build.build_server_service(server())
    assert service["spec"]["ports"][0]["targetPort"] == "http"  # clients reach the gateway
    assert build.build_server_deployment(server())["spec"]["template"]["spec"]["containers"][1]["image"] == (
        DEFAULT_OPERATOR_IMAGE
    )


def test_only_the_gateway_writes_the_store_and_only_it_has_the_admin_key() -> None:
    spec = pod()
    vllm, gateway = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    by_path = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    assert "readOnly" not in by_path[STORE] and "emptyDir" in volumes[by_path[STORE]["name"]]
    assert by_path[ADMIN_KEY_DIR]["readOnly"] is True
    secret = volumes[by_path[ADMIN_KEY_DIR]["name"]]["secret"]
    assert secret["secretName"] == "qwen3vl-8b-vllm-admin"
    vllm_paths = {m["mountPath"]: m for m in vllm["volumeMounts"]}
    assert vllm_paths[STORE]["readOnly"] is True
    assert ADMIN_KEY_DIR not in vllm_paths and "envFrom" not in gateway
    assert spec["automountServiceAccountToken"] is False


def test_the_clients_vllm_key_goes_to_the_gateway_too() -> None:
    ref = {"secretKeyRef": {"name": "clients", "key": "token"}}
    spec = pod(server(env=[{"name": "VLLM_API_KEY", "valueFrom": ref}, {"name": "X", "value": "1"}]))
    vllm, gateway = spec["containers"]
    assert gateway["env"] == [{"name": "VLLM_API_KEY", "valueFrom": ref}]
    assert {"name": "VLLM_API_KEY", "valueFrom": ref} in vllm["env"]
    assert "env" not in pod()["containers"][1]


def test_the_admin_secret_is_the_servers_and_holds_the_key() -> None:
    s = server()
    owner = build.owner_reference(s)
    secret = build_admin_secret(s, "k3y", owner, build.server_labels(s))
    assert secret["metadata"]["name"] == "qwen3vl-8b-vllm-admin"
    assert secret["metadata"]["ownerReferences"] == [owner] and owner["uid"] == "u-1"
    assert secret["metadata"]["labels"][c.LABEL_SERVER] == "qwen3vl-8b"
    assert admin_key_of(secret) == "k3y" and "k3y" not in str(secret)
