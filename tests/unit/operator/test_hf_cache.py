"""Every Ray pod of a job whose checkpoints are on a claim shares one Hugging Face cache per namespace on that claim,
so a hub model is downloaded once, not by every worker on every attempt; a job's own HF_HOME wins; S3 checkpoints
(no shared filesystem) get none."""

from __future__ import annotations

from mmrl_operator.core.builders.raycluster import build_raycluster
from tests.support.factories import job


def env_of(rc: dict) -> list[dict[str, str]]:
    templates = [rc["spec"]["headGroupSpec"]["template"], *(g["template"] for g in rc["spec"]["workerGroupSpecs"])]
    return [{e["name"]: e.get("value", "") for e in t["spec"]["containers"][0]["env"]} for t in templates]


def test_ray_pods_share_the_namespaces_hf_cache_on_the_checkpoint_claim() -> None:
    j = job()
    pvc = j.spec.checkpoint.pvc
    assert pvc is not None
    expected = f"{pvc.mount_path.rstrip('/')}/{pvc.sub_path.strip('/')}/team/.cache/huggingface"
    assert {env["HF_HOME"] for env in env_of(build_raycluster(j))} == {expected}


def test_a_jobs_own_hf_home_wins() -> None:
    j = job({"spec": {"trainer": {"env": [{"name": "HF_HOME", "value": "/fsx/shared-hf"}]}}})
    for env in env_of(build_raycluster(j)):
        assert env["HF_HOME"] == "/fsx/shared-hf"
    containers = build_raycluster(j)["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert [e["name"] for e in containers[0]["env"]].count("HF_HOME") == 1


def test_s3_checkpoints_get_no_shared_cache() -> None:
    j = job({"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://bucket/ckpt"}}}})
    assert all("HF_HOME" not in env for env in env_of(build_raycluster(j)))
