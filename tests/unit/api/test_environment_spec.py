"""A dataset's task is a reward (single turn, the default) or a multi-turn environment, and the trainer sees which."""

from __future__ import annotations

import json

from mmrl_api import validate_as_apiserver, validate_manifest
from mmrl_api.environment import DEFAULT_MAX_TURNS
from mmrl_api.trainer_config import TrainerConfig
from mmrl_operator.core.builders.trainer_config import build_config_map
from tests.support.factories import job

MAZE = {"spec": {"dataset": {"reward": None, "environment": {"name": "maze", "params": {"size": "5"}}}}}


def test_a_dataset_without_a_task_is_single_turn_exact_match() -> None:
    dataset = job({"spec": {"dataset": {"reward": None}}}).spec.dataset
    assert dataset.environment is None
    assert dataset.reward is not None and dataset.reward.name == "exact_match"


def test_an_environment_gets_the_walkthrough_turns_and_image_observations_and_no_reward() -> None:
    env = job(MAZE).spec.dataset
    assert env.reward is None and env.environment is not None
    assert (env.environment.name, env.environment.params) == ("maze", {"size": "5"})
    assert env.environment.max_turns == DEFAULT_MAX_TURNS == 15
    assert env.environment.observation.images is True
    # No default reward appears on the wire either, or the stored object would carry both tasks.
    assert "reward" not in env.wire() and env.wire()["environment"]["maxTurns"] == 15


def test_a_custom_environment_is_written_as_class_on_the_wire() -> None:
    spec = job({"spec": {"dataset": {"reward": None, "environment": {"name": "custom", "class": "my.envs:Grid"}}}})
    environment = spec.spec.dataset.environment
    assert environment is not None and environment.class_path == "my.envs:Grid"
    assert spec.spec.dataset.wire()["environment"]["class"] == "my.envs:Grid"


def test_both_tasks_are_refused_naming_the_environment() -> None:
    doc = job().wire()
    doc["spec"]["dataset"]["environment"] = {"name": "maze"}
    _, errors = validate_manifest(doc)
    assert [e.path for e in errors] == ["spec.dataset.environment"]
    assert "at most one of reward or environment" in errors[0].message


def test_the_environment_travels_to_the_trainer_in_its_config() -> None:
    config = TrainerConfig.model_validate(json.loads(build_config_map(job(MAZE))["data"]["trainer.json"]))
    assert config.dataset.reward is None
    assert config.dataset.environment is not None
    assert config.dataset.environment.wire() == {
        "name": "maze",
        "params": {"size": "5"},
        "maxTurns": 15,
        "observation": {"images": True},
    }
    single = TrainerConfig.model_validate(json.loads(build_config_map(job())["data"]["trainer.json"]))
    assert single.dataset.environment is None and single.dataset.reward.name == "numeric"


VISGYM = "examples.train.visgym.env:VisGymEnv"


def skyrl_gym(**environment) -> dict:
    return {"spec": {"dataset": {"reward": None, "environment": {"name": "skyrl-gym", "class": VISGYM, **environment}}}}


def test_a_skyrl_gym_environment_travels_to_the_trainer_with_its_class_and_params() -> None:
    config = TrainerConfig.model_validate(
        json.loads(build_config_map(job(skyrl_gym(params={"difficulty": "easy"})))["data"]["trainer.json"])
    )
    environment = config.dataset.environment
    assert environment is not None and environment.name == "skyrl-gym"
    assert (environment.class_path, environment.params) == (VISGYM, {"difficulty": "easy"})


def test_a_class_is_required_for_custom_and_skyrl_gym_and_refused_for_maze() -> None:
    for name, environment in (
        ("skyrl-gym", {"name": "skyrl-gym"}),
        ("custom", {"name": "custom"}),
        ("maze", {"name": "maze", "class": VISGYM}),
    ):
        doc = job().wire()
        doc["spec"]["dataset"] = {**doc["spec"]["dataset"], "reward": None, "environment": environment}
        _, errors = validate_manifest(doc)
        assert [(e.path, e.message) for e in errors] == [
            ("spec.dataset.environment.class", "class is required when name is custom or skyrl-gym, and only then")
        ], name


def test_the_local_backend_refuses_a_skyrl_gym_environment_naming_trainer_backend() -> None:
    doc = job(skyrl_gym()).wire()
    doc["spec"]["trainer"]["backend"] = "local"
    _, errors = validate_manifest(doc)
    assert [e.path for e in errors] == ["spec.trainer.backend"]
    assert "local cannot run a skyrl-gym environment" in errors[0].message
    doc["spec"]["dataset"]["environment"]["name"] = "custom"
    # The apiserver's rules are met; the 8B model's local job would not fit the GPUs (the plan, checked after).
    assert validate_as_apiserver(doc)[1] == []
