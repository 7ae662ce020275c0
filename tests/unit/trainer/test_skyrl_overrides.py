"""TrainerConfig → SkyRL settings for the reference job (examples/job.yaml), checked against SkyRL's keys; spec
strings reach SkyRL's config literally (no YAML, no OmegaConf interpolation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from mmrl_api import MultimodalRLJob
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.backends.skyrl_config import skyrl_config_dict, skyrl_overrides
from tests.support.corpus import example
from tests.support.skyrl import run_skyrl

TRAIN, VAL = ["/fsx/job/data/train.parquet"], ["/fsx/job/data/validation.parquet"]


def reference_overrides(patch: dict | None = None) -> tuple[dict, object]:
    job = MultimodalRLJob.model_validate(merge_patch(example("job.yaml"), patch or {}))
    cfg = build_trainer_config(job)
    return skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL), cfg


def test_our_overrides_map_the_reference_recipe_to_skyrls_grpo_lora_numbers() -> None:
    o, _ = reference_overrides()
    assert o["trainer.algorithm.advantage_estimator"] == "grpo"
    assert o["trainer.policy.model.path"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert (o["trainer.policy.model.lora.rank"], o["trainer.policy.model.lora.alpha"]) == (32, 32)
    assert o["trainer.policy.model.lora.target_modules"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert o["trainer.policy.optimizer_config.lr"] == 3e-5
    assert (o["trainer.algorithm.use_kl_loss"], o["trainer.algorithm.kl_loss_coef"]) == (False, 0.0)
    assert (o["trainer.algorithm.eps_clip_low"], o["trainer.algorithm.eps_clip_high"]) == (0.2, 0.2)
    assert o["generator.n_samples_per_prompt"] == 4
    assert (o["trainer.train_batch_size"], o["trainer.policy_mini_batch_size"]) == (128, 64)
    assert o["trainer.micro_train_batch_size_per_gpu"] == 1
    assert (o["trainer.max_prompt_length"], o["generator.sampling_params.max_generate_length"]) == (1024, 2048)
    assert o["trainer.epochs"] == 20 and "trainer.max_training_steps" not in o


def test_vlm_flags_and_placement_from_the_worker_groups() -> None:
    o, _ = reference_overrides()
    assert o["generator.vision_language_generator"] is True
    assert o["trainer.remove_microbatch_padding"] is False
    assert o["generator.batched"] is False
    assert o["trainer.strategy"] == "fsdp"
    assert o["trainer.placement.colocate_all"] is True
    assert (o["trainer.placement.policy_num_nodes"], o["trainer.placement.policy_num_gpus_per_node"]) == (1, 8)
    assert o["generator.inference_engine.num_engines"] == 8
    assert o["generator.inference_engine.backend"] == "vllm"
    assert o["environment.env_class"] == "mmrl_reward"
    assert o["data.train_data"] == TRAIN


def test_checkpoint_and_resume_follow_the_job_dir() -> None:
    o, cfg = reference_overrides()
    assert o["trainer.ckpt_path"] == cfg.checkpoint.dir
    assert o["trainer.ckpt_path"].startswith("/fsx/")
    assert o["trainer.ckpt_interval"] == 5
    assert o["trainer.max_ckpts_to_keep"] == cfg.checkpoint.keep
    assert o["trainer.resume_mode"] == "latest"
    assert o["trainer.export_path"] == f"{cfg.checkpoint.dir}/exports"


def test_no_resume_and_max_steps_and_kl() -> None:
    _, cfg = reference_overrides()
    cfg = cfg.model_copy(
        update={
            "resume": "none",
            "algorithm": cfg.algorithm.model_copy(update={"max_steps": 7, "kl_coef": 0.01}),
        }
    )
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=[])
    assert o["trainer.resume_mode"] == "none"
    assert o["trainer.max_training_steps"] == 7
    assert (o["trainer.algorithm.use_kl_loss"], o["trainer.algorithm.kl_loss_coef"]) == (True, 0.01)
    assert (o["trainer.eval_interval"], o["trainer.eval_before_train"]) == (-1, False)


def test_our_config_dict_nests_dotted_settings_into_sections_with_their_python_values() -> None:
    nested = skyrl_config_dict({"a.b.c": True, "a.b.d": None, "a.e": 3e-5, "f": ["x,y"]})
    assert nested == {"a": {"b": {"c": True, "d": None}, "e": 3e-5}, "f": ["x,y"]}


# Strings that mean something to OmegaConf (interpolation, resolvers), to YAML (comments, quotes, flow lists and
# maps, null/bool/number words) or to a `key=value` list (commas, brackets).
HOSTILE = [
    "${oc.env:HOME}",
    "\\${oc.env:HOME}",
    "#x",
    "a #x",
    "it's",
    '"quoted"',
    "a,b",
    "[x]",
    "{y: 1}",
    "x: y",
    "null",
    "true",
    "1e3",
]


def hostile_settings(s: str) -> tuple[dict, object]:
    """Settings whose strings carry `s`. Admission refuses these in the spec (S3 keys, module names), so they are set
    on the trainer config directly: the SkyRL boundary must keep them literal on its own, whatever reaches it."""
    _, cfg = reference_overrides({"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://ckpt-bucket/prefix"}}}})
    cfg = cfg.model_copy(
        update={
            "checkpoint": cfg.checkpoint.model_copy(
                update={"dir": cfg.checkpoint.dir.replace("s3://ckpt-bucket/prefix", f"s3://ckpt-bucket/{s}")}
            ),
            "model": cfg.model.model_copy(update={"name": s}),
            "lora": cfg.lora.model_copy(update={"target_modules": [s, "q_proj"]}),
        }
    )
    return skyrl_overrides(cfg, train_files=[f"/data/{s}.parquet"], val_files=[f"/data/{s},v.parquet"]), cfg


@pytest.mark.parametrize("s", HOSTILE)
def test_spec_strings_stay_literal_in_our_nested_skyrl_settings(s: str) -> None:
    o, cfg = hostile_settings(s)
    nested = skyrl_config_dict(o)
    assert cfg.checkpoint.dir.startswith(f"s3://ckpt-bucket/{s}/")
    assert nested["trainer"]["ckpt_path"] == cfg.checkpoint.dir
    assert nested["trainer"]["export_path"] == f"{cfg.checkpoint.dir}/exports"
    assert nested["trainer"]["policy"]["model"]["path"] == nested["trainer"]["ref"]["model"]["path"] == s
    assert nested["trainer"]["policy"]["model"]["lora"]["target_modules"] == [s, "q_proj"]
    assert nested["data"] == {"train_data": [f"/data/{s}.parquet"], "val_data": [f"/data/{s},v.parquet"]}


# In the SkyRL venv (`make skyrl-venv`; tests.support.skyrl), SkyRL's own config class parses our overrides
# (rejecting unknown keys) and its validate_cfg checks them.
_VALIDATE = r"""
import json, sys, typing
if sys.version_info < (3, 12):  # skyrl's pydantic models need typing_extensions.TypedDict before 3.12
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
from skyrl.train.utils.utils import validate_cfg
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
c = build_skyrl_config(json.load(sys.stdin))
validate_cfg(c)  # SkyRL's own cross-field checks (batch divisibility, placement, LoRA/VLM constraints)
print(json.dumps({
    "lora_rank": c.trainer.policy.model.lora.rank,
    "targets": list(c.trainer.policy.model.lora.target_modules),
    "n": c.generator.n_samples_per_prompt,
    "vlm": c.generator.vision_language_generator,
    "resume": c.trainer.resume_mode if isinstance(c.trainer.resume_mode, str) else c.trainer.resume_mode.value,
    "engines": c.generator.inference_engine.num_engines,
    "train": list(c.data.train_data),
    "lr": c.trainer.policy.optimizer_config.lr,
}))
"""


def test_skyrl_own_config_class_accepts_the_overrides() -> None:
    o, _ = reference_overrides()
    run = run_skyrl(_VALIDATE, stdin=json.dumps(o))
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got == {
        "lora_rank": 32,
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "n": 4,
        "vlm": True,
        "resume": "latest",
        "engines": 8,
        "train": TRAIN,
        "lr": 3e-5,
    }


def test_skyrl_rejects_a_misspelt_key_so_the_validation_is_real() -> None:
    o, _ = reference_overrides()
    run = run_skyrl(_VALIDATE, stdin=json.dumps({**o, "trainer.policy.model.lora.rnak": 8}))
    assert run.returncode != 0 and "rnak" in run.stderr


_LITERAL = r"""
import json, sys, typing
if sys.version_info < (3, 12):
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
from skyrl.train.config import SkyRLTrainConfig
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
def seen(c):
    m = c.trainer.policy.model
    return [c.trainer.ckpt_path, m.path, list(m.lora.target_modules), list(c.data.train_data), list(c.data.val_data)]
