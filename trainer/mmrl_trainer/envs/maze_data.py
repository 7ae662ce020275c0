"""The built-in dataset `synthetic://maze?n=N&seed=S`: N maze episodes, one row each, reproducible without a download.

A row is an episode's seed and its first observation (the prompt, with the picture when observations carry
images); the environment rebuilds the same maze from the seed, so the row and the episode always agree. Episode
seeds are `S * SEED_STRIDE + i`, so sets drawn with different S (train seed=0, validation seed=1) share no maze.
The row's answer is one shortest solution, for reading rollouts; the environment scores episodes itself.
"""

from __future__ import annotations

from mmrl_api.environment import EnvironmentSpec
from mmrl_trainer.envs.maze import MazeEpisode
from mmrl_trainer.synthetic import Example

SEED_STRIDE = 1_000_000


def episode_seeds(n: int, seed: int) -> list[int]:
    if n > SEED_STRIDE:
        raise ValueError(f"at most {SEED_STRIDE} mazes per set, not {n}")
    return [seed * SEED_STRIDE + i for i in range(n)]


def maze_examples(n: int, seed: int, environment: EnvironmentSpec | None = None) -> list[Example]:
    """The rows of `synthetic://maze?n=n&seed=seed`, drawn with the job's maze params and observation form."""
    env = environment if environment is not None and environment.name == "maze" else EnvironmentSpec(name="maze")
    episode = MazeEpisode(dict(env.params), env.max_turns, env.observation.images)
    out = []
    for i, episode_seed in enumerate(episode_seeds(n, seed)):
        first = episode.reset(episode_seed)
        assert episode.maze is not None
        out.append(
            Example(
                prompt=first.text,
                images=[first.image] if first.image is not None else [],
                answer=" ".join(episode.maze.solution),
                extra={"index": i, "seed": episode_seed},
            )
        )
    return out
