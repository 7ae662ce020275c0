"""A SkyRL-Gym environment written the way SkyRL's own examples write theirs, with no mmrl code in it, for
tests/skyrl/test_skyrl_gym_environment.py (imported only inside the SkyRL venv).

Each turn shows a square drawn in the row's shade (the `shade` column of the dataset, an extra SkyRL hands over) and
asks for its name; the episode is solved when the replies name it `hits` times (a registration kwarg, a string as
every spec param is), and ends unsolved after extras["max_turns"] turns. Every instance records what it was built
with in `BUILT`, so the test can see the extras and kwargs SkyRL passed.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

SHADES = {"red": (200, 30, 30), "green": (30, 160, 60), "blue": (40, 60, 210)}
BUILT: list[dict[str, Any]] = []


def square(shade: str, size: int) -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), SHADES[shade]).save(buffer, format="PNG")
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()},
    }


class ShadeEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, hits: str = "1") -> None:
        super().__init__()
        extras = extras or {}
        self.shade = extras["shade"]
        self.size = 8 + extras["seed"] % 8
        self.max_turns = extras["max_turns"]
        self.needed = int(hits)
        self.hits = 0
        BUILT.append({"extras": {k: v for k, v in extras.items() if k != "reward_spec"}, "hits": self.needed})

    def observation(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [square(self.shade, self.size), {"type": "text", "text": text}]}

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [self.observation("Which colour is this square?")], {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.hits += self.shade in action
        solved = self.hits >= self.needed
        done = solved or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [self.observation("And now?")],
            reward=1.0 if solved else 0.0,
            done=done,
            metadata={},
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"success": self.hits >= self.needed, "turns": self.turns, "hits": self.hits}
