"""The `mmrl` CLI installs under a name that is ours: pyproject's distribution name is the one the code and every
documented `pip install` use (`mmrl` on PyPI is another project), and the wheel `make wheel` builds installs a
working `mmrl` command."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mmrl_operator.cli.version import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Where a user reads how to install it: the docs, and the hints the CLI itself prints.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "operator").rglob("*.py"))]
# The words after `pip install` up to the end of the line, a comment, a closing backquote or a shell operator.
PIP_INSTALL = re.compile(r"pip install ((?:'[^'\n]*'|\"[^\"\n]*\"|[^\s`'\"|;&)#]+|[ \t]|\\\n)+)")


def installs_of_this_project(text: str) -> list[str]:
    """The requirement each `pip install` in `text` names for this project (one starting `mmrl`, `.` or `dist/`),
    without its extras."""
    found = []
    for match in PIP_INSTALL.finditer(text):
        for word in shlex.split(match.group(1).replace("\\", "")):
            name = re.split(r"\[", word, maxsplit=1)[0]
            if name.startswith(("mmrl", ".", "dist/")):
                found.append(name)
    return found


def test_the_distribution_is_not_the_name_another_project_holds_on_pypi() -> None:
    assert PROJECT["name"] == DISTRIBUTION == "mmrl-operator"
    assert PROJECT["version"] == __version__
    assert PROJECT["scripts"] == {"mmrl": "mmrl_operator.cli.main:main"}
    local = tomllib.loads((ROOT / "local" / "pyproject.toml").read_text())["project"]
    assert local["dependencies"] == [DISTRIBUTION]


def test_every_documented_install_names_this_distribution() -> None:
    wheel = f"dist/{DISTRIBUTION.replace('-', '_')}-{__version__}-py3-none-any.whl"
    found = {doc.relative_to(ROOT).as_posix(): installs_of_this_project(doc.read_text()) for doc in DOCUMENTS}
    named = [(doc, name) for doc, names in found.items() for name in names]
    assert ("docs/cli.md", ".") in named and ("docs/cli.md", wheel) in named  # how to install it is written down
    wrong = [(doc, name) for doc, name in named if name not in (DISTRIBUTION, ".", wheel)]
    assert wrong == []


def test_the_scan_finds_installs_in_prose_and_commands() -> None:
    text = (
        "Run `pip install 'mmrl[plot]'`, or\n```\npip install --quiet \"mmrl-operator[operator]\" \\\n  torch"
        "  # not mmrl\npip install dist/mmrl_operator-0.1.0-py3-none-any.whl; mmrl --version\n```"
    )
    assert installs_of_this_project(text) == ["mmrl", "mmrl-operator", "dist/mmrl_operator-0.1.0-py3-none-any.whl"]


def test_validate_and_render_need_neither_the_kubernetes_client_nor_the_trainer_stack() -> None:
    # docs/cli.md: they run on the core dependencies alone (pydantic, PyYAML).
    absent = ["kubernetes", "kopf", "prometheus_client", "urllib3", "torch", "aiohttp", "mlflow", "PIL"]
    code = (
        f"import sys\nfor m in {absent!r}: sys.modules[m] = None\n"
        "from mmrl_operator.cli.main import main\n"
        f"sys.exit(main(['validate', '-f', {str(ROOT / 'examples')!r}]) or main(['render', '-f', "
        f"{str(ROOT / 'examples' / 'job.yaml')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kind: RayCluster" in done.stdout


def wheel_recipe() -> str:
    """The command of the Makefile's `wheel` target."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^wheel:.*\n\t(.+)$", makefile, re.MULTILINE)
    assert recipe, "the Makefile has no wheel target"
    return recipe.group(1)


def packaging_inputs(to: Path) -> Path:
    """What the wheel is built from, copied: setuptools builds in the tree, and this checkout may be in use."""
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("api", "operator", "trainer"):
        shutil.copytree(ROOT / part, to / part, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, to / name)
    return to


@pytest.mark.timeout(300)
def test_the_wheel_make_builds_installs_the_mmrl_command(tmp_path: Path) -> None:
    tree = packaging_inputs(tmp_path / "tree")
    command = wheel_recipe().replace("$(VPY)", shlex.quote(sys.executable))
    subprocess.run(command, shell=True, cwd=tree, check=True, capture_output=True, timeout=240)
    assert not (tree / "build").exists() and not (tree / "mmrl_operator.egg-info").exists()  # cleaned up
    (wheel,) = (tree / "dist").glob("*.whl")
    assert wheel.name == f"{DISTRIBUTION.replace('-', '_')}-{__version__}-py3-none-any.whl"
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # Only the installed wheel on the path (the dependencies come from this venv): not this checkout's sources.
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [str(site / "bin" / "mmrl"), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, f"mmrl {__version__}\n"), done.stderr
    where = subprocess.run(
        [sys.executable, "-c", "import mmrl_operator, importlib.metadata as m; print(mmrl_operator.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(site))
    assert not any(p.name.startswith("mmrl_local") for p in site.iterdir())  # the dev tooling stays out
    # The license pyproject declares, with its text: the Apache-2.0 LICENSE of the repository root.
    (dist_info,) = site.glob("mmrl_operator-*.dist-info")
    metadata = (dist_info / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines() and "License-File: LICENSE" in metadata
    assert (dist_info / "licenses" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
