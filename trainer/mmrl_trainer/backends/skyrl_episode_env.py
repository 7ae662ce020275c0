"""The skyrl-gym environment that plays one episode of the job's multi-turn environment (the maze or a custom one).

Imported only inside SkyRL's Ray workers (it subclasses skyrl_gym's BaseTextEnv). The environment spec arrives as
registration kwargs (backends/skyrl.py registers it as `mmrl_episode` in the entry task), the episode's seed from
the row's `extra_info` (data.py writes it as JSON text). How skyrl 0.3.0 drives it
(skyrl/train/generators/skyrl_vlm_generator.py:SkyRLVLMGymGenerator.agent_loop): `init(prompt)` returns the
conversation the first turn renders, so the episode's own first observation replaces the row's copy of it; after
each reply `step` returns the next observation as one user message whose image travels as an `image_url` part,
and the generator appends it to the conversation and re-renders the whole conversation every turn, so every
earlier turn's image stays in the model's context. The loop runs until `done` (it does not count turns itself:
generator.max_turns only reaches the env as extras["max_turns"]), so the episode's own turn limit ends it, or until
the rendered conversation is longer than generator.max_input_length. A reward arrives at the last token of its
turn; `get_metrics` gives SkyRL `environment/success` and `environment/turns` (skyrl/train/generators/utils.py:
get_rollout_metrics averages them over the step's episodes).
"""

from __future__ import annotations

import json
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from mmrl_api.environment import EnvironmentSpec
from mmrl_trainer.backends.skyrl_env import answer_text
from mmrl_trainer.data import chat_messages, skyrl_image_part
from mmrl_trainer.envs import Observation, make_episode
from mmrl_trainer.synthetic import Example


def episode_seed(extras: dict[str, Any]) -> int:
    """The row's episode seed: `extra_info.seed` (extra_info is JSON text in our parquet, a dict otherwise)."""
    info = extras.get("extra_info") or {}
    info = json.loads(info) if isinstance(info, str) else info
    if not isinstance(info.get("seed"), int):
        raise ValueError("dataset row has no integer extra_info.seed: an environment's rows need a `seed` column")
    return info["seed"]


def observation_messages(observation: Observation) -> list[dict[str, Any]]:
    """An observation as the user message SkyRL's VLM generator appends: the image part, then the text."""
    images = [observation.image] if observation.image is not None else []
    return chat_messages(Example(prompt=observation.text, images=images, answer=""), skyrl_image_part)


class EpisodeEnv(BaseTextEnv):
    def __init__(
        self, env_config: Any = None, extras: dict[str, Any] | None = None, environment: dict | None = None
    ) -> None:
        super().__init__()
        spec = EnvironmentSpec.model_validate(environment or {})
        self.episode = make_episode(spec)()
        self.max_turns = spec.max_turns
        self.seed = episode_seed(extras or {})
        self.info: dict[str, Any] = {}

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return observation_messages(self.episode.reset(self.seed)), {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        result = self.episode.step(answer_text(action))
        self.info = result.info
        return BaseTextEnvStepOutput(
            observations=[] if result.done else observation_messages(result.observation),
            reward=result.reward,
            done=result.done,
            metadata=result.info,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"success": float(bool(self.info.get("success"))), "turns": self.turns}
