"""The demo's MLflow server: where its pod may run and where its runs are kept (the scheduler's side of it is
tests/cluster/test_demo_mlflow.py), and what the demo's summary says when it could not read the run."""

from __future__ import annotations

from pathlib import Path

from mmrl_local.addons import mlflow_server as m
from mmrl_local.demo import Summary


def test_the_server_goes_to_the_node_kept_for_it_and_keeps_its_runs_on_a_claim() -> None:
    deployment, service = m.manifests("team")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {m.ROLE_LABEL: m.ROLE}  # a role, not a host that a fault can take away
    assert pod["tolerations"] == [{"key": m.ROLE_LABEL, "operator": "Equal", "value": m.ROLE, "effect": "NoSchedule"}]
    container = pod["containers"][0]
    assert container["volumeMounts"] == [{"name": "store", "mountPath": m.STORE_PATH}]
    assert pod["volumes"] == [{"name": "store", "persistentVolumeClaim": {"claimName": m.STORE_CLAIM}}]
    command = container["command"]
    assert command[command.index("--backend-store-uri") + 1] == f"sqlite:///{m.STORE_PATH}/mlflow.db"
    assert command[command.index("--artifacts-destination") + 1].startswith(f"{m.STORE_PATH}/")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert m.SELECTOR == "app.kubernetes.io/name=mlflow"


def test_pinned_to_a_node_it_selects_that_host_only() -> None:
    pod = m.manifests("team", "hyperpod-i-0abc")[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {m.HOSTNAME_LABEL: "hyperpod-i-0abc"}


def test_the_summary_says_why_it_did_not_read_the_run_or_ask_the_adapter() -> None:
    summary = Summary(
        name="tiny-colors",
        phase="Serving",
        attempts=[],
        resumed_from_step=None,
        steps_sealed_by_attempt_1=[],
        held_out_first=None,
        held_out_last=None,
        adapter_host_dir=Path("/x"),
        adapter_pod_dir="/ckpt/x/adapter",
        plot=None,
        wall_seconds=1.0,
        mlflow={"run_id": "r1", "error": "no MLflow server is serving (pod mlflow-1 Pending on no node)"},
        served={"model": "tiny-colors", "url": "http://svc:8000/v1", "error": "no answer within 300s"},
    )
    text = summary.render()
    assert "  MLflow run r1: not read: no MLflow server is serving (pod mlflow-1 Pending on no node)" in text
    assert "  serving: tiny-colors at http://svc:8000/v1; asking it failed: no answer within 300s" in text
