"""A small grid maze: generated from a seed, solved by breadth-first search, drawn as an RGB image or as text.

The layout is a square of tiles, each a wall or floor, with a start and a goal on floor tiles that a path joins.
Everything is a function of (seed, size, wall fraction), drawn from one `random.Random(seed)`, so the same seed
gives the same maze, the same pictures and the same shortest path on every machine. Tiles are drawn as solid
squares in four colours far apart (dark walls, light floor, blue agent, green goal) so a small vision model can
tell them apart after the image processor resizes the picture.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from PIL import Image

Cell = tuple[int, int]  # (row, column), row 0 at the top
MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
WALL, FLOOR, AGENT, GOAL = (40, 40, 40), (235, 235, 235), (35, 70, 215), (35, 165, 50)
TEXT_TILES = {"wall": "#", "floor": ".", "agent": "A", "goal": "G"}
# Start and goal at least this many moves apart, so no episode is won by any single guess.
MIN_SHORTEST_PATH = 2
ENDS = ("random", "corners")


@dataclass(frozen=True)
class Maze:
    size: int
    walls: frozenset[Cell]
    start: Cell
    goal: Cell
    solution: tuple[str, ...]
    """The moves of one shortest path from start to goal (breadth-first, trying up, down, left, right)."""

    def inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.size and 0 <= cell[1] < self.size

    def open(self, cell: Cell) -> bool:
        return self.inside(cell) and cell not in self.walls

    def distance(self, cell: Cell) -> int:
        """Moves on a shortest path from `cell` (a floor tile joined to the goal, as every tile the agent reaches
        from the start is) to the goal."""
        path = shortest_path(self.size, self.walls, cell, self.goal)
        if path is None:
            raise ValueError(f"no path from {cell} to the goal")
        return len(path)

    def image(self, agent: Cell, cell_pixels: int) -> Image.Image:
        """The maze with the agent at `agent`, each tile `cell_pixels` square."""
        side = self.size * cell_pixels
        img = Image.new("RGB", (side, side), FLOOR)
        for r in range(self.size):
            for c in range(self.size):
                colour = (
                    AGENT
                    if (r, c) == agent
                    else GOAL
                    if (r, c) == self.goal
                    else WALL
                    if (r, c) in self.walls
                    else None
                )
                if colour is not None:
                    img.paste(colour, (c * cell_pixels, r * cell_pixels, (c + 1) * cell_pixels, (r + 1) * cell_pixels))
        return img

    def text(self, agent: Cell) -> str:
        """The maze as rows of characters: A agent, G goal, # wall, . floor."""

        def tile(cell: Cell) -> str:
            kind = (
                "agent" if cell == agent else "goal" if cell == self.goal else "wall" if cell in self.walls else "floor"
            )
            return TEXT_TILES[kind]

        return "\n".join("".join(tile((r, c)) for c in range(self.size)) for r in range(self.size))


def step_cell(cell: Cell, move: str) -> Cell:
    dr, dc = MOVES[move]
    return cell[0] + dr, cell[1] + dc


def shortest_path(size: int, walls: frozenset[Cell], start: Cell, goal: Cell) -> tuple[str, ...] | None:
    """The moves of a shortest path from start to goal, or None when walls separate them."""
    came: dict[Cell, tuple[Cell, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves: list[str] = []
            while came[cell] is not None:
                cell, move = came[cell]  # type: ignore[misc]
                moves.append(move)
            return tuple(reversed(moves))
        for move in MOVES:
            nxt = step_cell(cell, move)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in walls and nxt not in came:
                came[nxt] = (cell, move)
                queue.append(nxt)
    return None


def generate(seed: int, size: int = 5, wall_fraction: float = 0.3, ends: str = "random") -> Maze:
    """The maze of `seed`: walls scattered at `wall_fraction`, start and goal on floor tiles a path joins, at least
    MIN_SHORTEST_PATH moves apart. `ends="random"` draws start and goal among the floor tiles; `ends="corners"` puts
    the start at the top-left tile and the goal at the bottom-right one (the classic maze: walls never cover them).
    Layouts that fail are redrawn from the same generator, so the result is still a function of the seed."""
    if ends not in ENDS:
        raise ValueError(f"ends must be one of {', '.join(ENDS)}, not {ends!r}")
    rng = random.Random(seed)
    cells = [(r, c) for r in range(size) for c in range(size)]
    corners = ((0, 0), (size - 1, size - 1))
    while True:
        walls = frozenset(cell for cell in cells if rng.random() < wall_fraction)
        if ends == "corners":
            walls -= frozenset(corners)
            start, goal = corners
        else:
            floor = [cell for cell in cells if cell not in walls]
            if len(floor) < 2:
                continue
            start, goal = rng.sample(floor, 2)
        solution = shortest_path(size, walls, start, goal)
        if solution is not None and len(solution) >= MIN_SHORTEST_PATH:
            return Maze(size, walls, start, goal, solution)
