"""An MLflow tracking server as a Deployment and Service in the demo's namespace, run for real by the local kubelet.

The trainer reaches it the way it would on a cluster: `http://mlflow.<namespace>.svc:5000` from its pod's own
network namespace (the kubelet's /etc/hosts stands in for cluster DNS). The image is MLflow's own; locally it is
the MLflow venv `make mlflow-venv` builds (MMRL_MLFLOW_PYTHON), as the trainer image is this checkout's venv.
The server pins itself to one node the demo's fault leaves alone, keeps its runs in the pod's /tmp (sqlite) and
allows the Host headers the Service's names and pod IPs carry (MLflow 3 refuses other ones).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mmrl_local.etchosts import service_names

IMAGE = "ghcr.io/mlflow/mlflow:v3.17.0"
NAME, PORT = "mlflow", 5000


def is_mlflow(image: str) -> bool:
    return image.rsplit("/", 1)[-1].split(":", 1)[0] == "mlflow"


def bin_dir() -> Path:
    python = os.environ.get("MMRL_MLFLOW_PYTHON", "")
    if not python or not Path(python).is_file():
        raise RuntimeError(f"no MLflow server venv (MMRL_MLFLOW_PYTHON={python!r}): run `make mlflow-venv`")
    return Path(python).parent


def tracking_uri(namespace: str) -> str:
    return f"http://{NAME}.{namespace}.svc:{PORT}"


def manifests(namespace: str, node: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME}
    hosts = [f"{name}:*" for name in service_names(NAME, namespace)] + ["10.*", "localhost:*", "127.0.0.1:*"]
    server = [
        *("mlflow", "server", "--host", "0.0.0.0", "--port", str(PORT), "--workers", "1"),
        *("--backend-store-uri", "sqlite:////tmp/mlflow.db", "--artifacts-destination", "/tmp/mlartifacts"),
        *("--allowed-hosts", ",".join(hosts)),
    ]
    pod = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [
            {
                "name": NAME,
                "image": IMAGE,
                "command": server,
                "env": [{"name": "MLFLOW_DISABLE_TELEMETRY", "value": "true"}],
                "ports": [{"name": "http", "containerPort": PORT}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 2},
                "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
            }
        ],
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]},
        },
    ]
