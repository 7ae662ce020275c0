"""README.md is for users: short, the quickstart its first link, a job that validates, and the two make targets it
promises (`make demo`, `make test`) that exist; contributor material lives in DEVELOPMENT.md."""

from __future__ import annotations

import re
from pathlib import Path

from mmrl_operator.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def test_the_readme_is_short_and_sends_users_to_the_quickstart_first() -> None:
    assert len(README.splitlines()) <= 150
    links = [t for t in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)", README)]
    assert links[0] == "docs/quickstart-hyperpod.md"
    assert "docs/reward-curve.png" in README and (ROOT / "docs" / "reward-curve.png").is_file()


def test_the_make_targets_readme_and_development_name_exist() -> None:
    named = set(re.findall(r"`make ([a-z-]+)", README))
    assert named == {"demo", "test"}
    for target in named:
        assert re.search(rf"^{target}:", MAKEFILE, re.MULTILINE), target
    development = (ROOT / "DEVELOPMENT.md").read_text()
    documented = set(re.findall(r"`make ([a-z][a-z-]*)", development))
    targets = set(re.findall(r"^([a-z-]+):", MAKEFILE, re.MULTILINE))
    assert named <= documented and documented <= targets, documented - targets


def test_the_readmes_job_validates(tmp_path: Path, capsys) -> None:
    (job,) = re.findall(r"```yaml\n(.*?)```", README, re.S)
    path = tmp_path / "job.yaml"
    path.write_text(job)
    assert main(["validate", "-f", str(path)]) == 0
    assert "ok: hyperpod-ns-research/qwen3vl-geo3k" in capsys.readouterr().out
