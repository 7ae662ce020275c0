"""An MLflow tracking server as a Deployment and Service in the demo's namespace, run for real by the local kubelet.

The trainer reaches it the way it would on a cluster: `http://mlflow.<namespace>.svc:5000` from its pod's own
network namespace (the kubelet's /etc/hosts stands in for cluster DNS). The image is MLflow's own; locally it is
the MLflow venv `make mlflow-venv` builds (MMRL_MLFLOW_PYTHON), as the trainer image is this checkout's venv.

Where it runs: on a node kept for tracking (`create_node`), which carries the taint `TAINT` that only this server
tolerates, so no Ray pod and no inference pod can be scheduled there. The demo's fault replaces the Ray head's node,
which therefore is never this one, whatever the scheduler decides (a spare node chosen before the job was applied
was not enough: the scheduler put the Ray head there too, and the replacement took the server with it).
Its runs: a sqlite store and artifacts on a claim of their own (`STORE_CLAIM`, a hostPath volume on this machine),
so a restarted or rescheduled pod comes back with every run. It allows the Host headers the Service's names and
pod IPs carry (MLflow 3 refuses other ones).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from mmrl_local.cluster import nodes
from mmrl_local.network.etchosts import service_names

IMAGE = "ghcr.io/mlflow/mlflow:v3.17.0"
NAME, PORT = "mlflow", 5000
SELECTOR = f"app.kubernetes.io/name={NAME}"
ROLE_LABEL, ROLE = nodes.DEDICATED_LABEL, "tracking"
TAINT = nodes.dedicated_taint(ROLE)
# What every MLflow server mmrl starts runs with: no telemetry, and no job runner. MLflow 3's server starts a job
# runner and four huey consumer pools beside itself for server-side jobs (prompt optimisation, scorers) that a
# tracking server never runs: about 25 CPU-seconds per server start, a tenth of the test suite's MLflow cost.
SERVER_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
HOSTNAME_LABEL = "kubernetes.io/hostname"
STORE_CLAIM, STORE_PATH = "mlflow-store", "/mlflow"


def tracking_uri(namespace: str) -> str:
    return f"http://{NAME}.{namespace}.svc:{PORT}"


def create_node(core: client.CoreV1Api, *, kubelet: bool = True) -> str:
    """Join the node kept for tracking (a CPU instance, `ROLE_LABEL`, tainted with `TAINT`); returns its name."""
    return nodes.create_dedicated_node(core, ROLE, kubelet=kubelet)


def manifests(namespace: str, node: str | None = None) -> list[dict[str, Any]]:
    """The Deployment and Service. The pod goes to the node kept for tracking; `node` pins it to that one node by
    name instead (tests that force it next to the Ray head do)."""
    labels = {"app.kubernetes.io/name": NAME}
    hosts = [f"{name}:*" for name in service_names(NAME, namespace)] + ["10.*", "localhost:*", "127.0.0.1:*"]
    server = [
        *("mlflow", "server", "--host", "0.0.0.0", "--port", str(PORT), "--workers", "1"),
        *("--backend-store-uri", f"sqlite:///{STORE_PATH}/mlflow.db"),
        *("--artifacts-destination", f"{STORE_PATH}/artifacts"),
        *("--allowed-hosts", ",".join(hosts)),
    ]
    pod = {
        "nodeSelector": {HOSTNAME_LABEL: node} if node else {ROLE_LABEL: ROLE},
        "tolerations": [{**TAINT, "operator": "Equal"}],
        "containers": [
            {
                "name": NAME,
                "image": IMAGE,
                "command": server,
                "env": [{"name": k, "value": v} for k, v in SERVER_ENV.items()],
                "ports": [{"name": "http", "containerPort": PORT}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 2},
                "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
                "volumeMounts": [{"name": "store", "mountPath": STORE_PATH}],
            }
        ],
        "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": STORE_CLAIM}}],
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                # One server at a time on the sqlite store: the old pod goes before a new one starts.
                "strategy": {"type": "Recreate"},
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
