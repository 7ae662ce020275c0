"""The trainer image's versions of SkyRL's stack (docker/trainer-pins.txt), parsed: the SkyRL test venv takes the
file as constraints (requirements-skyrl.in, `make lock-skyrl` its vLLM and torch as overrides), and the tests check
the lock and the image's Dockerfile against it."""

from __future__ import annotations

from pathlib import Path

PINS_FILE = Path(__file__).resolve().parents[3] / "docker" / "trainer-pins.txt"


def parse(text: str) -> dict[str, str]:
    """``name==version`` lines; comments and blank lines skipped, names lower-cased."""
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"{PINS_FILE.name}: {raw!r} is not name==version")
        pins[name.strip().lower()] = version.strip()
    return pins


def image_pins() -> dict[str, str]:
    return parse(PINS_FILE.read_text())
