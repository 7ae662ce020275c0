"""docs/compatibility.md against the pins: each row's tested version is read back from every file its "Pinned in"
column names, so moving a pin without the table (or the table without the pin) fails here."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from mmrl_api import constants
from mmrl_api.constants import DEFAULT_VLLM_IMAGE
from mmrl_api.lifecycle import InferenceSpec
from mmrl_local.toolchain import vllm_cpu

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "compatibility.md"


def text(path: str) -> str:
    return (ROOT / path).read_text()


def found(pattern: str, path: str) -> str:
    """The first group of `pattern` in the file (multiline); fails naming the file when it is not there."""
    match = re.search(pattern, text(path), re.MULTILINE)
    assert match, f"{path}: no match for {pattern!r}"
    return match.group(1)


def go_module(path: str, module: str) -> str:
    return found(rf"^\s*(?:require\s+)?{re.escape(module)} v(\S+)", path)


def pin(path: str, package: str) -> str:
    return found(rf"^{re.escape(package)}==(\S+)$", path)


TRAINER_BASE = found(r"^FROM (novaskyai/\S+) AS gpu$", "docker/trainer.Dockerfile")


def image_tag(image: str) -> str:
    return image.rsplit(":", 1)[1].removeprefix("v")


# Component -> every place its tested version is pinned, each read from the file the table names.
PINS: dict[str, list[Callable[[], str]]] = {
    "Kubernetes": [lambda: go_module("local/go/kube/go.mod", "k8s.io/kubernetes")],
    "KubeRay": [lambda: go_module("local/go/kuberay/go.mod", "github.com/ray-project/kuberay/ray-operator")],
    "Kueue": [lambda: go_module("local/go/kueue/go.mod", "sigs.k8s.io/kueue")],
    "Ray": [
        lambda: pin("docker/trainer-pins.txt", "ray"),
        lambda: constants.TRAINER_RAY_VERSION,
        lambda: found(r"-ray-([0-9.]+)-py", "docker/trainer.Dockerfile"),
    ],
    "Ray (CPU trainer image)": [lambda: pin("requirements.lock", "ray")],
    "SkyRL": [
        lambda: pin("requirements-skyrl.lock", "skyrl"),
        lambda: found(r"skyrl-v([0-9.]+), the release published on PyPI", "docker/trainer.Dockerfile"),
    ],
    "vLLM (rollout)": [lambda: pin("docker/trainer-pins.txt", "vllm")],
    "vLLM (serving)": [lambda: image_tag(InferenceSpec().image), lambda: image_tag(DEFAULT_VLLM_IMAGE)],
    "PyTorch": [lambda: pin("docker/trainer-pins.txt", "torch")],
    "CUDA": [lambda: TRAINER_BASE.split(":")[0].rsplit("-cu", 1)[1]],
    "Python": [lambda: found(r'^requires-python = ">=([0-9.]+)"$', "pyproject.toml")],
}


def rows() -> dict[str, dict[str, str]]:
    """The table's rows by component: column name -> cell."""
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        out[cells[0]] = dict(zip(header, cells, strict=True))
    return out


def test_the_table_has_a_row_for_each_pinned_component() -> None:
    assert set(rows()) == set(PINS)


@pytest.mark.parametrize("component", sorted(PINS))
def test_the_tested_version_is_the_pinned_one(component: str) -> None:
    row = rows()[component]
    assert {read() for read in PINS[component]} == {row["Tested"]}, component


@pytest.mark.parametrize("component", sorted(PINS))
def test_every_file_the_row_names_exists(component: str) -> None:
    named = re.findall(r"`([\w./-]+/[\w./-]+|[\w-]+\.(?:toml|lock|txt|mod))`", rows()[component]["Pinned in"])
    assert named, component
    for path in named:
        assert (ROOT / path).is_file(), f"{component}: {path}"


def test_the_supported_kubernetes_floor_is_the_charts() -> None:
    floor = yaml.safe_load(text("charts/mmrl-operator/Chart.yaml"))["kubeVersion"]
    assert floor == ">=1.30.0-0" and rows()["Kubernetes"]["Supported"].startswith("1.30 or newer")


def test_the_images_pythons_and_the_cpu_serving_build_are_the_ones_named() -> None:
    supported = rows()["Python"]["Supported"]
    operator_python = found(r"^FROM python:([0-9.]+)-slim", "docker/operator.Dockerfile")
    trainer_python = found(r"-py([0-9.]+)-", "docker/trainer.Dockerfile")
    assert f"operator image runs {operator_python}" in supported and f"trainer image {trainer_python}" in supported
    assert f"CPU build {vllm_cpu.VERSION}" in rows()["vLLM (serving)"]["Supported"]
    python_floor = tomllib.loads(text("pyproject.toml"))["project"]["requires-python"]
    assert supported.startswith(f"{python_floor.removeprefix('>=')} or newer")
