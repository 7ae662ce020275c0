"""The trainer image's versions of SkyRL's stack (docker/trainer-pins.txt), for the local tools that must run the same
ones: the SkyRL test venv takes the file as constraints (requirements-skyrl.in) and the CPU build of SkyRL's vLLM
engine reads its vLLM, torch and torchvision from here (vllm_cpu.py)."""

from __future__ import annotations

from pathlib import Path

PINS_FILE = Path(__file__).resolve().parents[2] / "docker" / "trainer-pins.txt"


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
