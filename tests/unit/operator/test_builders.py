"""Builders: the children a job produces, field by field where the field carries a product decision."""

from __future__ import annotations

import json
import shlex

from mmrl_api import constants as c
from mmrl_api.trainer_config import TrainerConfig
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.names import TRAINER_IDENTITY, job_dir
from tests.support.factories import job


def pods(rc: dict) -> list[dict]:
    return [rc["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in rc["spec"]["workerGroupSpecs"]]


def test_every_child_is_owned_and_labelled() -> None:
    j = job()
    children = [build_config_map(j), build_raycluster(j), build_rayjob(j, 1)]
    for obj in children:
        meta = obj["metadata"]
        assert meta["namespace"] == "team" and meta["labels"][c.LABEL_JOB] == "geo"
        (owner,) = meta["ownerReferences"]
        assert owner["kind"] == "MultimodalRLJob" and owner["uid"].startswith("0f1e2d3c") and owner["controller"]


def test_raycluster_places_gpu_workers_on_healthy_hyperpod_nodes() -> None:
    rc = build_raycluster(job())
    head = rc["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    (group,) = rc["spec"]["workerGroupSpecs"]
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == ("p5", 1, 1, 1)
    worker = group["template"]["spec"]
    res = worker["containers"][0]["resources"]
    assert res["limits"][c.GPU_RESOURCE] == "8" and res["requests"][c.EFA_RESOURCE] == "32"
    assert worker["nodeSelector"][c.INSTANCE_TYPE_LABEL] == "ml.p5.48xlarge"
    for template in pods(rc):
        (term,) = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        (expr,) = term["matchExpressions"]
        assert expr["key"] == c.HYPERPOD_HEALTH_LABEL and expr["operator"] == "NotIn"
        assert set(expr["values"]) == {"Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"}


def test_the_head_offers_ray_no_resources_and_the_driver_asks_for_none() -> None:
    # SkyRL's entry task needs a CPU: with none on the head it runs on a worker (tests/trainer/test_ray_placement.py).
    head = build_raycluster(job())["spec"]["headGroupSpec"]["rayStartParams"]
    assert (head["num-cpus"], head["num-gpus"]) == ("0", "0")
    # A driver that requests nothing stays on the head; any entrypoint resource would move it onto a GPU worker.
    assert not [key for key in build_rayjob(job(), 1)["spec"] if key.startswith("entrypoint") and key != "entrypoint"]


def test_kueue_labels_on_cluster_and_every_pod_template() -> None:
    rc = build_raycluster(job())
    want = {c.KUEUE_QUEUE_LABEL: "hyperpod-ns-research-localqueue", c.KUEUE_PRIORITY_LABEL: "training-priority"}
    assert want.items() <= rc["metadata"]["labels"].items()
    for template in pods(rc):
        assert want.items() <= template["metadata"]["labels"].items()


def test_checkpoint_volume_config_and_shm_on_every_pod() -> None:
    for template in pods(build_raycluster(job())):
        spec = template["spec"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        assert "fsx-claim" in claims
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert {"/fsx", "/etc/mmrl", "/dev/shm"} <= mounts
        assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (TRAINER_IDENTITY, True)


def test_no_hyperpod_affinity_when_hyperpod_mode_is_off() -> None:
    rc = build_raycluster(job({"spec": {"cluster": {"hyperpod": False}}}))
    assert all("affinity" not in t["spec"] for t in pods(rc))


def test_pod_template_escape_hatch_is_a_merge_patch() -> None:
    rc = build_raycluster(
        job({"spec": {"cluster": {"podTemplate": {"labels": {"team": "vision"}, "specPatch": {"hostIPC": True}}}}})
    )
    for template in pods(rc):
        assert template["spec"]["hostIPC"] is True and template["metadata"]["labels"]["team"] == "vision"


def test_no_spec_patch_chooses_the_ray_pods_identity_or_takes_their_token() -> None:
    patch = {"serviceAccountName": "admin", "serviceAccount": "admin", "automountServiceAccountToken": False}
    for template in pods(build_raycluster(job({"spec": {"cluster": {"podTemplate": {"specPatch": patch}}}}))):
        spec = template["spec"]
        assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (TRAINER_IDENTITY, True)
        assert "serviceAccount" not in spec


def test_replica_change_changes_the_spec_hash() -> None:
    a = build_raycluster(job())
    b = build_raycluster(job({"spec": {"cluster": {"workerGroups": [{"name": "p5", "replicas": 4}]}}}))
    assert a["metadata"]["annotations"] != b["metadata"]["annotations"]


def test_the_built_rayjob_selects_the_warm_cluster_with_a_backoff_limit_of_0() -> None:
    rj = build_rayjob(job(), 3)
    assert rj["metadata"]["name"] == "geo-a3" and rj["metadata"]["labels"][c.LABEL_ATTEMPT] == "3"
    assert rj["spec"]["clusterSelector"] == {c.RAY_CLUSTER_LABEL: "geo"}
    assert rj["spec"]["backoffLimit"] == 0 and "rayClusterSpec" not in rj["spec"]
    argv = shlex.split(rj["spec"]["entrypoint"])
    assert argv[argv.index("--attempt") + 1] == "3"


def test_trainer_config_maps_pvc_uris_to_mounted_paths() -> None:
    cm = build_config_map(job())
    config = TrainerConfig.model_validate(json.loads(cm["data"]["trainer.json"]))
    assert config.dataset.train == "/fsx/datasets/geometry3k/train.parquet"
    assert config.checkpoint.dir == "/fsx/mmrl/team/geo-0f1e2d3c"
    assert config.export_dir == "/fsx/mmrl/team/geo-0f1e2d3c/adapter"
    assert (config.lora.rank, config.algorithm.samples_per_prompt) == (32, 4)
    assert config.placement.num_nodes == 1 and config.placement.gpus_per_node == 8
    assert config.job.name == "geo" and config.resume == "latest"


def test_s3_checkpoints_mount_no_checkpoint_volume() -> None:
    j = job({"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://bucket/mmrl"}}}})
    config = TrainerConfig.model_validate(json.loads(build_config_map(j)["data"]["trainer.json"]))
    assert config.checkpoint.dir == "s3://bucket/mmrl/team/geo-0f1e2d3c"
    spec = build_raycluster(j)["spec"]["headGroupSpec"]["template"]["spec"]
    # the dataset's pvc:// claim is still mounted, read-only, for the data
    data = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert [v["persistentVolumeClaim"] for v in data] == [{"claimName": "fsx-claim", "readOnly": True}]


def test_the_head_pod_prints_every_attempts_trainer_log_from_the_job_directory() -> None:
    from mmrl_api.contract import ATTEMPT_LOG_CONTAINER

    j = job()
    head = build_raycluster(j)["spec"]["headGroupSpec"]["template"]["spec"]
    ray, log = head["containers"]
    assert ray["name"] == "ray-head" and log["name"] == ATTEMPT_LOG_CONTAINER
    assert log["command"] == ["python", "-m", "mmrl_trainer.attempt_log", "follow", f"{job_dir(j)}/logs"]
    assert job_dir(j).startswith("/fsx/")
    assert {m["mountPath"] for m in log["volumeMounts"]} >= {"/fsx"}
    assert log["image"] == ray["image"] and log["resources"]["limits"] == {"memory": "128Mi"}
    s3 = job({"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://bucket/ckpt"}}}})
    assert len(build_raycluster(s3)["spec"]["headGroupSpec"]["template"]["spec"]["containers"]) == 1
