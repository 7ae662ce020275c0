"""The episode interface every environment implements, and the factory that builds one from the spec.

A custom environment (`spec.dataset.environment.class`) is any class whose constructor takes
`(params: dict[str, str], max_turns: int, images: bool)` and which has `reset(seed) -> Observation` and
`step(reply) -> StepResult`; nothing needs to subclass anything, so the class has no dependency on mmrl.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from PIL import Image

from mmrl_api.environment import EnvironmentSpec
from mmrl_trainer.imports import import_named


@dataclass(frozen=True)
class Observation:
    """What the policy is shown: text, and an image when the environment's observations carry one."""

    text: str
    image: Image.Image | None = None


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Episode(Protocol):
    def reset(self, seed: int) -> Observation: ...

    def step(self, reply: str) -> StepResult: ...


EpisodeFactory = Callable[[], Episode]
CLASS_FIELD = "spec.dataset.environment.class"


def _builtin(name: str) -> type:
    from mmrl_trainer.envs.maze import MazeEpisode

    return {"maze": MazeEpisode}[name]


def import_class(path: str) -> type:
    """Import the custom environment's `package.module:Class`."""
    return import_named(path, CLASS_FIELD, lambda found: isinstance(found, type), "class")


def make_episode(spec: EnvironmentSpec) -> EpisodeFactory:
    """A factory of fresh episodes of the configured environment (one per rollout, so rollouts share no state).
    Params are checked once here, so a bad param fails the run before any rollout."""
    cls = import_class(spec.class_path) if spec.name == "custom" and spec.class_path else _builtin(spec.name)
    params = dict(spec.params)

    def build() -> Episode:
        return cls(params=params, max_turns=spec.max_turns, images=spec.observation.images)

    build()
    return build
