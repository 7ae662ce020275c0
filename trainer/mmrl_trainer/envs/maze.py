"""The built-in tiny visual maze (`spec.dataset.environment.name: maze`): one episode of moving to the goal.

Each turn the policy sees the maze (a picture, or text rows when observations carry no image) and replies with
a move. The reply is read leniently: the move inside the last `<answer>...</answer>` if there is one, else the
last of the words up/down/left/right in the reply. A reply without a move, or a move into a wall or off the grid,
spends the turn without moving. Reaching the goal ends the episode with reward 1.0 for a shortest path, less
`penalty` for every move beyond it (never below MIN_SUCCESS_REWARD, so reaching the goal always beats not); an
episode still short of the goal after maxTurns ends with 0. With `reward: goal` (the default) rewards arrive only
on the last turn.

With `reward: shaped`, every turn also pays for progress: PROGRESS_REWARD x (distance before - distance after) /
the start's distance, distances being shortest-path moves to the goal (breadth-first, walls counted), so a move
toward the goal earns, a move away costs, and a blocked or missing move earns 0. The progress of an episode adds
up to PROGRESS_REWARD x (1 - final distance / start distance): PROGRESS_REWARD on reaching the goal, less short of
it, so a success still earns more than any failure. Exact and deterministic like the rest; it gives a failed
episode credit for how close it got, which GRPO needs when most episodes of a group fail.

Params (strings, spec.dataset.environment.params): size (tiles per side, 3..8, default 5), walls (fraction of
tiles that are walls, 0..0.5, default 0.3), cell (pixels per tile, 4..64, default 8), penalty (per extra move,
0..0.2, default 0.05), ends (random: start and goal on random floor tiles, the default; corners: start top-left,
goal bottom-right), reward (goal, the default, or shaped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mmrl_trainer.envs.episode import Observation, StepResult
from mmrl_trainer.envs.grid import ENDS, MOVES, Cell, Maze, generate, step_cell
from mmrl_trainer.errors import InvalidInput

MIN_SUCCESS_REWARD = 0.1
PROGRESS_REWARD = 0.5
REWARDS = ("goal", "shaped")
PARAMS_FIELD = "spec.dataset.environment.params"
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_MOVE = re.compile(r"\b(" + "|".join(MOVES) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class MazeParams:
    size: int = 5
    walls: float = 0.3
    cell: int = 8
    penalty: float = 0.05
    ends: str = "random"
    reward: str = "goal"


_LIMITS: dict[str, tuple[type, float, float]] = {
    "size": (int, 3, 8),
    "walls": (float, 0.0, 0.5),
    "cell": (int, 4, 64),
    "penalty": (float, 0.0, 0.2),
}
_CHOICES: dict[str, tuple[str, ...]] = {"ends": ENDS, "reward": REWARDS}


def parse_params(params: dict[str, str]) -> MazeParams:
    """The maze's params from the spec's strings; an unknown key or a value out of range names the field."""
    values: dict[str, Any] = {}
    for key, raw in params.items():
        if key in _CHOICES:
            if raw not in _CHOICES[key]:
                raise InvalidInput(f"{PARAMS_FIELD}.{key}: {raw!r} is not one of {', '.join(_CHOICES[key])}")
            values[key] = raw
            continue
        if key not in _LIMITS:
            known = ", ".join([*_LIMITS, *_CHOICES])
            raise InvalidInput(f"{PARAMS_FIELD}.{key}: unknown maze param; known: {known}")
        kind, low, high = _LIMITS[key]
        try:
            value = kind(raw)
        except ValueError:
            raise InvalidInput(
                f"{PARAMS_FIELD}.{key}: {raw!r} is not a{'n integer' if kind is int else ' number'}"
            ) from None
        if not low <= value <= high:
            raise InvalidInput(f"{PARAMS_FIELD}.{key}: {raw} is outside {kind(low)}..{kind(high)}")
        values[key] = value
    return MazeParams(**values)


def parse_move(reply: str) -> str | None:
    """The move a reply makes: the last move word inside the last <answer>...</answer>, else in the whole reply."""
    answers = _ANSWER.findall(reply)
    words = _MOVE.findall(answers[-1] if answers else reply)
    return words[-1].lower() if words else None


class MazeEpisode:
    """One episode of the maze; `reset(seed)` starts it, `step(reply)` plays a turn."""

    def __init__(self, params: dict[str, str] | None = None, max_turns: int = 15, images: bool = True) -> None:
        self.params = parse_params(params or {})
        self.max_turns = max_turns
        self.images = images
        self.maze: Maze | None = None
        self.agent: Cell = (0, 0)
        self.turns = 0
        self.done = False

    def reset(self, seed: int) -> Observation:
        self.maze = generate(seed, self.params.size, self.params.walls, self.params.ends)
        self.agent, self.turns, self.done = self.maze.start, 0, False
        n = self.maze.size
        if self.images:
            intro = (
                f"You are the blue square in the {n}x{n} maze in the image. The green square is the goal; dark "
                "squares are walls."
            )
        else:
            intro = f"You are A in this {n}x{n} maze. G is the goal; # are walls, . is floor."
        rules = (
            " Each turn, move one square: reply with up, down, left or right, as <answer>move</answer>. "
            f"Reach the goal in as few moves as you can; you have {self.max_turns}."
        )
        return self._observation(intro + rules)

    def step(self, reply: str) -> StepResult:
        if self.maze is None or self.done:
            raise RuntimeError("step() before reset() or after the episode ended")
        self.turns += 1
        move = parse_move(reply)
        target = step_cell(self.agent, move) if move else None
        moved = target is not None and self.maze.open(target)
        before = self.agent
        if moved:
            self.agent = target  # type: ignore[assignment]
        success = self.agent == self.maze.goal
        self.done = success or self.turns >= self.max_turns
        reward = self._success_reward() if success else 0.0
        if self.params.reward == "shaped" and moved:
            progress = self.maze.distance(before) - self.maze.distance(self.agent)
            reward = round(reward + PROGRESS_REWARD * progress / len(self.maze.solution), 6)
        info = {
            "turns": self.turns,
            "success": success,
            "move": move,
            "moved": moved,
            "shortest": len(self.maze.solution),
        }
        if success:
            text = f"You reached the goal in {self.turns} moves."
        elif move is None:
            text = "No move found in your reply: answer with up, down, left or right."
        else:
            text = f"You moved {move}." if moved else f"You cannot move {move}: a wall or the edge is in the way."
        if not success:
            text += f" {self.max_turns - self.turns} moves left." if not self.done else " No moves left."
        return StepResult(self._observation(text), reward, self.done, info)

    def _success_reward(self) -> float:
        assert self.maze is not None
        extra = self.turns - len(self.maze.solution)
        return max(MIN_SUCCESS_REWARD, round(1.0 - self.params.penalty * extra, 6))

    def _observation(self, text: str) -> Observation:
        assert self.maze is not None
        if self.images:
            return Observation(text, self.maze.image(self.agent, self.params.cell))
        return Observation(f"{text}\n{self.maze.text(self.agent)}")