ours = {s: seen(build_skyrl_config(o)) for s, o in json.load(sys.stdin).items()}
# SkyRL's own string path, which the trainer used before: the value is interpolated from the environment.
cli = SkyRLTrainConfig.from_cli_overrides(["trainer.ckpt_path=s3://b/${oc.env:MMRL_TEST_SECRET}"]).trainer.ckpt_path
print(json.dumps({"ours": ours, "cli": cli}))
"""


def test_skyrl_config_holds_spec_strings_literally_where_its_cli_path_would_read_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = {s: hostile_settings(s) for s in HOSTILE}
    monkeypatch.setenv("MMRL_TEST_SECRET", "not-for-the-config")
    run = run_skyrl(_LITERAL, stdin=json.dumps({s: o for s, (o, _) in settings.items()}))
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    for s, (_, cfg) in settings.items():
        literal = [cfg.checkpoint.dir, s, [s, "q_proj"], [f"/data/{s}.parquet"], [f"/data/{s},v.parquet"]]
        assert got["ours"][s] == literal, s
    assert got["cli"] == "s3://b/not-for-the-config"  # what the structured path guards against


_ENV = r"""
import json, sys, typing
if sys.version_info < (3, 12):
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
import skyrl_gym
from mmrl_trainer.backends.skyrl import ENV_ENTRY_POINT
from mmrl_trainer.data import SKYRL_ENV_CLASS
reward = {"name": "numeric", "params": {"tolerance": "0.01"}}
skyrl_gym.envs.register(id=SKYRL_ENV_CLASS, entry_point=ENV_ENTRY_POINT, kwargs={"reward": reward})
out = []
for answer in (r"\boxed{3.141}", "3.5"):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "3.14"}}
    env = skyrl_gym.make(SKYRL_ENV_CLASS, env_config={}, extras=extras)
    step = env.step(answer)
    out.append([step["reward"], step["done"]])
