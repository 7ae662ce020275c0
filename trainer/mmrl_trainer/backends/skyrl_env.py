"""The skyrl-gym environment that scores a completion with our verifiable rewards (single turn).

Imported only inside SkyRL's Ray workers (it subclasses skyrl_gym's BaseTextEnv). The reward spec arrives as
registration kwargs, the ground truth from the row's `reward_spec`.

SkyRL hands the environment the engine's token ids decoded with special tokens kept
(skyrl/train/generators/skyrl_vlm_generator.py:SkyRLVLMGymGenerator.agent_loop takes `responses` from
RemoteInferenceClient.generate, which decodes with `tokenizer.batch_decode`), and vLLM's token ids end with the EOS
token, so a finished answer arrives as "red<|im_end|>". The reward scores the text without those trailing chat
tokens, as the local backend's decoding (skip_special_tokens) does.
"""

from __future__ import annotations

import re
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from mmrl_api.spec import RewardSpec
from mmrl_trainer.rewards import resolve

# Qwen-style special tokens (<|im_end|>, <|endoftext|>) at the end of a completion.
TRAILING_SPECIAL_TOKENS = re.compile(r"(?:<\|[^|<>\s]+\|>\s*)+$")


def answer_text(completion: str) -> str:
    """The completion as the model wrote it, without the end-of-turn tokens the decoding kept."""
    return TRAILING_SPECIAL_TOKENS.sub("", completion)


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
            observations=[], reward=self.score(answer_text(action), self.ground_truth), done=True, metadata={}
        )
