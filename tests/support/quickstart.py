"""What the tests of docs/quickstart-hyperpod.md share: the values a reader exports in its step 1, a working
directory that looks like the checkout (without writing into it), and the images `make push` would push."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from tests.support import runbook

ROOT = runbook.ROOT
# Another registry than the placeholder in examples/, so a step that forgot to use $REGISTRY shows.
STEP_1 = {
    "AWS_REGION": "eu-west-1",
    "ACCOUNT": "210987654321",
    "REGISTRY": "210987654321.dkr.ecr.eu-west-1.amazonaws.com",
    "EKS_CLUSTER": "research-hyperpod",
    "BUCKET": "research-ml-bucket",
    "FSX_ID": "fs-0fedcba9876543210",
    "FSX_DNS": "fs-0fedcba9876543210.fsx.eu-west-1.amazonaws.com",
    "FSX_MOUNT": "abcdefgh",
    "EFA_INSTALLER_SHA256": "0" * 64,
}
PLACEHOLDER_REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
NAMESPACE = "hyperpod-ns-research"
JOB = ROOT / "examples" / "quickstart.yaml"
CHART_VALUES = ROOT / "examples" / "chart-values" / "quickstart.yaml"


def workdir(tmp: Path) -> Path:
    """A directory where the page's commands find charts/, examples/ and the Makefile as in the checkout (linked,
    never copied or written to), and write their own files (job.yaml, rendered.yaml) beside them."""
    work = tmp / "checkout"
    work.mkdir(parents=True, exist_ok=True)
    for name in ("charts", "examples", "docker", "Makefile"):
        if not (work / name).is_symlink():
            (work / name).symlink_to(ROOT / name)
    return work


def dry_run_make(tmp: Path) -> Path:
    """A directory holding a `make` that prints what it would run (`make -n`): the page's `make push` then builds
    and pushes nothing, and tells which images it would."""
    bin_dir = tmp / "dry-run-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    make = shutil.which("make")
    assert make, "make is not installed"
    wrapper = bin_dir / "make"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(make)} -n "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


def make_push_commands(tmp: Path) -> list[list[str]]:
    """The build and push commands of the page's `make push` step, as argument lists, with step 1's values."""
    work = workdir(tmp / "push")
    env = runbook.shell_env(STEP_1, path=[dry_run_make(tmp)])
    out = runbook.ran(runbook.block("make-push"), work, env)
    joined = re.sub(r"\\\n\s*", " ", out)  # the recipe's continued lines
    return [shlex.split(line) for line in joined.splitlines() if re.match(r"^\S+ (build|push) ", line)]


def pushed_images(tmp: Path) -> dict[str, str]:
    """Repository name -> image reference, for each image the step pushes."""
    pushed = [cmd[2] for cmd in make_push_commands(tmp) if cmd[1] == "push"]
    return {ref.rsplit("/", 1)[1].split(":")[0]: ref for ref in pushed}
