"""A job with an environment maps to SkyRL's multi-turn settings, which SkyRL's own config classes and validate_cfg
accept; a single-turn job keeps SkyRL's single-turn shape; the trainer writes and registers the episode env."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mmrl_trainer.backends.skyrl import EPISODE_ENV_ENTRY_POINT, materialise_data, skyrl_gym_registration
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.data import SKYRL_ENV_CLASS, SKYRL_EPISODE_ENV_CLASS, SKYRL_GYM_ENV_CLASS
from mmrl_trainer.envs.maze_data import SEED_STRIDE
from mmrl_trainer.errors import InvalidInput
from tests.support.skyrl import last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import TRAIN, VAL, reference_overrides

MAZE = {"spec": {"dataset": {"reward": None, "environment": {"name": "maze", "params": {"size": "4"}}}}}
MULTI_TURN_KEYS = ("generator.max_turns", "generator.max_input_length", "generator.use_conversation_multi_turn")


def test_our_overrides_map_an_environment_to_skyrls_max_turns_and_episode_context() -> None:
    o, _ = reference_overrides(MAZE)
    assert o["environment.env_class"] == SKYRL_EPISODE_ENV_CLASS
    assert o["generator.max_turns"] == 15  # the walkthrough's maxTurns, the default
    # 15 prompt-sized observations (1024 tokens each, images included) and 14 replies of up to 2048 tokens.
    assert o["generator.max_input_length"] == 15 * 1024 + 14 * 2048
    assert o["generator.use_conversation_multi_turn"] is True and o["generator.vision_language_generator"] is True


def test_our_overrides_keep_a_single_turn_job_in_skyrls_single_turn_shape() -> None:
    o, _ = reference_overrides()
    assert o["environment.env_class"] == SKYRL_ENV_CLASS
    assert [o[k] for k in MULTI_TURN_KEYS] == [1, o["trainer.max_prompt_length"], True]


def test_the_entry_task_registers_the_episode_env_with_the_environment_spec() -> None:
    _, cfg = reference_overrides(MAZE)
    registration = skyrl_gym_registration(cfg)
    assert (registration["id"], registration["entry_point"]) == (SKYRL_EPISODE_ENV_CLASS, EPISODE_ENV_ENTRY_POINT)
    assert registration["kwargs"]["environment"]["maxTurns"] == 15
    single = skyrl_gym_registration(reference_overrides()[1])
    assert single["id"] == SKYRL_ENV_CLASS and single["kwargs"]["reward"]["name"] == "numeric"


def test_the_entry_task_registers_a_skyrl_gym_class_as_it_is_with_params_as_kwargs() -> None:
    # As SkyRL's examples register theirs: skyrl_gym.envs.register(id=..., entry_point="pkg.module:Class", kwargs=...).
    gym = {"name": "skyrl-gym", "class": "examples.train.visgym.env:VisGymEnv", "params": {"difficulty": "easy"}}
    o, cfg = reference_overrides({"spec": {"dataset": {"reward": None, "environment": gym}}})
    assert skyrl_gym_registration(cfg) == {
        "id": SKYRL_GYM_ENV_CLASS,
        "entry_point": "examples.train.visgym.env:VisGymEnv",
        "kwargs": {"difficulty": "easy"},
    }
    assert o["environment.env_class"] == SKYRL_GYM_ENV_CLASS
    assert o["generator.max_turns"] == 15  # SkyRL hands it to the class as extras["max_turns"]


def test_materialised_maze_rows_name_the_episode_env_and_carry_their_seeds(tmp_path: Path) -> None:
    _, cfg = reference_overrides(MAZE)
    cfg = cfg.model_copy(
        update={
            "dataset": cfg.dataset.model_copy(
                update={"train": "synthetic://maze?n=5", "validation": "synthetic://maze?n=2&seed=1"}
            )
        }
    )
    train, val, images, train_rows = materialise_data(cfg, tmp_path)
    assert (images, train_rows) == (1, 5)
    rows = pq.read_table(train[0]).to_pylist()
    assert {r["env_class"] for r in rows} == {SKYRL_EPISODE_ENV_CLASS}
    assert [json.loads(r["extra_info"])["seed"] for r in rows] == list(range(5))
    assert [json.loads(r["extra_info"])["seed"] for r in pq.read_table(val[0]).to_pylist()] == [
        SEED_STRIDE,
        SEED_STRIDE + 1,
    ]


def test_a_bad_environment_fails_in_the_driver_naming_the_field(tmp_path: Path) -> None:
    custom = {"name": "custom", "class": "mmrl_trainer.envs.maze:NoSuchMaze"}
    _, cfg = reference_overrides({"spec": {"dataset": {"reward": None, "environment": custom}}})
    cfg = cfg.model_copy(update={"dataset": cfg.dataset.model_copy(update={"train": "synthetic://maze?n=2"})})
    with pytest.raises(InvalidInput, match=r"spec\.dataset\.environment\.class: .* has no class 'NoSuchMaze'"):
        materialise_data(cfg, tmp_path)
    assert not list(tmp_path.iterdir())


_VALIDATE = r"""
import json, sys, typing
if sys.version_info < (3, 12):
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
from skyrl.train.utils.utils import validate_cfg
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
out = []
for overrides in json.load(sys.stdin):
    c = build_skyrl_config(overrides)
    try:
        validate_cfg(c)
        verdict = "ok"
    except AssertionError as err:
        verdict = str(err)
    g = c.generator
    out.append([verdict, g.max_turns, g.max_input_length, g.use_conversation_multi_turn, c.environment.env_class])
print(json.dumps(out))
"""


def test_skyrl_validates_the_multi_turn_settings() -> None:
    maze, cfg = reference_overrides(MAZE)
    single, _ = reference_overrides()
    # The check that makes max_input_length matter: SkyRL refuses an episode context below the prompt budget.
    short = {**maze, "generator.max_input_length": cfg.algorithm.max_prompt_length - 1}
    got = last_json(run_skyrl(_VALIDATE, stdin=json.dumps([maze, single, short])))
    assert got[0] == ["ok", 15, 15 * 1024 + 14 * 2048, True, SKYRL_EPISODE_ENV_CLASS]
    assert got[1] == ["ok", 1, 1024, True, SKYRL_ENV_CLASS]
    assert got[2][0].startswith("max_input_length should be set greater than or equal to trainer.max_prompt_length")


def test_max_turns_follows_the_spec() -> None:
    patch = {"spec": {"dataset": {"reward": None, "environment": {"name": "maze", "maxTurns": 4}}}}
    _, cfg = reference_overrides(patch)
    o = skyrl_overrides(cfg, train_files=TRAIN, val_files=VAL)
    assert (o["generator.max_turns"], o["generator.max_input_length"]) == (4, 4 * 1024 + 3 * 2048)
