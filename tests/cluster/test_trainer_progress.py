"""The trainer's progress reaches a real MultimodalRLJob's status as the namespace's trainer identity, from a token
bound to one of the job's Ray pods, and only that job's: the trainer status policy refuses a patch of a sibling job,
and the refusal does not fail training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_local.cluster.crd_install import install_mmrl_crd
from mmrl_operator.core.builders.identity import build_trainer_identity
from mmrl_operator.core.names import TRAINER_IDENTITY, ray_head_pod_prefix
from mmrl_trainer.checkpoint import Checkpoint
from mmrl_trainer.progress import ProgressReporter, kube_patcher
from tests.support.jobspecs import cluster_job

pytestmark = pytest.mark.cluster
JOBS = (c.GROUP, c.VERSION)


@pytest.fixture
def jobs(api_client: client.ApiClient, custom: client.CustomObjectsApi, namespace: str):
    install_mmrl_crd(api_client)

    def create(name: str) -> MultimodalRLJob:
        body = cluster_job(name)
        body["metadata"]["namespace"] = namespace
        created = custom.create_namespaced_custom_object(*JOBS, namespace, c.PLURAL, body)
        return MultimodalRLJob.model_validate(created)

    return create


def trainer_kubeconfig(api_client: client.ApiClient, core: client.CoreV1Api, job: MultimodalRLJob, path: Path):
    """What the trainer in the job's Ray head sees: the namespace's trainer identity (as the operator builds it), with
    a token bound to a pod named as KubeRay names the head (never scheduled: a token needs the pod, not a node)."""
    dyn = DynamicClient(api_client)
    for obj in build_trainer_identity(job.namespace, {}):
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        res.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=job.namespace, field_manager="test")
    spec = {
        "serviceAccountName": TRAINER_IDENTITY,
        "schedulerName": "none",
        "containers": [{"name": "c", "image": "x"}],
    }
    head = core.create_namespaced_pod(
        job.namespace, {"metadata": {"name": f"{ray_head_pod_prefix(job.name)}b2c4d"}, "spec": spec}
    )
    bound = {"apiVersion": "v1", "kind": "Pod", "name": head.metadata.name, "uid": head.metadata.uid}
    token = core.create_namespaced_service_account_token(
        TRAINER_IDENTITY, job.namespace, {"spec": {"expirationSeconds": 600, "boundObjectRef": bound}}
    ).status.token
    cfg = api_client.configuration
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "local", "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert}}
                ],
                "users": [{"name": "trainer", "user": {"token": token}}],
                "contexts": [{"name": "trainer", "context": {"cluster": "local", "user": "trainer"}}],
                "current-context": "trainer",
            }
        )
    )
    return path


def progress_of(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    obj = custom.get_namespaced_custom_object(*JOBS, namespace, c.PLURAL, name)
    return (obj.get("status") or {}).get("progress") or {}


def test_progress_reaches_the_job_status_and_no_other_job(
    jobs, api_client, core, custom, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, sibling = jobs("progress"), jobs("sibling")
    monkeypatch.setenv("KUBECONFIG", str(trainer_kubeconfig(api_client, core, job, tmp_path / "kubeconfig")))

    reporter = ProgressReporter(tmp_path / "metrics.jsonl", kube_patcher(namespace, job.name), min_interval=0)
    ckpt = Checkpoint(5, Path("/ckpt/default/progress/global_step_5"), "2026-01-01T00:00:00Z")
    assert reporter.report(5, 40, {"reward": 0.625}, checkpoint=ckpt) is True
    got = progress_of(custom, namespace, job.name)
    assert (got["step"], got["totalSteps"], got["rewardMean"]) == (5, 40, 0.625)
    assert got["lastCheckpoint"] == {"step": 5, "path": str(ckpt.path), "time": "2026-01-01T00:00:00Z"}
    assert got["heartbeat"].endswith("Z")

    # The same credentials cannot touch a sibling job; the reporter swallows the 403 and training would go on.
    intruder = ProgressReporter(None, kube_patcher(namespace, sibling.name), min_interval=0)
    assert intruder.report(1, 1, {"reward": 1.0}) is False
    assert intruder.patch_failures == 1
    assert progress_of(custom, namespace, sibling.name) == {}


def test_the_trainer_may_write_its_progress_but_no_field_of_the_operator(
    jobs, api_client, core, custom, namespace: str, tmp_path: Path, mmrl_crd: None
) -> None:
    job = jobs("owned")
    custom.patch_namespaced_custom_object_status(*JOBS, namespace, c.PLURAL, job.name, {"status": {"phase": "Running"}})
    trainer = client.CustomObjectsApi(
        config.new_client_from_config(str(trainer_kubeconfig(api_client, core, job, tmp_path / "kubeconfig")))
    )
    patch = trainer.patch_namespaced_custom_object_status
    patch(*JOBS, namespace, c.PLURAL, job.name, {"status": {"progress": {"step": 3, "attempt": 1}}})
    assert progress_of(custom, namespace, job.name)["step"] == 3
    for forged in ({"phase": "Succeeded"}, {"attempts": []}, {"restarts": {"infra": 0}}):
        with pytest.raises(client.ApiException) as refused:
            patch(*JOBS, namespace, c.PLURAL, job.name, {"status": forged})
        assert refused.value.status in (403, 422)
        (field,) = forged
        assert f"status.{field} belongs to the operator" in refused.value.body
    assert custom.get_namespaced_custom_object(*JOBS, namespace, c.PLURAL, job.name)["status"]["phase"] == "Running"


def test_local_training_run_reports_its_final_step_and_checkpoint(
    jobs, api_client, core, custom, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmrl_api.trainer_config import TrainerConfig
    from mmrl_trainer.backends import local
    from mmrl_trainer.tiny import build_tiny_vlm

    job = jobs("tiny")
    monkeypatch.setenv("KUBECONFIG", str(trainer_kubeconfig(api_client, core, job, tmp_path / "kubeconfig")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = TrainerConfig.model_validate(
        {
            "backend": "local",
            "job": {"namespace": namespace, "name": job.name},
            "model": {"name": str(build_tiny_vlm())},
            "lora": {"rank": 8, "alpha": 16},
            "algorithm": {"trainBatchSize": 4, "miniBatchSize": 4, "maxSteps": 4, "maxResponseLength": 6},
            "dataset": {"train": "synthetic://colors?n=64"},
            "checkpoint": {"dir": str(tmp_path / "job"), "interval_steps": 2, "keep": 2},
            "export_dir": str(tmp_path / "job" / "adapter"),
            "progress": {"enabled": True, "min_interval_seconds": 0},
        }
    )
    result = local.run(cfg, evaluate=False)
    got = progress_of(custom, namespace, job.name)
    assert (got["step"], got["totalSteps"]) == (result.final_step, 4)
    assert got["lastCheckpoint"]["step"] == 4
    assert got["lastCheckpoint"]["path"] == str(tmp_path / "job" / "global_step_4")
    assert 0.0 <= got["rewardMean"] <= 1.0
