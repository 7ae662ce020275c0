"""examples/visgym-maze.yaml is the AWS walkthrough's seed recipe: the RayCluster the operator builds from it and the
SkyRL settings the trainer derives from it carry the walkthrough's numbers (a CPU-only ml.r5d.16xlarge head,
3 ml.g7e.12xlarge workers with 2 GPUs each, FSx at /shared, 6 vLLM engines colocated with FSDP at
gpu_memory_utilization 0.45, 8 samples per prompt, 15 turns, a checkpoint and HF export every 20 steps, evaluation
every 10, resume latest). SkyRL's own config classes and validate_cfg accept it in
tests/skyrl/test_skyrl_validates_every_example.py."""

from __future__ import annotations

from mmrl_api import MultimodalRLJob, validate_manifest
from mmrl_api import constants as c
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_trainer.backends.skyrl import skyrl_gym_registration
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.data import SKYRL_GYM_ENV_CLASS
from tests.support.corpus import example

JOB = MultimodalRLJob.model_validate(example("visgym-maze.yaml"))
TRAIN, VAL = ["/shared/job/data/train.parquet"], ["/shared/job/data/validation.parquet"]


def test_its_raycluster_is_a_cpu_head_and_three_two_gpu_g7e_workers_with_fsx_at_shared() -> None:
    rc = build_raycluster(JOB)
    head = rc["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    head_pod = head["template"]["spec"]
    assert head_pod["nodeSelector"] == {c.INSTANCE_TYPE_LABEL: "ml.r5d.16xlarge"}
    assert c.GPU_RESOURCE not in head_pod["containers"][0]["resources"].get("limits", {})
    (group,) = rc["spec"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (3, 3, 3)
    worker_pod = group["template"]["spec"]
    assert worker_pod["nodeSelector"][c.INSTANCE_TYPE_LABEL] == "ml.g7e.12xlarge"
    limits = worker_pod["containers"][0]["resources"]["limits"]
    assert (limits[c.GPU_RESOURCE], limits[c.EFA_RESOURCE]) == ("2", "1")
    for pod in (head_pod, worker_pod):
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/shared"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "fsx-claim"


def test_our_skyrl_overrides_for_it_are_the_walkthroughs() -> None:
    cfg = build_trainer_config(JOB)
    assert cfg.checkpoint.dir.startswith("/shared/mmrl/")
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL)
    assert o["generator.n_samples_per_prompt"] == 8
    assert o["trainer.placement.colocate_all"] is True
    assert (o["trainer.placement.policy_num_nodes"], o["trainer.placement.policy_num_gpus_per_node"]) == (3, 2)
    assert (o["generator.inference_engine.num_engines"], o["generator.inference_engine.tensor_parallel_size"]) == (6, 1)
    assert o["generator.inference_engine.gpu_memory_utilization"] == 0.45
    assert o["generator.max_turns"] == 15 and o["generator.use_conversation_multi_turn"] is True
    assert o["generator.vision_language_generator"] is True
    assert (o["trainer.ckpt_interval"], o["trainer.hf_save_interval"], o["trainer.eval_interval"]) == (20, -1, 10)
    assert o["trainer.eval_before_train"] is True
    assert o["trainer.resume_mode"] == "latest"
    assert o["trainer.export_path"] == f"{cfg.checkpoint.dir}/exports"


def test_without_validation_data_nothing_is_evaluated_and_an_hf_interval_exports_per_step_only_when_asked() -> None:
    plain = JOB.model_copy(deep=True)
    o = skyrl_overrides(build_trainer_config(plain), train_files=TRAIN, val_files=[])
    assert (o["trainer.eval_interval"], o["trainer.eval_before_train"], o["trainer.hf_save_interval"]) == (
        -1,
        False,
        -1,
    )
    plain.spec.checkpoint.hf_save_interval_steps = 20
    assert (
        skyrl_overrides(build_trainer_config(plain), train_files=TRAIN, val_files=[])["trainer.hf_save_interval"] == 20
    )


def test_the_skyrl_gym_example_registers_skyrls_visgym_class_as_it_is_with_the_walkthroughs_settings() -> None:
    # examples/visgym-skyrl-gym.yaml: the same job with SkyRL's own VisGym environment instead of mmrl's maze.
    job, errors = validate_manifest(example("visgym-skyrl-gym.yaml"))
    assert errors == [] and job is not None
    cfg = build_trainer_config(job)
    assert skyrl_gym_registration(cfg) == {
        "id": SKYRL_GYM_ENV_CLASS,
        "entry_point": "examples.train.visgym.env_instruct:VisGymEnv",
        "kwargs": {},
    }
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL)
    walkthrough = skyrl_overrides(build_trainer_config(JOB), train_files=TRAIN, val_files=VAL)
    assert o["environment.env_class"] == SKYRL_GYM_ENV_CLASS
    # The walkthrough's numbers, as for mmrl's maze.
    same = (
        "generator.n_samples_per_prompt",
        "generator.max_turns",
        "generator.max_input_length",
        "generator.vision_language_generator",
        "generator.use_conversation_multi_turn",
        "generator.inference_engine.num_engines",
        "generator.inference_engine.gpu_memory_utilization",
        "trainer.placement.colocate_all",
        "trainer.ckpt_interval",
        "trainer.eval_interval",
        "trainer.resume_mode",
    )
    assert [o[k] for k in same] == [walkthrough[k] for k in same]
    assert build_raycluster(job)["spec"]["workerGroupSpecs"][0]["replicas"] == 3