print(json.dumps(out))
"""


def test_our_rewards_run_as_a_registered_skyrl_gym_environment() -> None:
    run = run_skyrl(_ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [[1.0, True], [0.0, True]]


def test_our_materialised_skyrl_parquet_has_one_row_per_example(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from mmrl_trainer.backends.skyrl import materialise_data

    _, cfg = reference_overrides()
    cfg = cfg.model_copy(
        update={
            "dataset": cfg.dataset.model_copy(
                update={"train": "synthetic://colors?n=6", "validation": "synthetic://colors?n=3&seed=9"}
            )
        }
    )
    train, val, images, train_rows = materialise_data(cfg, tmp_path)
    assert images == 1  # one image a prompt: what the image token budget is sized for
    rows = pq.read_table(train[0]).to_pylist()
    assert len(rows) == train_rows == 6 and len(pq.read_table(val[0]).to_pylist()) == 3
    assert rows[0]["env_class"] == "mmrl_reward"
    assert rows[0]["prompt"][0]["content"][0]["type"] == "image_url"


def test_final_adapter_is_exported_from_the_newest_complete_step_in_skyrls_layout(tmp_path: Path) -> None:
    from mmrl_trainer.backends.skyrl import export_final_adapter

    _, cfg = reference_overrides()
    cfg = cfg.model_copy(
        update={
            "checkpoint": cfg.checkpoint.model_copy(update={"dir": str(tmp_path)}),
            "export_dir": str(tmp_path / "adapter"),
        }
    )
    for step, rank in ((5, 16), (10, 32), (15, 64)):  # step 15 is newer than the marker: half-written
        lora = tmp_path / f"global_step_{step}" / "policy" / "lora_adapter"
        lora.mkdir(parents=True)
        (lora / "adapter_config.json").write_text(
            json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": ["q_proj"]})
        )
        save_file(
            {"q_proj.lora_A.weight": np.zeros((rank, 4), dtype=np.float32)}, str(lora / "adapter_model.safetensors")
        )
    (tmp_path / "latest_ckpt_global_step.txt").write_text("10")
    exported = export_final_adapter(cfg)
    # The step it came from goes into status.adapter.lineage.checkpointStep.
    assert exported == (tmp_path / "adapter", str(tmp_path / "adapter"), 10)
    exported_cfg = json.loads((exported.local / "adapter_config.json").read_text())
    assert exported_cfg["r"] == 32
    assert exported_cfg["base_model_name_or_path"] == cfg.model.name  # what the trainer trained, not a resolved path


_DATASET = r"""
import json, sys, typing
if sys.version_info < (3, 12):
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
import skyrl_gym
from transformers import AutoTokenizer
from skyrl.train.dataset import PromptDataset
from mmrl_trainer.backends.skyrl import ENV_ENTRY_POINT
parquet, tokenizer_dir = sys.argv[1:3]
ds = PromptDataset([parquet], AutoTokenizer.from_pretrained(tokenizer_dir), max_prompt_length=64, num_workers=1)
skyrl_gym.envs.register(id="mmrl_reward", entry_point=ENV_ENTRY_POINT, kwargs={"reward": {"name": "exact_match"}})
out = []
for i in range(len(ds)):
    messages, env_class, extras, _ = ds[i]
    env = skyrl_gym.make(env_class, env_config={}, extras=extras)
    truth = extras["reward_spec"]["ground_truth"]
    parts = [p["type"] for p in messages[0]["content"]]
    out.append([env_class, parts, env.step(truth)["reward"], env.step(truth + " " + truth)["reward"]])
