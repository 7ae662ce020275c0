"""The built-in demo task `synthetic://colors`: "What colour is the image?" over solid and patterned colour images.
(`synthetic://maze`, episodes of the built-in maze environment, is made by envs/maze_data.py.)

Every row is generated from a seed, so train and validation sets are reproducible without any download. Images are
either a noisy solid colour or a checkerboard of the colour and a darker shade of it, so the answer is a property
of the whole image rather than of one pixel. The answer is a single colour word, scored by the strict exact-match
reward (repeating colour words or hedging earns nothing).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from PIL import Image

from mmrl_api.environment import EnvironmentSpec
from mmrl_trainer.errors import InvalidInput

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (35, 165, 50),
    "blue": (35, 70, 215),
    "yellow": (235, 215, 45),
    "purple": (135, 45, 165),
    "orange": (240, 135, 25),
    "black": (20, 20, 20),
    "white": (235, 235, 235),
}
QUESTION = "What colour is the image? Answer with one word."
IMAGE_SIZE = 32


@dataclass
class Example:
    """One prompt in the backend-neutral form every loader produces."""

    prompt: str | list[dict[str, Any]]
    images: list[Image.Image]
    answer: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SyntheticSpec:
    name: str
    n: int = 256
    seed: int = 0


def parse_synthetic_uri(uri: str, *, default_n: int = 256, default_seed: int = 0) -> SyntheticSpec:
    """`synthetic://colors?n=64&seed=1` → SyntheticSpec; unknown task names are rejected with the known ones."""
    parsed = urlparse(uri)
    if parsed.scheme != "synthetic":
        raise InvalidInput(f"{uri!r} is not a synthetic:// URI")
    name = parsed.netloc or parsed.path.lstrip("/")
    if name not in TASKS:
        raise InvalidInput(f"unknown synthetic task {name!r}; known: {', '.join(sorted(TASKS))}")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(query) - {"n", "seed"}
    if unknown:
        raise InvalidInput(f"{uri!r}: unknown parameters {sorted(unknown)}; allowed: n, seed")
    return SyntheticSpec(name, int(query.get("n", default_n)), int(query.get("seed", default_seed)))


def colour_image(colour: str, rng: random.Random, *, size: int = IMAGE_SIZE) -> Image.Image:
    """A noisy solid colour or a two-shade checkerboard of `colour`."""
    r, g, b = COLOURS[colour]
    img = Image.new("RGB", (size, size))
    pixels = img.load()
    patterned = rng.random() < 0.5
    cell = rng.choice((4, 8))
    for y in range(size):
        for x in range(size):
            shade = 0.7 if patterned and ((x // cell) + (y // cell)) % 2 else 1.0
            jitter = rng.randint(-12, 12)
            pixels[x, y] = tuple(max(0, min(255, int(c * shade) + jitter)) for c in (r, g, b))
    return img


def colour_examples(n: int, seed: int) -> list[Example]:
    rng = random.Random(seed)
    names = sorted(COLOURS)
    out = []
    for i in range(n):
        colour = names[rng.randrange(len(names))]
        out.append(Example(prompt=QUESTION, images=[colour_image(colour, rng)], answer=colour, extra={"index": i}))
    return out


def _colours(n: int, seed: int, environment: EnvironmentSpec | None) -> list[Example]:
    return colour_examples(n, seed)


def _mazes(n: int, seed: int, environment: EnvironmentSpec | None) -> list[Example]:
    from mmrl_trainer.envs.maze_data import maze_examples  # it builds Examples, so it imports this module

    return maze_examples(n, seed, environment)


TASKS = {"colors": _colours, "maze": _mazes}


def synthetic_examples(uri: str, *, default_seed: int = 0, environment: EnvironmentSpec | None = None) -> list[Example]:
    """The rows of a synthetic:// set; `environment` (the dataset's) shapes the first observations of mazes."""
    spec = parse_synthetic_uri(uri, default_seed=default_seed)
    return TASKS[spec.name](spec.n, spec.seed, environment)
