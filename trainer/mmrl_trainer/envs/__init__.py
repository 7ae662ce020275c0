"""Multi-turn environments the policy plays episodes in: the episode interface and the built-in tiny maze.

An environment is built once per episode from `spec.dataset.environment` (`make_episode`); `reset(seed)` returns
the first observation and `step(reply)` reads the model's reply as an action and returns the next observation,
the reward, whether the episode is over, and what happened. Both training backends drive this one interface: the
skyrl-gym adapter (backends/skyrl_maze_env.py) and the local backend.
"""

from mmrl_trainer.envs.episode import Episode, Observation, StepResult, make_episode

__all__ = ["Episode", "Observation", "StepResult", "make_episode"]