print(json.dumps(out))
"""


def test_skyrl_prompt_dataset_reads_our_rows_and_feeds_our_env(tmp_path: Path) -> None:
    from mmrl_trainer.data import to_skyrl_rows, write_parquet
    from mmrl_trainer.synthetic import colour_examples
    from mmrl_trainer.tiny import build_tokenizer

    parquet = write_parquet(
        to_skyrl_rows(colour_examples(3, 0), data_source="synthetic://colors"), tmp_path / "t.parquet"
    )
    build_tokenizer().save_pretrained(tmp_path / "tok")
    run = run_skyrl(_DATASET, str(parquet), str(tmp_path / "tok"))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert rows == [["mmrl_reward", ["image_url", "text"], 1.0, 0.0]] * 3


def test_the_image_budget_is_sized_for_the_most_images_one_prompt_carries() -> None:
    from mmrl_trainer.backends.skyrl import _most_images
    from mmrl_trainer.data import to_skyrl_rows
    from mmrl_trainer.synthetic import Example, colour_examples

    one = colour_examples(3, 0)
    two = Example(prompt="Same colour?", images=[one[0].images[0], one[1].images[0]], answer="no", extra={})
    assert _most_images(to_skyrl_rows(one, data_source="a")) == 1
    assert _most_images(to_skyrl_rows([*one, two], data_source="a")) == 2
    _, cfg = reference_overrides()
    size = "generator.inference_engine.engine_init_kwargs"
    cap = {n: skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL, images_per_prompt=n)[size] for n in (1, 2)}
    longest = {n: c["mm_processor_kwargs"]["size"]["longest_edge"] for n, c in cap.items()}
    assert longest[2] < longest[1]  # two images a prompt share the same half of maxPromptLength
