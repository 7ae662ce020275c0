"""SkyRL's own multi-turn VLM generator plays episodes of the built-in maze through our skyrl-gym environment.

As in test_skyrl_generator.py, everything is SkyRL's (PromptDataset over the parquet our trainer writes,
prepare_generator_input, BasePPOExp.get_generator, SkyRLVLMGymGenerator.agent_loop, skyrl_gym's registry) except the
inference engine's HTTP answers: the render endpoint applies the tokenizer's chat template (no image features), and
the generate endpoint plays a fixed script of moves, one per turn, whatever the maze. Each episode's reward is then a
pure function of its seed and the script, which the test replays with the maze itself. What it shows about skyrl
0.3.0: observations with images go back into the conversation, and every render carries every earlier turn's image
(skyrl/train/generators/skyrl_vlm_generator.py:SkyRLVLMGymGenerator.agent_loop re-renders the whole conversation).
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrl_api.environment import EnvironmentSpec
from mmrl_trainer.backends.skyrl import skyrl_gym_registration
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.data import SKYRL_EPISODE_ENV_CLASS, to_skyrl_rows, write_parquet
from mmrl_trainer.envs import make_episode
from mmrl_trainer.envs.maze_data import maze_examples
from mmrl_trainer.tiny import build_tokenizer
from tests.support.skyrl import SCRIPTED_EPISODES, last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import reference_overrides

MOVE_WORDS = ["up", "down", "left", "right"]
MAX_TURNS = 5

_EPISODES = (
    r"""
import json, sys
from transformers import AutoTokenizer
from mmrl_trainer.backends.skyrl_config import build_skyrl_config

parquet, tokenizer_dir, script, registration = sys.argv[1:5]
script, registration = json.loads(script), json.loads(registration)
cfg = build_skyrl_config(json.load(sys.stdin))
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
"""
    + SCRIPTED_EPISODES
    + r"""
print(json.dumps({
    "generator": type(generator).__name__,
    "max_turns": cfg.generator.max_turns,
    "envs": generator_input["env_classes"],
    "seeds": [json.loads(e["extra_info"])["seed"] for e in generator_input["env_extras"]],
    "rewards": rewards,
    "turns": turns,
    "masked_tokens": [len(m) - sum(m) for m in out["loss_masks"]],
    "renders": renders,
    "metrics": {k: v for k, v in out["rollout_metrics"].items() if k.startswith("environment/")},
}))
"""
)


def replay(environment: EnvironmentSpec, seed: int, script: list[str]) -> tuple[float, int]:
    """The reward and turns of one episode played by the script, by the maze itself."""
    episode = make_episode(environment)()
    episode.reset(seed)
    for turn, move in enumerate(script, start=1):
        result = episode.step(move)
        if result.done:
            return result.reward, turn
    raise AssertionError("the script is longer than maxTurns")


def test_skyrl_plays_maze_episodes_with_every_turns_image_in_context(tmp_path: Path) -> None:
    environment = {"name": "maze", "params": {"size": "4"}, "maxTurns": MAX_TURNS}
    patch = {"spec": {"algorithm": {"samplesPerPrompt": 2}, "dataset": {"reward": None, "environment": environment}}}
    _, cfg = reference_overrides(patch)
    spec = cfg.dataset.environment
    examples = maze_examples(6, 0, spec)
    # The script is row 0's shortest path, padded with "up": row 0 succeeds, the others do as the moves fall.
    script = [*examples[0].answer.split(), *["up"] * MAX_TURNS][:MAX_TURNS]
    expected = {e.extra["seed"]: replay(spec, e.extra["seed"], script) for e in examples}
    assert {reward > 0 for reward, _ in expected.values()} == {True, False}  # both outcomes occur
    rows = to_skyrl_rows(examples, data_source="synthetic://maze", env_class=SKYRL_EPISODE_ENV_CLASS)
    parquet = write_parquet(rows, tmp_path / "train.parquet")
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(MOVE_WORDS)  # the tiny model's vocabulary has no moves yet
    tokenizer.save_pretrained(tmp_path / "tok")
    overrides = skyrl_overrides(
        cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(tmp_path / "tok")})}),
        train_files=[str(parquet)],
        val_files=[],
    )
    registration = json.dumps(skyrl_gym_registration(cfg))
    got = last_json(
        run_skyrl(
            _EPISODES,
            str(parquet),
            str(tmp_path / "tok"),
            json.dumps(script),
            registration,
            stdin=json.dumps(overrides),
        )
    )
    assert got["generator"] == "SkyRLVLMGymGenerator" and got["max_turns"] == MAX_TURNS
    assert got["envs"] == [SKYRL_EPISODE_ENV_CLASS] * 12
    assert got["seeds"] == [e.extra["seed"] for e in examples for _ in range(2)]
    assert got["rewards"] == [expected[s][0] for s in got["seeds"]]
    assert got["turns"] == [expected[s][1] for s in got["seeds"]]
    # Observation tokens (image and text of every later turn) are in the response but out of the loss.
    assert all((masked > 0) == (turns > 1) for masked, turns in zip(got["masked_tokens"], got["turns"], strict=True))
    # Every render carried the first observation's image and one more per turn already played.
    assert got["renders"] and all(images == replies + 1 for replies, images in got["renders"])
    assert max(replies for replies, _ in got["renders"]) == MAX_TURNS - 1
    successes = [expected[s][0] > 0 for s in got["seeds"]]
    assert got["metrics"]["environment/success"] == sum(successes) / len(successes)
