"""The skyrl-gym environment that scores a completion with our verifiable rewards (single turn).

Imported only inside SkyRL's Ray workers (it subclasses skyrl_gym's BaseTextEnv). The reward spec arrives as
registration kwargs, the ground truth from the row's `reward_spec`.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from mmrl_api.spec import RewardSpec
from mmrl_trainer.rewards import resolve


class RewardEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, reward: dict | None = None):
        super().__init__()
        extras = extras or {}
        if "reward_spec" not in extras or "ground_truth" not in extras["reward_spec"]:
            raise ValueError("dataset row has no reward_spec.ground_truth")
        self.ground_truth = str(extras["reward_spec"]["ground_truth"])
        self.score = resolve(RewardSpec.model_validate(reward or {}))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        return BaseTextEnvStepOutput(
            observations=[], reward=self.score(action, self.ground_truth), done=True, metadata={}
        )
